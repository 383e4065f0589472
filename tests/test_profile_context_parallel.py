"""Profile tables and context parallelism agree across commands (new-user review).

A measured or imported table holds times at the full sequence: it cannot price a rank's s / cp tokens, so solve
searches cp = 1 with it and estimate, launch, calibrate and validate refuse a cp > 1 plan (exit 2). A table that
`optsearch calibrate` fits on the analytic profile is the analytic profile times a factor per GPU: it says so
(`derived_from: analytic`) and prices cp as the analytic profile does, so solve with it finds plans at least as good
as a cp 2 plan estimate prices within the budget (the review's gpt2-xl on fasop-a100-a10: solve gave a cp 1 plan
at $51,540 where estimate priced the calibrated cp 2 plan at $49,768). Since issue 15 upstream's target searches cp > 1
only where flash attention runs (gpt2-xl's heads of 100 have none), so the cases are gpt2-large's (heads of 64),
priced as the megatron target prices them (targets.engine_problem).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import megatron_log, run_cli  # noqa: E402  (the real Megatron-LM log format)

from optsearch.costmodel import estimate  # noqa: E402
from optsearch.errors import ProfileError, SpecError  # noqa: E402
from optsearch.plan import Plan, Stage  # noqa: E402
from optsearch.problem import build_problem  # noqa: E402
from optsearch.profile import load_table  # noqa: E402
from optsearch.profile.calibrate import calibrated_table, fit, observe, parse_megatron_log  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402
from optsearch.targets import MEGATRON, engine_problem, prices_context_parallel, space_options  # noqa: E402
from optsearch.validate import Run, price  # noqa: E402

MODEL, CLUSTER = "gpt2-large", "fasop-a100-a10"
# near the plan `solve -m gpt2-large -c fasop-a100-a10 --max-time 30d` writes (one a100 stage of 36 layers, dp 2,
# cp 2; micro-batch 8 instead of 16, so that the same plan at cp 1 fits too)
CP2 = Plan(tp=1, dp=2, micro_batch_size=8, cp=2, distributed_optimizer=True,
           stages=(Stage(node_type="a100", num_layers=36),))


def _problem(profile: str = "analytic"):
    return engine_problem("megatron", build_problem(MODEL, CLUSTER, profile=profile))


def _calibrated(tmp_path: Path, iteration_s: float = 1.305) -> Path:
    """calibrate on the analytic profile from one log of the cp 2 plan; the table written and read back."""
    problem = _problem()
    log = parse_megatron_log(megatron_log(CP2, iteration_s, arguments={"context_parallel_size": 2,
                                                                       "num_layers": 36}), "ok.log")
    obs = [observe(log, CP2, None)]
    table = calibrated_table(problem, [CP2], fit(problem, obs), name="cal.csv")
    path = tmp_path / "cal.csv"
    table.save(path)
    return path


def _measured(tmp_path: Path, calibrated: Path) -> Path:
    """The same rows without the `derived_from` line: a table as measured or imported."""
    path = tmp_path / "measured.csv"
    path.write_text("".join(line for line in calibrated.read_text().splitlines(keepends=True)
                            if not line.startswith("# derived_from")))
    return path


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cp")
    cal = _calibrated(tmp)
    return cal, _measured(tmp, cal)


def test_calibrated_table_says_it_is_analytic_derived_and_prices_cp(tables):
    cal, measured = tables
    assert prices_context_parallel(load_table(cal))
    assert not prices_context_parallel(load_table(measured))
    with_cal = _problem(str(cal))
    assert 2 in space_options(MEGATRON, with_cal).context_parallel_sizes
    assert space_options(MEGATRON, _problem(str(measured))).context_parallel_sizes == (1,)
    # the table prices the cp 2 plan exactly as the analytic profile x the fitted factor does
    est = estimate(with_cal, CP2)
    assert est.iteration_time_s == pytest.approx(1.305, rel=1e-6)


def test_solve_with_calibrated_table_is_no_dearer_than_the_plan_estimate_prices(tables):
    from optsearch.solver import solve

    cal, _ = tables
    problem = _problem(str(cal))
    est = estimate(problem, CP2)
    budget = Budget(objective="cost", max_time_s=est.training_time_s * (1 + 1e-9))
    result = solve(problem, budget, options=space_options(MEGATRON, problem))
    assert result.status == "optimal"
    assert result.plan is not None
    assert estimate(problem, result.plan).cost_usd <= est.cost_usd * (1 + 1e-6)


@pytest.mark.parametrize("command", ["estimate", "launch"])
def test_estimate_and_launch_refuse_cp_with_a_measured_table(tables, command, capsys, monkeypatch):
    _, measured = tables
    hand = ["-m", MODEL, "-c", CLUSTER, "-p", str(measured), "--stages", "a100:36", "--tp", "1", "--dp", "2",
            "--micro-batch-size", "8", "--cp", "2"]
    args = [command, *hand] if command == "estimate" else [command, *hand, "--format", "megatron"]
    code, out, err = run_cli(args, capsys, monkeypatch)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: --cp 2: cp = 2 with profile ") and "cannot price a rank's s / cp = 512 tokens" in line
    assert "--profile analytic" in line
    assert out == ""
    # cp 1 with the same table is priced
    ok = [a if a != "2" or args[i - 1] != "--cp" else "1" for i, a in enumerate(args)]
    assert run_cli(ok, capsys, monkeypatch)[0] == 0


def test_calibrate_refuses_a_cp_run_on_a_measured_table(tables, tmp_path):
    _, measured = tables
    problem = build_problem(MODEL, CLUSTER, profile=str(measured))
    log = parse_megatron_log(megatron_log(CP2, 1.3, arguments={"context_parallel_size": 2}), "run.log")
    with pytest.raises(ProfileError, match=r"run\.log: cp = 2 with profile .*measured\.csv: .*cannot price"):
        fit(problem, [observe(log, CP2, None)])


def test_validate_refuses_a_cp_run_on_a_measured_table(tables):
    _, measured = tables
    run = Run(run_id="r1", group="g", source="s", model=MODEL, cluster=CLUSTER, global_batch_size=64, plan=CP2,
              measured_s=1.3, oom=False, precision=None, where="runs.csv row 1 (r1)")
    with pytest.raises(SpecError, match=r"runs\.csv row 1 \(r1\): --profile .*measured\.csv: cp = 2 with profile"):
        price([run], profile=str(measured))
    assert price([replace(run, plan=replace(CP2, cp=1, distributed_optimizer=False))], profile=str(measured))
