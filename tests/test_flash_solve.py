"""Issue 15: solve / estimate / launch for upstream Megatron-LM price the attention upstream runs by default.

Upstream's --transformer-impl transformer_engine and --attention-backend auto run Transformer Engine's flash (or cuDNN
fused) attention where the GPU has compute capability 8.0+ and the head dimension allows (a multiple of 8, at most
256): no s x s scores stored or moved. The CLI prices that for the megatron target (targets.engine_problem), the
launch says `--attention-backend flash` (or unfused / auto, as priced), and `--no-flash-attention` prices the scores
and launches `--attention-backend unfused`. The FASOP fork has no flash attention. docs/cost-model.md section 14.
"""

from __future__ import annotations

import json

import pytest
from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions
from optsearch.costmodel import estimate, flash_attention_on, layer_activation_bytes, layer_step_s
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.megatron import launch_files, megatron_args
from optsearch.plan import Plan, Stage, plan_from_dict
from optsearch.problem import build_problem, with_flash_attention
from optsearch.profile.analytic import flash_attention_error
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

from test_cli_errors import run_cli
from test_megatron_parse import _run_upstream, upstream  # noqa: F401  (the fixture: upstream's parser, or skip)
from test_solver import MAX_PLANS, assert_backends_equal_brute_force
from test_solver_memory import tight_problem

SOLVE = ["solve", "--model", "gpt2-small", "--cluster", "fasop-a10", "--minimize", "time", "--max-gpus", "8",
         "--max-cp", "1", "--quiet"]


def _solve(tmp_path, *extra: str) -> tuple[dict, object]:
    out = tmp_path / ("plan" + "".join(extra) + ".json")
    result = run_cli(*SOLVE, *extra, "--json", "--out", str(out))
    assert result.code in (0, None), result.stderr
    return json.loads(result.stdout), out


# ---- memory on hand-computed numbers -------------------------------------------------------------------------


def test_flash_memory_by_hand():
    """gpt3-1.3b (s 2048, h 2048, 16 heads of 128) on an A100 (8.0), tp 1, b 1, recompute none:
    scores stored: s b h (10 + 24) + 5 a s^2 b = 142,606,336 + 335,544,320 = 478,150,656 bytes;
    flash: s b h (10 + 24) + 4 a s b (fp32 log-sum-exp) = 142,606,336 + 131,072 = 142,737,408 bytes.
    Selective and full are the same with and without flash (no scores kept either way)."""
    base = build_problem("gpt3-1.3b", "aws-p4d")
    node, kind = base.cluster.node_types[0].name, base.model.kinds[0]
    flash = with_flash_attention(base, True)
    assert flash_attention_on(flash, node) and not flash_attention_on(base, node)
    assert layer_activation_bytes(base, node, kind, 1, 1, "none") == 478_150_656
    assert layer_activation_bytes(flash, node, kind, 1, 1, "none") == 142_737_408
    # tp 2 (sequence parallelism on by default): s b h (10/2 + 24/2) + 4 a s b / 2 = 71,303,168 + 65,536
    assert layer_activation_bytes(flash, node, kind, 2, 1, "none") == 71_368_704
    for mode in ("selective", "full"):
        assert layer_activation_bytes(flash, node, kind, 1, 1, mode) == layer_activation_bytes(base, node, kind, 1, 1,
                                                                                               mode)
    # time: the forward loses 10 B per score element at 1555 GB/s (A100-40GB), the backward twice that
    a_s2 = 16 * 2048 ** 2
    saving = 10 * a_s2 / (base.gpu_of(node).hbm_gbyte_per_s * 1e9)
    assert layer_step_s(base, node, kind, 1, 1, "none") - layer_step_s(flash, node, kind, 1, 1, "none") == (
        pytest.approx(3 * saving, rel=1e-9))


def test_flash_needs_ampere_and_a_head_dimension_transformer_engine_runs():
    """Transformer Engine runs flash attention on compute capability 8.0+ with head_dim % 8 == 0 and <= 256 (> 192 on
    8.0/9.0/10.0/12.0 only); elsewhere the engine falls back to unfused attention, and so does the price."""
    v100 = build_problem("gpt3-1.3b", "aws-p3")  # V100: 7.0
    assert "compute capability 7" in flash_attention_error(v100.model, v100.gpu_of(v100.cluster.node_types[0].name))
    flash_v100 = with_flash_attention(v100, True)
    node, kind = v100.cluster.node_types[0].name, v100.model.kinds[0]
    assert layer_activation_bytes(flash_v100, node, kind, 1, 1, "none") == layer_activation_bytes(v100, node, kind, 1,
                                                                                                   1, "none")
    xl = build_problem("gpt2-xl", "fasop-a10")  # 1600 / 16 = 100: not a multiple of 8
    assert "head dimension 100" in flash_attention_error(xl.model, xl.gpu_of("a10"))
    a10 = xl.gpu_of("a10")  # 8.6: heads of 224 do not run there, but do on an A100 (8.0)
    wide = xl.model.model_copy(update={"hidden_size": 224 * 8, "num_attention_heads": 8})
    assert "above 192" in flash_attention_error(wide, a10)
    assert flash_attention_error(wide, a10.model_copy(update={"compute_capability": 8.0})) is None
    unknown = GpuSpec(name="X", memory_gib=80, peak_fp16_tflop_per_s=300, hbm_gbyte_per_s=2000)
    assert "no compute_capability" in flash_attention_error(wide, unknown)


# ---- solve, estimate and launch ------------------------------------------------------------------------------


def test_solve_prices_flash_by_default_and_the_launch_says_so(tmp_path):
    payload, out = _solve(tmp_path)
    assert payload["problem"]["flash_attention"] is True
    plan = plan_from_dict(payload, "solve")
    problem = engine_problem("megatron", build_problem("gpt2-small", "fasop-a10"))
    assert problem.flash_attention and flash_attention_on(problem, "a10")
    est = estimate(problem, plan)
    assert est.iteration_time_s == pytest.approx(payload["estimate"]["iteration_time_s"], rel=1e-9)  # model agrees
    scores = estimate(with_flash_attention(problem, False), plan)
    assert est.iteration_time_s < scores.iteration_time_s  # the priced plan is the flash one, not the scores'
    # estimate --plan reprices it as solved (the file records flash_attention), launch states the backend
    priced = run_cli("estimate", "--plan", str(out), "--json")
    assert priced.code in (0, None), priced.stderr
    assert json.loads(priced.stdout)["iteration_time_s"] == pytest.approx(est.iteration_time_s, rel=1e-12)
    launched = run_cli("launch", str(out))
    assert launched.code in (0, None), launched.stderr
    assert "  --attention-backend flash\n" in launched.stdout


def test_no_flash_attention_prices_the_scores(tmp_path):
    payload, out = _solve(tmp_path, "--no-flash-attention")
    assert payload["problem"]["flash_attention"] is False
    plan = plan_from_dict(payload, "solve")
    scores = with_flash_attention(build_problem("gpt2-small", "fasop-a10"), False)
    est = estimate(scores, plan)
    assert est.iteration_time_s == pytest.approx(payload["estimate"]["iteration_time_s"], rel=1e-9)
    memory = [s["memory_gib"] for s in payload["estimate"]["stages"]]
    assert memory == pytest.approx([s.memory_bytes / 2**30 for s in est.stages], rel=1e-6)
    flash = estimate(with_flash_attention(scores, True), plan)
    if any(s.recompute == "none" and s.num_layers for s in plan.stages):  # the scores are stored: more memory
        assert max(s.memory_bytes for s in est.stages) > max(s.memory_bytes for s in flash.stages)
    launched = run_cli("launch", str(out))
    assert launched.code in (0, None) and "  --attention-backend unfused\n" in launched.stdout
    # estimate by hand: default flash, --no-flash-attention the scores, --target fasop none
    hand = ["estimate", "--model", "gpt2-small", "--cluster", "fasop-a10", "--tp", "1", "--dp", "4",
            "--micro-batch-size", "4", "--stages", "a10:12", "--json"]
    times = {flag: json.loads(run_cli(*hand, *flag).stdout)["iteration_time_s"]
             for flag in ((), ("--no-flash-attention", "--no-overlap-grad-reduce"), ("--target", "fasop"))}
    assert times[()] < times[("--no-flash-attention", "--no-overlap-grad-reduce")] == times[("--target", "fasop")]
    wrong = run_cli(*hand, "--target", "fasop", "--flash-attention")
    assert wrong.code == 2 and "has no flash attention; drop --flash-attention" in wrong.stderr


def test_launch_backend_follows_the_gpus_of_the_plan():
    """flash where every stage's GPU runs it, unfused where none does, auto (with a note) for a mix."""
    problem = engine_problem("megatron", build_problem("gpt3-1.3b", "amp-p3-g4dn"))  # V100 + T4: none
    names = [n.name for n in problem.cluster.node_types]
    one = Plan(tp=1, dp=1, micro_batch_size=1, stages=(Stage(node_type=names[0], num_layers=24),))
    assert megatron_args(problem, one).args[-2:] == ("--attention-backend", "unfused")
    p4d = engine_problem("megatron", build_problem("gpt3-1.3b", "aws-p4d"))
    mixed_cluster = p4d.cluster.model_copy(update={"node_types": [*p4d.cluster.node_types,
                                                                  *problem.cluster.node_types]})
    mixed = engine_problem("megatron", build_problem(p4d.model, mixed_cluster))
    a100, v100 = mixed.cluster.node_types[0].name, names[0]
    plan = Plan(tp=1, dp=1, micro_batch_size=1, stages=(Stage(node_type=a100, num_layers=12),
                                                        Stage(node_type=v100, num_layers=12)))
    margs = megatron_args(mixed, plan)
    assert "--attention-backend auto" in " ".join(margs.args)
    assert any(n.startswith(f"attention: --attention-backend auto, Transformer Engine's flash attention on {a100}")
               for n in margs.notes)
    with pytest.raises(UnsupportedPlanError, match="FASOP fork lacks"):
        launch_files(engine_problem("megatron", build_problem("t5-fasop", "fasop-a10")),
                     Plan(tp=1, dp=4, micro_batch_size=1, stages=(Stage(node_type="a10", num_layers=48),)), "fasop",
                     allow_no_fit=True)
    with pytest.raises(SpecError, match="has no flash attention"):
        engine_problem("fasop", problem, True)


@pytest.mark.parametrize("flash", [True, False])
def test_the_backend_passes_upstream_parser(upstream, monkeypatch, flash):  # noqa: F811
    """The emitted --attention-backend parses and validates with upstream's own parser (skipped without a checkout)."""
    problem = engine_problem("megatron", build_problem("gpt3-1.3b", "aws-p4d"), flash)
    node = problem.cluster.node_types[0].name
    plan = Plan(tp=2, dp=2, micro_batch_size=1, stages=(Stage(node_type=node, num_layers=12),
                                                        Stage(node_type=node, num_layers=12)))
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.attention_backend.name == ("flash" if flash else "unfused")


# ---- brute force on a small flash instance -------------------------------------------------------------------


def test_flash_optimum_equals_brute_force_on_both_backends():
    """The issue-14 tight-memory class (6 layers, hidden 1536, 24 heads of 64, seq 8192) on two 24 GiB A10 (8.6) and two
    16 GiB T4 (7.5) nodes: the scores (5 a s^2 b = 8 GB per layer and micro-batch) make recompute none costly; flash
    attention, which runs on the A10s only, lifts that there. Both backends equal brute force with and without flash,
    and the two optima differ (time: 3171 s with the scores, 1506 s with flash on the A10 stage)."""
    a10 = GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600, compute_capability=8.6)
    t4 = GpuSpec(name="T4", memory_gib=16, peak_fp16_tflop_per_s=65, hbm_gbyte_per_s=320, compute_capability=7.5)
    node = dict(gpus_per_node=1, num_nodes_available=2, intra_node_link="pcie", inter_node_gbit_per_s=40)
    problem = tight_problem(layers=6, hidden=1536, heads=24, seq=8192, gbs=8, gpus=[a10, t4], node_types=[
        dict(name="a10", gpu="A10", price_usd_per_node_hour=2.0, intra_node_gbyte_per_s=32, **node),
        dict(name="t4", gpu="T4", price_usd_per_node_hour=0.5, intra_node_gbyte_per_s=16, **node)])
    options = SpaceOptions(max_stages=3)
    budget = Budget(objective="time")
    assert count_plans(problem, budget, options, limit=MAX_PLANS) <= MAX_PLANS
    flash_problem = with_flash_attention(problem, True)
    assert flash_attention_on(flash_problem, "a10") and not flash_attention_on(flash_problem, "t4")
    scores = assert_backends_equal_brute_force(problem, budget, options)
    flash = assert_backends_equal_brute_force(flash_problem, budget, options)
    assert flash.objective_value < scores.objective_value
    assert all(s.recompute != "none" for s in scores.plan.stages if s.num_layers)
    assert any(s.recompute == "none" for s in flash.plan.stages if s.node_type == "a10" and s.num_layers)
