"""A budget search's early seeds before the budget descent (issue 14, round 10: first plans). Minimizing time under a
cost budget (or cost under a deadline), solve first prices the usual seeds of its seed search's cp = 1, v = 1 part
(solve(..., first_plan_only=True, seeds_only=True): quick plans only, no loop) and runs solver._budget_descent only
where they hold no plan that meets the budget; the seed search follows as before. Incumbents only: the answers stay
brute force's (tests/test_budget_descent.py, test_seed_search.py and test_budget_rows.py run budget searches through
it on both backends)."""

from __future__ import annotations

import functools

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions
from optsearch.solver import Memo, _seed_search, solve
from optsearch.spec.budget import Budget

from test_solver import _fasop_like


@functools.cache
def _rows():
    """FASOP-like, cost under a deadline D: D twice the fastest plan's time (the early seeds hold a plan: checked) and
    D 1.01 x it (they hold none: checked)."""
    problem, options = _fasop_like(), SpaceOptions()
    fastest = solve(problem, Budget(objective="time"), options=options).objective_value
    loose, tight = (Budget(objective="cost", max_time_s=fastest * f) for f in (2.0, 1.01))
    return problem, options, loose, tight


def _early(problem, options, budget):
    """The early seeds' answer for a cost-under-D row (the seed search's objective is time)."""
    return _seed_search(problem, budget.model_copy(update={"objective": "time"}), "cpsat", None, options,
                        Memo(problem, options), seeds_only=True)[0][0]


def test_the_descent_runs_only_where_the_early_seeds_hold_no_plan(monkeypatch):
    problem, options, loose, tight = _rows()
    assert _early(problem, options, loose).plan is not None and _early(problem, options, tight).plan is None
    calls = []
    descent = solver_module._budget_descent

    def recorded(memo, budget, time_limit_s, **kwargs):
        calls.append(budget)
        return descent(memo, budget, time_limit_s, **kwargs)

    monkeypatch.setattr(solver_module, "_budget_descent", recorded)
    got = solve(problem, loose, options=options, gap=0.5)  # (a gap: the order of the first steps is the point)
    assert got.plan is not None and calls == []  # a plan from the early seeds: no descent
    got = solve(problem, tight, options=options, gap=0.5)
    assert got.plan is not None and calls == [tight]


def test_seeds_only_never_claims_a_proof():
    """Without a plan the early seeds answer "timeout" (not "infeasible"); with one, "feasible" with no bound; the
    option belongs to first-plan-only searches."""
    problem, options, loose, tight = _rows()
    none = _early(problem, options, tight)
    assert none.status == "timeout" and none.plan is None
    some = _early(problem, options, loose)
    assert some.status == "feasible" and some.bound is None
    assert some.stats["candidates_explored"] == 0  # the seeds' quick plans, no model
    with pytest.raises(ValueError):
        solve(problem, loose, options=options, seeds_only=True)
