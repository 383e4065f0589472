"""The in-flight step's work cuts of round 22 (issue 14, item 3, flight22; docs/solver.md "Round 22: time under a cost
budget, the in-flight step's work cut (flight22, 2026-11-25)").

- inflight.BUDGET_FAST: _time_under_cost prices the rent rows of a chunk only below the best bucket so far, runs the
  node-supply test only on the buckets whose rent fits, and keeps its levels' arrays by their inputs.
- inflight.WHOLE_FAST: whole_levels_iteration searches the first interval alone, then only the rows below the least
  value found.
- inflight.FLOOR_RENT_KEPT: R(inf) (_floor_rent) kept by the inputs of _least_rent, shared by tables alike.

Both are exact: with the switches on and off, every in-flight value the loop asks (fresh memos, so fresh tables) is
the same float (or None both ways), under cost budgets at plans' exact costs with the loop's cutoffs (none, the
optimum, 0.9 x it) and minimizing time without a budget (the whole levels with their cutoff); on drawn instances
(OPTSEARCH_DRAWS) with experts, the overlap, interleaving, and on a memory-tight T5 instance. The switches must spare
work somewhere (rent rows, level-search rows), and a variant that skips the supply test where the rent fits gives
other values, which the comparison sees.
"""

from __future__ import annotations

import math

import numpy as np

import optsearch.inflight as inflight
from optsearch.search import budget_violations
from optsearch.spec.budget import Budget

from draws import draws
from test_audit_dist_bounds import random_instance, space_plans
from test_budget_loop_round20 import _instances, inflight_bounds


def _budgets(priced) -> list[tuple[Budget, list[float]]]:
    """(budget, cutoffs): cost budgets at the cheapest and the median plan's exact cost with no cutoff, the fastest
    plan that meets it and 0.9 x that; minimizing time without a budget, the fastest plan and 1.05 x it."""
    ests = sorted((e for _, _, e in priced), key=lambda e: e.cost_usd)
    out = []
    if not ests:  # a drawn instance with no plan
        return out
    for est in (ests[0], ests[len(ests) // 2]):
        budget = Budget(objective="time", max_cost_usd=est.cost_usd)
        fastest = min(e.training_time_s for e in ests if not budget_violations(None, e, budget))
        out.append((budget, [math.inf, fastest, 0.9 * fastest]))
    fastest = min(e.training_time_s for e in ests)
    out.append((Budget(objective="time"), [math.inf, fastest, 1.05 * fastest]))
    return out


def _values(problem, options, budget, cutoffs, on: bool, work: dict) -> list:
    """The loop's in-flight values of every listed candidate under budget at each cutoff, the switches set to `on`;
    work counts the rent rows and the whole levels' searched rows."""
    saved = (inflight.BUDGET_FAST, inflight.WHOLE_FAST, inflight.FLOOR_RENT_KEPT, inflight._least_rent,
             inflight._holds)
    least_rent, holds = inflight._least_rent, inflight._holds

    def rent_counted(tab, caps):
        work["rent"] += len(caps)
        return least_rent(tab, caps)

    def holds_counted(tab, caps):
        work["holds"] += len(caps)
        return holds(tab, caps)

    inflight.BUDGET_FAST = inflight.WHOLE_FAST = inflight.FLOOR_RENT_KEPT = on
    inflight._least_rent, inflight._holds = rent_counted, holds_counted
    try:
        return inflight_bounds(problem, options, budget, cutoffs)
    finally:
        (inflight.BUDGET_FAST, inflight.WHOLE_FAST, inflight.FLOOR_RENT_KEPT, inflight._least_rent,
         inflight._holds) = saved


def _compare(instances) -> tuple[int, int, dict, dict]:
    """(values compared, values that differ, work with the switches on, work off)."""
    compared = differ = 0
    on_work, off_work = {"rent": 0, "holds": 0}, {"rent": 0, "holds": 0}
    for problem, options in instances:
        priced = list(space_plans(problem, options))
        for budget, cutoffs in _budgets(priced):
            on = _values(problem, options, budget, cutoffs, True, on_work)
            off = _values(problem, options, budget, cutoffs, False, off_work)
            assert [(k, c) for k, c, _ in on] == [(k, c) for k, c, _ in off]
            for (_, _, a), (_, _, b) in zip(off, on):
                compared += 1
                differ += not (a == b or (a is None and b is None))
    return compared, differ, on_work, off_work


def test_the_fast_paths_give_the_same_values():
    compared, differ, on, off = _compare(list(_instances()) + [random_instance(1 + s) for s in range(draws(1))])
    assert differ == 0
    assert compared > 100
    assert on["rent"] < off["rent"] and on["holds"] < off["holds"]  # work spared: the check is not vacuous


def _differ_with(monkeypatch, seed: int, name: str, value) -> int:
    """Values that differ between the switches off and on with inflight.NAME set to value in the second run, on
    random_instance(seed)."""
    problem, options = random_instance(seed)
    priced = list(space_plans(problem, options))
    differ = 0
    for budget, cutoffs in _budgets(priced):
        off = _values(problem, options, budget, cutoffs, False, {"rent": 0, "holds": 0})
        with monkeypatch.context() as m:
            m.setattr(inflight, name, value)
            on = _values(problem, options, budget, cutoffs, True, {"rent": 0, "holds": 0})
        differ += sum(a != b for (_, _, a), (_, _, b) in zip(off, on))
    return differ


def test_a_changed_rent_or_level_search_is_seen(monkeypatch):
    # the comparison sees a bucket walk whose rents are 1 % higher, and a level search of 3 bisection steps
    least_rent = inflight._least_rent
    assert _differ_with(monkeypatch, 1, "_least_rent", lambda tab, caps: least_rent(tab, caps) * 1.01) > 0
    # random_instance(5): the overlap on (the whole levels); three bisection steps instead of 14
    assert _differ_with(monkeypatch, 5, "WHOLE_BISECTION", 3) > 0


def test_the_levels_are_kept_read_only_and_equal():
    alpha = np.array([0.0, 2.5e-3, 1.25e-3])
    a = inflight._budget_levels(alpha, 24, 0.01, 2)
    b = inflight._budget_levels(alpha.copy(), 24, 0.01, 2)
    assert a is b and not a[0].flags.writeable
    inflight._LEVELS.clear()
    c = inflight._budget_levels(alpha, 24, 0.01, 2)
    assert c is not a and all((x == y).all() for x, y in zip(a, c))
    assert inflight._rows_below(np.array([1.0, 2.0, 3.0]), 2.5) == 2
    assert inflight._rows_below(np.array([1.0, 2.0]), math.inf) == 2

