"""`estimate` on a plan that does not fit in GPU memory (review nit): the numbers are printed, then one error line and
exit code 1, as `launch` refuses the plan; and the per-stage gradient-reduce column says it runs over dp x cp (it is
non-zero on a dp 1 plan with cp > 1)."""

from __future__ import annotations

import json

from test_cli_errors import run_cli

GPT2 = ("-m", "gpt2-xl", "-c", "fasop-a10")
TOO_BIG = (*GPT2, "--tp", "1", "--dp", "1", "--micro-batch-size", "8", "--stages", "a10:48")


def test_a_plan_that_does_not_fit_prints_its_numbers_then_exits_1():
    run = run_cli("estimate", *TOO_BIG)
    assert run.code == 1, (run.code, run.stderr)
    assert "fits in memory" in run.stdout and "NO" in run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: does not fit in GPU memory: plan: stage 0 (a10) needs ")
    assert "`launch` refuses this plan" in errors[0]
    as_json = run_cli("estimate", *TOO_BIG, "--json")
    assert as_json.code == 1 and json.loads(as_json.stdout)["fits"] is False


def test_a_plan_that_fits_exits_0():
    run = run_cli("estimate", *GPT2, "--tp", "1", "--dp", "2", "--micro-batch-size", "1",
                  "--stages", "a10:12:full,a10:12:full,a10:12:full,a10:12:full")
    assert run.code in (0, None), run.stderr
    assert "error" not in run.stderr


def test_the_gradient_reduce_column_names_its_ranks():
    run = run_cli("estimate", "-m", "gpt2-large", "-c", "fasop-a10", "--tp", "2", "--dp", "1", "--cp", "2",
                  "--micro-batch-size", "1", "--stages", "a10:18,a10:18")
    assert run.code in (0, None), run.stderr
    assert "DP all-reduce" not in run.stdout
    assert "grad reduce: the stage's gradients over its dp x cp = 2 ranks" in " ".join(run.stdout.split())
    assert "gradient reduce (dp x cp) per iteration" in run.stdout
