"""--memory-headroom: the solver's plan leaves the headroom free, on the card's usable memory (issue 15)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from optsearch.candidates import SpaceOptions
from optsearch.costmodel import estimate
from optsearch.problem import DEFAULT_MEMORY_HEADROOM, build_problem
from optsearch.solver import solve
from optsearch.spec.budget import Budget

T4_USABLE_GIB = 14.755  # clusters/gpus.yaml: nvidia-smi's 15109 MiB on g4dn
A10G_USABLE_GIB = 22.488  # clusters/gpus.yaml: nvidia-smi's 23028 MiB
OPTIONS = SpaceOptions(micro_batch_sizes=(1, 2, 4), max_stages=4)


def _optsearch(args: list[str], check: bool = False):
    """`optsearch ARGS` through main() in this process (test_cli_errors.run_cli: its exit code, stdout and stderr),
    which spares each command the CLI's start-up (about 1 s of CPU as a process); check: the exit code is 0."""
    from test_cli_errors import run_cli

    run = run_cli(*args)
    assert not check or run.code == 0, (args, run.code, run.stderr)
    return run


@pytest.mark.parametrize("headroom", [0.0, 0.3, 0.5])
def test_the_optimum_leaves_the_headroom_free(headroom):
    problem = replace(build_problem("gpt2-medium", "amp-g4dn"), memory_headroom=headroom)
    result = solve(problem, Budget(objective="time"), options=OPTIONS)
    est = estimate(problem, result.plan)
    assert result.status == "optimal" and est.fits
    for stage in est.stages:
        assert stage.memory_bytes <= (1 - headroom) * T4_USABLE_GIB * 2**30 * (1 + 1e-12)


def test_more_headroom_never_gives_a_faster_plan():
    times = []
    for headroom in (0.0, 0.3, 0.5):
        problem = replace(build_problem("gpt2-medium", "amp-g4dn"), memory_headroom=headroom)
        times.append(estimate(problem, solve(problem, Budget(objective="time"), options=OPTIONS).plan).iteration_time_s)
    assert times[0] <= times[1] <= times[2] and times[0] < times[2]


def test_default_headroom_and_cli_option():
    assert build_problem("gpt2-medium", "amp-g4dn").memory_headroom == DEFAULT_MEMORY_HEADROOM == 0.10
    cmd = ["estimate", "--model", "gpt2-medium", "--cluster", "amp-g4dn", "--tp",
           "1", "--dp", "16", "--micro-batch-size", "2", "--stages", "g4dn.12xlarge:24", "--json",
           "--no-distributed-optimizer"]  # the 13.9 GiB plan (the optimizer states not sharded)
    loose = json.loads(_optsearch(cmd + ["--memory-headroom", "0"], check=True).stdout)
    tight_run = _optsearch(cmd + ["--memory-headroom", "0.3"])
    assert tight_run.code == 1 and "does not fit in GPU memory" in tight_run.stderr  # the numbers, then exit 1
    tight = json.loads(tight_run.stdout)
    assert loose["stages"][0]["memory_capacity_gib"] == pytest.approx(T4_USABLE_GIB)
    assert tight["stages"][0]["memory_capacity_gib"] == pytest.approx(0.7 * T4_USABLE_GIB)
    assert loose["fits"] and not tight["fits"]  # 13.9 GiB: fits 14.8, not 10.3
    bad = _optsearch(cmd + ["--memory-headroom", "1.5"])
    assert bad.code == 2 and "--memory-headroom" in bad.stderr
    nan = _optsearch(cmd + ["--memory-headroom", "nan"])
    assert nan.code == 2 and "error: --memory-headroom = 'nan': must be a number from 0 to 0.9" in nan.stderr


def test_a_plan_file_records_its_headroom_and_target(tmp_path):
    """`estimate --plan` and `launch` price the plan with the headroom it was solved with, not the default; a
    --memory-headroom given beside the file replaces it."""
    plan_path = tmp_path / "plan.json"
    solve_cmd = ["solve", "-m", "gpt2-xl", "-c", "fasop-a10", "--minimize",
                 "time", "--memory-headroom", "0.3", "--target", "fasop", "--out", str(plan_path), "--quiet"]
    _optsearch(solve_cmd, check=True)
    record = json.loads(plan_path.read_text())["problem"]
    assert record["memory_headroom"] == 0.3 and record["target"] == "fasop"
    estimate_cmd = ["estimate", "--plan", str(plan_path), "--json"]
    again = json.loads(_optsearch(estimate_cmd, check=True).stdout)
    assert again["stages"][0]["memory_capacity_gib"] == pytest.approx(0.7 * A10G_USABLE_GIB)
    told = json.loads(_optsearch(estimate_cmd + ["--memory-headroom", "0"], check=True).stdout)
    assert told["stages"][0]["memory_capacity_gib"] == pytest.approx(A10G_USABLE_GIB)
    record["memory_headroom"] = 7
    data = json.loads(plan_path.read_text())
    data["problem"] = record
    plan_path.write_text(json.dumps(data))
    bad = _optsearch(estimate_cmd)
    assert bad.code == 2 and "problem.memory_headroom = 7" in bad.stderr
