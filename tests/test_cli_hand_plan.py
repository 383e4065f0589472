"""A plan given by hand (`estimate` and `launch` without a plan file) takes the knobs `solve` decides: the same
options in both commands (optsearch/cli/options.py, built by estimate_cmd.hand_plan), the distributed optimizer
defaulting to the search's choice, so a hand plan with solve's knobs prices exactly as solve's plan file; launch by
hand emits the matching Megatron-LM flags, which upstream's parser accepts where a checkout is set."""

from __future__ import annotations

import json
import shlex

import pytest

from optsearch.megatron import megatron_args, parse_layout
from optsearch.plan import plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import engine_problem

from test_cli_errors import run_cli
from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401 (upstream: the fixture)

GPT2 = ("-m", "gpt2-xl", "-c", "fasop-a10")


def _hand_flags(plan: dict) -> list[str]:
    """The estimate/launch flags that give the plan of a plan file by hand."""
    stages = ",".join(f"{s['node_type']}:{s['num_layers']}:{s['recompute']}" for s in plan["stages"])
    flags = ["--tp", str(plan["tp"]), "--dp", str(plan["dp"]), "--micro-batch-size", str(plan["micro_batch_size"]),
             "--stages", stages]
    for key, flag in (("cp", "--cp"), ("ep", "--ep"), ("virtual_stages", "--virtual-stages"),
                      ("recompute_num_layers", "--recompute-num-layers")):
        if key in plan:
            flags += [flag, str(plan[key])]
    return flags


def _json(*args: str) -> dict:
    run = run_cli(*args, "--json")
    assert run.code in (0, None), run.stderr
    return json.loads(run.stdout)


def test_hand_plan_with_solves_knobs_prices_as_solves_plan_file(tmp_path):
    """gpt2-xl on fasop-a100-a10: solve picks cp 2 x dp 2 with the distributed optimizer; the same knobs by hand
    (no optimizer flag) give the same plan and the same estimate as `estimate --plan`."""
    path = tmp_path / "plan.json"
    run = run_cli("solve", "-m", "gpt2-xl", "-c", "fasop-a100-a10", "--quiet", "--out", str(path))
    assert run.code in (0, None), run.stderr
    solved = json.loads(path.read_text())
    plan = solved["plan"]
    assert plan["distributed_optimizer"] is True and plan["dp"] * plan.get("cp", 1) > 1  # the case the defect hit
    from_file = _json("estimate", "--plan", str(path))
    by_hand = _json("estimate", "-m", "gpt2-xl", "-c", "fasop-a100-a10", *_hand_flags(plan))
    assert by_hand == from_file
    assert by_hand["cost_usd"] == solved["estimate"]["cost_usd"]
    # the flag's two settings: on is the default here, off prices another plan (the full all-reduce, unsharded states)
    on = _json("estimate", "-m", "gpt2-xl", "-c", "fasop-a100-a10", *_hand_flags(plan), "--distributed-optimizer")
    off_run = run_cli("estimate", "-m", "gpt2-xl", "-c", "fasop-a100-a10", *_hand_flags(plan),
                      "--no-distributed-optimizer", "--json")
    off = json.loads(off_run.stdout)
    assert off_run.code == (0 if off["fits"] else 1), off_run.stderr  # estimate exits 1 on a plan that does not fit
    assert on == by_hand
    assert "distributed_optimizer" not in off["plan"]
    assert off["stages"][0]["memory_gib"] > on["stages"][0]["memory_gib"]
    # and launch by hand writes solve's Megatron-LM arguments
    launched = run_cli("launch", "-m", "gpt2-xl", "-c", "fasop-a100-a10", *_hand_flags(plan))
    assert launched.code in (0, None), launched.stderr
    assert _launch_args(launched.stdout) == solved["megatron"]["args"]


def test_default_follows_the_search_choice():
    base = ["estimate", *GPT2, "--tp", "1", "--micro-batch-size", "1", "--balance", "12-12-12-12"]
    assert _json(*base, "--dp", "4")["plan"]["distributed_optimizer"] is True
    assert "distributed_optimizer" not in _json(*base, "--dp", "1")["plan"]  # dp x cp = 1: nothing to shard
    # cp needs flash attention upstream (issue 15; estimate refuses gpt2-xl's heads of 100): gpt2-large's heads of 64
    large = ["estimate", "-m", "gpt2-large", *GPT2[2:], "--tp", "1", "--micro-batch-size", "1", "--balance", "18-18"]
    assert _json(*large, "--dp", "1", "--cp", "2")["plan"]["distributed_optimizer"] is True


def _launch_args(text: str) -> list[str]:
    """MEGATRON_ARGS of a printed megatron_args.sh."""
    body = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)", 1)[0]
    return shlex.split(body)


# (model, flags). Context parallelism needs flash attention upstream (Transformer Engine's unfused attention has no
# cp; issue 15), which gpt2-xl's heads of 100 rule out: the cp cases take gpt2-large (36 layers, heads of 64).
LAUNCH_CASES = [
    ("gpt2-large", ["--tp", "2", "--dp", "2", "--cp", "2", "--balance", "9-9-9-9"]),
    ("gpt2-large", ["--tp", "2", "--dp", "2", "--cp", "2", "--balance", "10-8-10-8", "--virtual-stages", "2"]),
    ("gpt2-xl", ["--tp", "1", "--dp", "4", "--balance", "10-14-12-12", "--virtual-stages", "2",
                 "--no-distributed-optimizer"]),
    ("gpt2-xl", ["--tp", "1", "--dp", "4", "--balance", "10-13-13-12", "--recompute-num-layers", "5"]),
    ("gpt2-xl", ["--tp", "1", "--dp", "1", "--balance", "10-13-13-12", "--recompute-num-layers", "5",
                 "--distributed-optimizer"]),
]


@pytest.mark.parametrize("model, args", LAUNCH_CASES)
def test_launch_by_hand_emits_the_knob_flags(model, args):
    """launch by hand writes exactly the arguments of the plan estimate prices with the same flags."""
    flags = ["-m", model, "-c", "fasop-a10", "--micro-batch-size", "1", *args]
    plan = plan_from_dict(_json("estimate", *flags)["plan"])
    run = run_cli("launch", *flags)
    assert run.code in (0, None), run.stderr
    got = _launch_args(run.stdout)
    assert got == list(megatron_args(engine_problem("megatron", build_problem(model, "fasop-a10")), plan).args)
    assert ("--use-distributed-optimizer" in got) == ("--no-distributed-optimizer" not in args and
                                                      (plan.dp * plan.cp > 1 or "--distributed-optimizer" in args))
    assert ("--context-parallel-size" in got) == ("--cp" in args)
    if "--cp" in args:
        assert got[got.index("--context-parallel-size") + 1] == "2"
    if "--recompute-num-layers" in args:
        i = got.index("--recompute-method")
        assert got[i:i + 4] == ["--recompute-method", "block", "--recompute-num-layers", "5"]
    if "--virtual-stages" in args:  # the layout lists v x pp = 8 virtual stages
        layout = parse_layout(got[got.index("--pipeline-model-parallel-layout") + 1])
        assert len(layout) == 8 and sum(layout) == sum(s.num_layers for s in plan.stages)


@pytest.mark.parametrize("model, args", LAUNCH_CASES)
def test_launch_by_hand_passes_upstream_validation(upstream, monkeypatch, model, args):  # noqa: F811
    """The plans of the launch cases through upstream's parse_args and validate_args: dp, cp, pp, the distributed
    optimizer, block recomputation and the virtual pipeline size agree with the plan."""
    plan = plan_from_dict(_json("estimate", "-m", model, "-c", "fasop-a10", "--micro-batch-size", "1", *args)["plan"])
    problem = engine_problem("megatron", build_problem(model, "fasop-a10"))  # as launch builds it
    if plan.virtual_stages == 1:
        _check(upstream, monkeypatch, problem, plan)
        return
    _, parsed, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert parsed.virtual_pipeline_model_parallel_size == plan.virtual_stages
    assert (parsed.data_parallel_size, parsed.context_parallel_size) == (plan.dp, plan.cp)
    assert parsed.use_distributed_optimizer == plan.distributed_optimizer


@pytest.mark.parametrize("command", ["estimate", "launch"])
@pytest.mark.parametrize("args,message", [
    (["--set-job-off", "--distributed-optimizer"],
     "error: --distributed-optimizer: the job sets distributed_optimizer = false (off for every plan); drop one of "
     "them"),
    (["--set-job-on", "--no-distributed-optimizer"],
     "error: --no-distributed-optimizer: the job sets distributed_optimizer = true (on wherever dp x cp > 1; here dp "
     "4 x cp 1); drop one of them"),
    (["--cp", "0"], "error: Invalid value for '--cp': Input should be greater than or equal to 1"),
    (["--virtual-stages", "5"],
     "error: --virtual-stages 5: stage 0 holds 12 layers, not a multiple of 5 (each stage's layers split into 5 equal "
     "chunks)"),
    (["--recompute-num-layers", "2", "--virtual-stages", "2"],
     "error: --recompute-num-layers 2 with --virtual-stages 2: Megatron-LM applies block recomputation to each model "
     "chunk, which optsearch does not price; drop one of them"),
    (["--pp", "3"], "error: --pp = 3 but 4 stages were given"),
])
def test_hand_plan_errors_in_one_line(tmp_path, command, args, message):
    model = "gpt2-xl"
    if args[0].startswith("--set-job"):  # a model whose job forces the optimizer (no --set on estimate/launch)
        import yaml

        spec = build_problem("gpt2-xl", "fasop-a10").model.model_dump(mode="json", exclude_none=True)
        spec["default_job"]["distributed_optimizer"] = args[0] == "--set-job-on"
        model = str(tmp_path / "model.yaml")
        (tmp_path / "model.yaml").write_text(yaml.safe_dump(spec))
        args = args[1:]
    run = run_cli(command, "-m", model, "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1",
                  "--balance", "12-12-12-12", *args)
    assert run.code == 2 and run.stdout == ""
    assert run.stderr.strip() == message


@pytest.mark.parametrize("command", ["estimate", "launch"])
def test_plan_file_refuses_the_hand_plan_flags(tmp_path, command):
    path = tmp_path / "plan.json"
    run = run_cli("solve", *GPT2, "--quiet", "--out", str(path))
    assert run.code in (0, None), run.stderr
    plan_args = ["--plan", str(path)] if command == "estimate" else [str(path)]
    run = run_cli(command, *plan_args, "--cp", "2", "--virtual-stages", "2", "--recompute-num-layers", "3",
                  "--no-distributed-optimizer")
    assert run.code == 2 and run.stdout == ""
    prefix = f"--plan {path}: the file gives" if command == "estimate" else f"{path}: the plan file gives"
    assert run.stderr.strip() == (f"error: {prefix} the plan; drop --cp, --virtual-stages, --recompute-num-layers, "
                                  "--no-distributed-optimizer")
    run = run_cli(command, *plan_args, "--pp", "3")
    assert run.code == 2 and run.stderr.strip().endswith(f"--pp = 3 but {path} has 1 stages")
