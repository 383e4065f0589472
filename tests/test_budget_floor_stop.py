"""Time under a cost budget: the in-flight budget walk (inflight._time_under_cost) walks only the intervals where the
floor rent R(inf) x it(M_j) fits the budget (inflight.BUDGET_FLOOR_STOP, _fitting_intervals; issue 14, item 3, round
19, budgetlow; docs/solver.md "Round 19: ... (budgetlow, 2026-11-24)").

The walk keeps a bucket only where R(M_j) x its time fits, R(M_j) >= R(inf) and the time >= it(M_j), which grows with
j: from the first interval where R(inf) x it(M_j) breaks the budget nothing is kept. So the in-flight bound is the same
with the stop as without, bit for bit, on every candidate and budget (here: a fast, dear type beside a cheap one,
budgets at the cheapest and the median plan's exact cost and 5 % above, through the solver's list and its refined and
in-flight steps; and every in-flight table of that instance under budgets around its floor rent x first iteration),
and below that floor the walk prices one rent row instead of its intervals' (counted: the stop is not vacuous)."""

from __future__ import annotations

import math

import numpy as np

import optsearch.inflight as inflight
import optsearch.solver as solver
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import space_plans
from test_budget_time_lift import _coupled


def _bounds(problem, options, stop: bool) -> tuple[list, int]:
    """Every listed candidate's in-flight bound under each budget (a fresh memo: the kept tables start empty), and how
    many rows the walks' rent programmes (_least_rent) priced (the floor rent is one row)."""
    costs = sorted({round(est.cost_usd, 6) for _, _, est in space_plans(problem, options)})
    picks = [costs[0], costs[len(costs) // 2]] if costs else []
    budgets = [Budget(objective="time", max_cost_usd=c * s) for c in picks for s in (1.0, 1.05)]
    switch, least_rent = inflight.BUDGET_FLOOR_STOP, inflight._least_rent
    calls = [0]

    def counted(tab, caps):
        calls[0] += len(caps)
        return least_rent(tab, caps)

    inflight.BUDGET_FLOOR_STOP, inflight._least_rent = stop, counted
    try:
        out = []
        for budget in budgets:
            memo = solver.Memo(problem, options)
            for item in solver._candidates(memo, budget, 0.0, solver.ALL)[0]:
                refined = solver._bounded(problem, budget, item.terms, item.cand, True,
                                          memo.refined_bound(item.terms, item.cand, budget))
                out.append(None if refined is None else solver._inflight_bounded(memo, budget, refined))
        return out, calls[0]
    finally:
        inflight.BUDGET_FLOOR_STOP, inflight._least_rent = switch, least_rent


def test_the_stop_leaves_every_in_flight_bound_as_it_was():
    for problem, options in [_coupled()]:
        assert _bounds(problem, options, True)[0] == _bounds(problem, options, False)[0]  # the same floats


def _walk(tab, budget_usd: float, stop: bool) -> tuple[float | None, int]:
    """_time_under_cost on the table under a cost budget (USD), the switch as given: (its value, the rent rows it
    priced), on a copy of the table whose rents are not computed yet."""
    from dataclasses import replace
    fresh = replace(tab, rent=np.full(len(tab.marks), np.nan), floor_rent=math.nan)
    switch, least_rent = inflight.BUDGET_FLOOR_STOP, inflight._least_rent
    rows = [0]

    def counted(t, caps):
        rows[0] += len(caps)
        return least_rent(t, caps)

    inflight.BUDGET_FLOOR_STOP, inflight._least_rent = stop, counted
    try:
        return inflight._time_under_cost(fresh, 1000, budget_usd), rows[0]
    finally:
        inflight.BUDGET_FLOOR_STOP, inflight._least_rent = switch, least_rent


def test_the_stop_spares_the_rents_where_the_floor_rent_breaks_the_budget():
    problem, options = _coupled()
    budget = Budget(objective="time", max_cost_usd=1e12)
    memo = solver.Memo(problem, options)
    spared = 0
    for item in solver._candidates(memo, budget, 0.0, solver.ALL)[0]:
        refined = solver._bounded(problem, budget, item.terms, item.cand, True,
                                  memo.refined_bound(item.terms, item.cand, budget))
        if refined is None or item.cand.v > 1 or solver._inflight_bounded(memo, budget, refined) is None:
            continue
        tab = memo.inflight.get(item.cand.key)
        if tab is None or tab.allreduce_per_layer is None:
            continue
        floor = inflight._least_rent(tab, tab.caps.fn(np.array([np.inf])))[0]
        # USD of 1,000 iterations at the floor rent and the first interval's iteration, and around it
        at = 1000 / 3600.0 * floor * tab.iteration[0] / inflight.BOUND_SLACK
        for scale in (0.5, 0.999, 1.001, 2.0, 50.0):
            got, rows = _walk(tab, at * scale, True)
            before, rows_before = _walk(tab, at * scale, False)
            assert got == before
            assert rows <= rows_before + 1  # the floor rent: one row
            spared += scale < 1 and rows < rows_before
    assert spared > 0  # below the floor the walk prices one row instead of its intervals'


def test_no_interval_is_left_where_the_floor_rent_is_infinite():
    problem, options = _coupled()
    budget = Budget(objective="time", max_cost_usd=1e12)
    memo = solver.Memo(problem, options)
    item = solver._candidates(memo, budget, 0.0, solver.ALL)[0][0]
    refined = solver._bounded(problem, budget, item.terms, item.cand, True,
                              memo.refined_bound(item.terms, item.cand, budget))
    solver._inflight_bounded(memo, budget, refined)
    tab = memo.inflight[item.cand.key]
    n = len(tab.marks)
    assert inflight._fitting_intervals(tab, 1e30, n) == n  # a budget nothing breaks: every interval
    assert inflight._fitting_intervals(tab, 0.0, n) == 0  # a budget of 0: none (every rent x iteration is above 0)
    tab.floor_rent = math.inf
    assert inflight._fitting_intervals(tab, 1e30, n) == 0
