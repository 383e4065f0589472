"""A budget no plan meets: `solve` and `compare` print the same line (optsearch.infeasible.no_plan_reason, exit 1),
and where --max-gpus binds it names the fewest GPUs a plan needs, which is checked here by solving at that count
(a plan) and one below it (none)."""

from __future__ import annotations

import json

from test_cli_errors import run_cli

GPT2 = ("-m", "gpt2-xl", "-c", "fasop-a10")


def _error_line(run) -> str:
    assert run.code == 1, (run.code, run.stderr)
    return run.stderr.strip().splitlines()[-1]


def test_solve_and_compare_say_the_same_and_name_the_fewest_gpus():
    solve = _error_line(run_cli("solve", *GPT2, "--max-gpus", "2", "--quiet"))
    compare = _error_line(run_cli("compare", *GPT2, "--max-gpus", "2", "--methods", "cpsat,dp"))
    assert solve == compare == ("error: no plan meets --max-gpus 2 and fits in GPU memory; the fewest GPUs a plan "
                                "needs is 4")
    # the claim: a plan with 4 GPUs, none with 3
    run = run_cli("solve", *GPT2, "--max-gpus", "4", "--quiet", "--json")
    assert run.code in (0, None), run.stderr
    plan = json.loads(run.stdout)["plan"]
    assert plan["tp"] * plan.get("cp", 1) * plan["dp"] * len(plan["stages"]) == 4
    assert _error_line(run_cli("solve", *GPT2, "--max-gpus", "3", "--quiet")).endswith("the fewest GPUs a plan "
                                                                                         "needs is 4")


def test_compare_without_a_proof_keeps_each_method_s_status():
    """dp alone finding nothing proves nothing (it searches a subset): compare lists the methods instead."""
    line = _error_line(run_cli("compare", *GPT2, "--max-gpus", "2", "--methods", "dp"))
    assert line.startswith("error: no method found a plan that fits and meets the limits: dp infeasible"), line
