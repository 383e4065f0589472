"""What issue 16's knobs left out of the CLI: `estimate --virtual-stages / --recompute-num-layers` (with their
rules, one line and exit 2 each), whatif/pareto CSV columns for cp, ep, v, the distributed optimizer and block
recomputation (as their JSON has them), and Target.summary naming every capability. The emitted Megatron-LM arguments
of plans given by the new flags run through upstream's parser where a checkout is set (test_megatron_parse)."""

from __future__ import annotations

import csv
import importlib
import io
import json

import pytest
import yaml

from optsearch.costmodel import estimate
from optsearch.plan import Plan, parse_balance, plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import FASOP, MEGATRON

from test_baselines import INSTANCES, _run_cli
from test_dp_knobs import moe_problem
from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401 (upstream: the fixture)

ESTIMATE = ["estimate", "-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1"]


def _estimate_json(*args: str) -> dict:
    code, out, err = _run_cli([*ESTIMATE, *args, "--json"])
    assert code == 0, err
    return json.loads(out)


def _plan(balance: str, **knobs) -> Plan:
    return Plan(tp=1, dp=4, micro_batch_size=1, stages=parse_balance(balance, "a10", knobs.pop("recompute", "none")),
                **knobs)


# ---- estimate --virtual-stages / --recompute-num-layers -------------------------------------------------------------


def test_estimate_virtual_stages_prices_the_interleaved_plan():
    problem = build_problem("gpt2-xl", "fasop-a10")
    got = _estimate_json("--balance", "10-14-12-12", "--virtual-stages", "2")
    assert got["plan"]["virtual_stages"] == 2
    # dp 4: the distributed optimizer on, as the search chooses (test_cli_hand_plan)
    assert got["iteration_time_s"] == estimate(problem, _plan("10-14-12-12", virtual_stages=2,
                                                              distributed_optimizer=True,
                                                              ddp_average_in_collective=True)).iteration_time_s
    # smaller bubble (v = 1 without the grad-reduce overlap, which the interleaved plan does not get: section 7c)
    assert got["iteration_time_s"] < _estimate_json("--balance", "10-14-12-12",
                                                    "--no-overlap-grad-reduce")["iteration_time_s"]
    # the same plan as upstream's layout of v x pp = 8 virtual stages (chunk k of rank r at k pp + r); eight stages of
    # t*5..t*7 were refused before as "could expand to more than 1,000,000 layers" (the product of the repeat counts)
    layout = _estimate_json("--layout", "Et*5|t*7|t*6|t*6|t*5|t*7|t*6|t*6L", "--virtual-stages", "2")
    assert layout == got


def test_estimate_recompute_num_layers_prices_block_recomputation():
    problem = build_problem("gpt2-xl", "fasop-a10")
    got = _estimate_json("--balance", "10-13-13-12", "--recompute-num-layers", "5")
    assert got["plan"]["recompute_num_layers"] == 5
    assert {s["recompute"] for s in got["plan"]["stages"]} == {"full"}
    expected = estimate(problem, _plan("10-13-13-12", recompute="full", recompute_num_layers=5,
                                       distributed_optimizer=True, overlap_grad_reduce=True,
                                       ddp_average_in_collective=True))  # the search's setting (cost-model 8c)
    assert got["iteration_time_s"] == expected.iteration_time_s
    assert [s["recomputed_layers"] for s in got["stages"]] == [5, 5, 5, 5]
    assert _estimate_json("--balance", "10-13-13-12", "--recompute-num-layers", "5", "--recompute", "full") == got
    stages = _estimate_json("--stages", "a10:10,a10:13,a10:13:full,a10:12", "--recompute-num-layers", "5")
    assert stages == got


@pytest.mark.parametrize("args,message", [
    (["--balance", "12-12-12-12", "--virtual-stages", "5"],
     "error: --virtual-stages 5: stage 0 holds 12 layers, not a multiple of 5 (each stage's layers split into 5 equal "
     "chunks)"),
    (["--balance", "48", "--virtual-stages", "2"],
     "error: plan: virtual_stages = 2 needs pp > 1 (Megatron-LM's interleaved schedule); pp = 1"),
    (["--layout", "Et*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6L", "--virtual-stages", "3"],
     "error: --layout = 'Et*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6L': 8 virtual stages; with --virtual-stages 3 it must list "
     "3 x pp of them (chunk k of stage r at position k x pp + r)"),
    (["--layout", "Et*5|t*7|t*6|t*6|t*6|t*7|t*6|t*5L", "--virtual-stages", "2"],
     "error: --layout = 'Et*5|t*7|t*6|t*6|t*6|t*7|t*6|t*5L': rank 0 chunks of 5-6 layers; optsearch plans equal "
     "chunks on every rank"),
    (["--balance", "12-12-12-12", "--virtual-stages", "2", "--recompute-num-layers", "2"],
     "error: --recompute-num-layers 2 with --virtual-stages 2: Megatron-LM applies block recomputation to each model "
     "chunk, which optsearch does not price; drop one of them"),
    (["--balance", "10-13-13-12", "--recompute-num-layers", "5", "--recompute", "selective"],
     "error: --recompute-num-layers 5 with --recompute selective: block recomputation is full recomputation of the "
     "first N layers of every stage; drop --recompute or say full"),
    (["--stages", "a10:24:selective,a10:24", "--recompute-num-layers", "5"],
     "error: --recompute-num-layers 5: stage 0 says selective; block recomputation is full recomputation of the first "
     "N layers of every stage"),
    (["--balance", "10-13-13-12", "--recompute-num-layers", "0"],
     "error: Invalid value for '--recompute-num-layers': Input should be greater than or equal to 1"),
    (["--balance", "10-13-13-12", "--virtual-stages", "0"],
     "error: Invalid value for '--virtual-stages': Input should be greater than or equal to 1"),
])
def test_estimate_knob_flags_refuse_bad_input_in_one_line(args, message):
    code, out, err = _run_cli([*ESTIMATE, *args])
    assert code == 2 and out == ""
    assert err.strip() == message


def test_estimate_plan_file_refuses_the_knob_flags(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_plan("12-12-12-12").to_dict()))
    code, out, err = _run_cli(["estimate", "--plan", str(path), "-m", "gpt2-xl", "-c", "fasop-a10",
                               "--virtual-stages", "2", "--recompute-num-layers", "3"])
    assert code == 2
    assert f"--plan {path}: the file gives the plan; drop --virtual-stages, --recompute-num-layers" in err


@pytest.mark.parametrize("args", [
    ["--balance", "10-14-12-12", "--virtual-stages", "2"],
    ["--layout", "Et*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6L", "--virtual-stages", "2", "--recompute", "selective"],
    ["--balance", "10-13-13-12", "--recompute-num-layers", "5"],
])
def test_plans_from_the_knob_flags_pass_upstream_validation(upstream, monkeypatch, args):  # noqa: F811
    """The plan `estimate` priced, emitted by launch's megatron format and parsed by upstream's parse_args and
    validate_args: dp, pp, the recomputation, N, and the virtual size and layers per (rank, chunk) agree."""
    plan = plan_from_dict(_estimate_json(*args)["plan"])
    problem = build_problem("gpt2-xl", "fasop-a10")
    if plan.virtual_stages == 1:
        _check(upstream, monkeypatch, problem, plan)
        return
    margs, parsed, argument_utils, block = _run_upstream(upstream, monkeypatch, problem, plan)
    assert parsed.virtual_pipeline_model_parallel_size == plan.virtual_stages
    assert (parsed.pipeline_model_parallel_size, parsed.data_parallel_size) == (plan.pp, plan.dp)
    assert parsed.recompute_granularity == {"none": None, "selective": "selective"}[plan.stages[0].recompute]
    try:
        importlib.import_module("transformer_engine")
    except ImportError:
        parsed.apply_rope_fusion = False  # a kernel choice; without Transformer Engine the config refuses it
    layout = argument_utils.core_transformer_config_from_args(parsed).pipeline_model_parallel_layout
    decoder = importlib.import_module("megatron.core.transformer.enums").LayerType.decoder
    got = [[layout.layout[r][k].count(decoder) for k in range(plan.virtual_stages)] for r in range(plan.pp)]
    assert got == [[s.num_layers // plan.virtual_stages] * plan.virtual_stages for s in plan.stages]


# ---- whatif / pareto CSV ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["two-types", "moe"])
def test_pareto_csv_has_the_knob_columns_of_its_json(tmp_path, name):
    p = INSTANCES["two-types"] if name == "two-types" else moe_problem()
    m, c = tmp_path / "m.yaml", tmp_path / "c.yaml"
    m.write_text(yaml.safe_dump(p.model.model_dump(mode="json", exclude_none=True)))
    cluster = p.cluster.model_dump(mode="json", exclude_none=True)
    for gpu in cluster["gpus"]:  # Ampere: flash attention, which context parallelism needs upstream (issue 15)
        gpu.setdefault("compute_capability", 8.0)
    c.write_text(yaml.safe_dump(cluster))
    code, out, err = _run_cli(["pareto", "-m", str(m), "-c", str(c), "--json", "--csv", str(tmp_path / "f.csv")])
    assert code == 0, err
    points = json.loads(out)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "f.csv").read_text())))
    assert len(rows) == len(points) >= 2
    seen = set()
    for point, row in zip(points, rows):
        plan = point["plan"]
        for key, default in (("cp", 1), ("ep", 1), ("virtual_stages", 1), ("distributed_optimizer", False)):
            assert row[key] == str(plan.get(key, default)), (key, row, plan)
            seen.add((key, str(plan.get(key, default))))
        assert row["recompute_num_layers"] == str(plan.get("recompute_num_layers", ""))
        assert row["recompute"] == "/".join(dict.fromkeys(s["recompute"] for s in plan["stages"] if s["num_layers"]))
    # the frontiers use the knobs, so the columns are not all defaults
    assert ("cp", "2") in seen if name == "two-types" else ("ep", "2") in seen
    assert ("distributed_optimizer", "True") in seen


def test_csv_writes_interleaved_and_block_plans():
    from optsearch.cli.whatif_cmd import points_csv
    from optsearch.search import SearchResult
    from optsearch.spec.budget import Budget
    from optsearch.whatif import Point

    problem = build_problem("gpt2-xl", "fasop-a10")
    rows = []
    for plan in (_plan("10-14-12-12", virtual_stages=2),
                 _plan("10-13-13-12", recompute="full", recompute_num_layers=5)):
        result = SearchResult(method="cpsat", status="feasible", objective="cost", solve_time_s=0.0, plan=plan,
                              estimate=estimate(problem, plan))
        rows.append(Point(budget=Budget(), result=result, problem=problem))
    first, second = csv.DictReader(io.StringIO(points_csv(rows)))
    assert (first["virtual_stages"], first["recompute"], first["recompute_num_layers"]) == ("2", "none", "")
    assert (second["virtual_stages"], second["recompute"], second["recompute_num_layers"]) == ("1", "block 5", "5")


# ---- Target.summary ---------------------------------------------------------------------------------------------


def test_target_summary_names_every_capability():
    assert MEGATRON.summary() == (
        "megatron: upstream NVIDIA/Megatron-LM (main); decoder-only models, encoder-only (BERT) with cp = 1; "
        "encoder-decoder (T5) with pp <= 1; one recomputation mode for all stages (or block: first N layers of each); free node order; any GPUs per node; "
        "context parallelism 1/2/4/8; interleaved pipeline v = 1/2/3/4; mixture of experts with expert parallelism; "
        "distributed optimizer wherever dp x cp > 1")
    assert FASOP.summary() == (
        "fasop: FASOP's Megatron-LM fork (AvatarHwang/FASOP, Megatron-LM-2); only its models gpt2, Bert, T5; "
        "encoder-decoder (T5) with every stage wholly encoder or decoder; one recomputation mode for all stages (or "
        "block: first N layers of each); node types in the cluster's order; one GPU count per node for all nodes; no "
        "context parallelism; no interleaved pipeline; no mixture of experts; distributed optimizer wherever "
        "dp x cp > 1")
    code, out, _ = _run_cli(["solve", "--help"])
    assert code == 0 and "interleaved" in out and "mixture" in out  # --target's help is built from the summaries
