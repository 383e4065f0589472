"""Issue 14, item 3: a first plan early, and --time-limit kept, on large pools; the paths that make it so stay exact."""

from __future__ import annotations

import math

import pytest

from optsearch.candidates import SpaceOptions, node_uses
from optsearch.formulation import positional
from optsearch.formulation.model import Candidate, skeleton
from optsearch.formulation.positional import OutOfTime, positional_bound
from optsearch.search import budget_violations
from optsearch.solver import process_age_s, solve
from optsearch.spec.budget import Budget

from test_solver import AFTER_DEADLINE_CPU_S, _fasop_like, cpu_seconds, on_cpu_clock


def _timed_solve(problem, limit_s: float, monkeypatch):
    """The solve with its limit on CPU time (on_cpu_clock: machine load stretches neither), the CPU seconds it took
    (this process and its CBC children) and the CPU time the limit allows: limit x 1.1 + the after-deadline work. The
    wall time of a whole command against its limit is measured in bench/objective_grid.py, not here."""
    on_cpu_clock(monkeypatch)
    cpu0 = cpu_seconds()
    result = solve(problem, Budget(objective="time"), time_limit_s=limit_s)
    return result, cpu_seconds() - cpu0, limit_s * 1.1 + AFTER_DEADLINE_CPU_S


def test_minimizing_time_on_a_large_pool_gives_a_plan_within_the_limit(monkeypatch):
    """GPT-2 XL on 4 x 256 nodes, minimize time: the first candidate's positional bound alone took 25 s before; now
    the quick plans come first and the programmes stop at the deadline."""
    from optsearch.edits import edited_problem

    problem = edited_problem("gpt2-xl", "mixed-pool-8k", [])
    result, cpu, allowed_s = _timed_solve(problem, 5.0, monkeypatch)
    # the positional floors at the largest mark close it (m = 1) in about 3 s of CPU; if it stops at the limit it must
    # do so with a plan
    assert result.plan is not None and result.status in ("optimal", "feasible")
    assert cpu <= allowed_s, cpu
    problem = edited_problem("gpt3-175b", "mixed-pool-8k", [])
    result, cpu, allowed_s = _timed_solve(problem, 2.0, monkeypatch)
    assert result.status == "feasible" and result.plan is not None
    assert cpu <= allowed_s, cpu
    assert result.stats["first_plan_s"] <= result.solve_time_s <= cpu + 1e-6
    assert result.bound is not None and result.bound <= result.objective_value


def _candidate(problem, tp=1, dp=2, mbs=1, pp=4):
    return Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=tuple(node_uses(problem, tp, dp, mbs)))


@pytest.mark.parametrize("objective", ["cost", "time"])
def test_a_positional_bound_stopped_at_its_deadline_leaves_the_tables_right(objective, monkeypatch):
    """OutOfTime may stop the programmes anywhere; what they keep must still give exactly the bound a fresh skeleton
    gives (the all-reduce bisection used to add its parts into the kept array one by one)."""
    problem, options = _fasop_like(), SpaceOptions()
    budget = Budget(objective=objective)
    cand = _candidate(problem)
    want = positional_bound(skeleton(problem, cand, options), budget)
    with pytest.raises(OutOfTime):
        positional_bound(skeleton(problem, cand, options), budget, deadline=0.0)  # long past
    real, calls = positional._on_time, {"n": 0}
    for stop_after in (1, 3, 7, 15, 40):
        sk = skeleton(problem, cand, options)

        def stop(deadline, stop_after=stop_after):
            calls["n"] += 1
            if deadline is not None and calls["n"] > stop_after:
                raise OutOfTime
        calls["n"] = 0
        monkeypatch.setattr(positional, "_on_time", stop)
        try:
            positional_bound(sk, budget, deadline=1e18)
        except OutOfTime:
            pass
        monkeypatch.setattr(positional, "_on_time", real)
        assert positional_bound(sk, budget) == want, stop_after


def test_the_first_plan_only_search_returns_a_plan_that_meets_the_budget():
    problem, options = _fasop_like(), SpaceOptions(max_stages=6)
    exact = solve(problem, Budget(objective="time"), options=options)
    budget = Budget(objective="cost", max_time_s=exact.objective_value * 1.3)
    first = solve(problem, budget, options=options, first_plan_only=True)
    assert first.plan is not None and first.status in ("feasible", "optimal")
    assert not budget_violations(first.plan, first.estimate, budget)
    best = solve(problem, budget, options=options)
    assert best.status == "optimal" and best.objective_value <= first.objective_value * (1 + 1e-9)


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_a_budget_search_seeded_by_the_other_objective_equals_brute_force(solver):
    """Time under a cost budget on a T5-like model (no quick plans): the seed search for cost runs first and its
    plan is the first incumbent; the answer must still equal brute force."""
    from priced import solve_exhaustive

    from test_solver_certificate import _two_kinds

    problem, options = _two_kinds(), SpaceOptions(max_stages=2)
    cheapest = solve_exhaustive(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.2)
    truth = solve_exhaustive(problem, budget, options=options)
    got = solve(problem, budget, solver=solver, options=options)
    assert "seed_s" in got.stats
    assert got.status == truth.status == "optimal"
    assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6)


def test_process_age_counts_the_start_up():
    age = process_age_s()
    assert 0.0 < age < 24 * 3600 and math.isfinite(age)
