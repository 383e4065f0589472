"""A budget search's first plan from the cheap side (issue 14, round 9; solver._budget_descent): minimizing time under
a cost budget B a few per cent above the cheapest plan (or cost under a deadline just above the fastest), the plans
that meet B come last in the time order and, on the large pools, late in the cost search's bound order too. The
descent minimizes the capped quantity without its cap from a few seeds' quick plans and stops at the first plan that
meets it. Incumbents only: every plan is priced by the cost model and meets the budget, and the search's answer stays
brute force's on both backends."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _best_meeting, _candidates, solve
from optsearch.spec.budget import Budget

from test_seed_search import budget_at_free_plan
from test_solver import _fasop_like, assert_backends_equal_brute_force, instances


class _WorkClock:
    """The time module, but its perf_counter runs MISSED_S ahead after every in-flight bound: the first candidate of
    any search loop (the seed search's or the solve's own) spends every deadline at once, and a plan known earlier
    than MISSED_S came from the work before the loops (the seeds, the descent, the climbs). A deterministic work
    limit, whatever the machine's load."""

    MISSED_S = 1e6

    def __init__(self) -> None:
        self.ahead_s = 0.0

    def __getattr__(self, name):
        return getattr(time, name)

    def perf_counter(self) -> float:
        return time.perf_counter() + self.ahead_s


def solve_with_loops_cut(problem, options, budget, monkeypatch):
    """(solve's result, its _WorkClock): every search loop (the seed search's, the solve's own) stopped at its first
    in-flight bound, the seed search's own round-robin seeds off (FIRST_PLAN_SEEDS = 0): a plan comes only from the
    work before the loops (the early seeds, the deepest pipelines, the descent, the climbs)."""
    clock = _WorkClock()
    inflight = solver_module._inflight_bounded

    def spends_every_deadline(*args, **kwargs):
        clock.ahead_s += _WorkClock.MISSED_S
        return inflight(*args, **kwargs)

    monkeypatch.setattr(solver_module, "time", clock)
    monkeypatch.setattr(solver_module, "_inflight_bounded", spends_every_deadline)
    monkeypatch.setattr(solver_module, "FIRST_PLAN_SEEDS", 0)
    return solve(problem, budget, options=options, time_limit_s=60.0), clock


def _own_seeds_meet(problem, options, budget) -> bool:
    """Whether a quick plan of the search's own seeds (the QUICK_SEEDS least time-bounded v = 1 candidates of each
    (cp, tp)) meets the budget."""
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    per_group: dict[tuple[int, int], int] = {}
    for item in bounded:
        group = (item.cand.cp, item.cand.tp)
        if item.cand.v == 1 and per_group.get(group, 0) < solver_module.QUICK_SEEDS:
            per_group[group] = per_group.get(group, 0) + 1
            if _best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand))) is not None:
                return True
    return False


def test_time_under_a_budget_just_above_the_cheapest_plan_has_a_plan_before_any_loop_works(monkeypatch):
    """FASOP-like, time under B = 1.01 x the cheapest plan's cost. The fast plans the time order seeds first all break
    B (checked), and the seed search's own seeds are switched off (FIRST_PLAN_SEEDS = 0: on Megatron 1T / mixed-pool-3k
    its 400 seeds end before the 623rd, the first with a quick plan under B). Every search loop stops at its first
    in-flight bound (_WorkClock). Before _budget_descent the first plan came only from the seed search's loop, after
    its first in-flight bound (first_plan_s past MISSED_S); on the large pools that loop gave none within the limit
    ("stopped at the time limit before any plan that meets the budget was found", a defect where one exists). Now a
    plan that meets B comes before any loop's work, priced by the cost model."""
    problem, options = _fasop_like(), SpaceOptions()
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    assert cheapest.status == "optimal"
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.01)
    assert not _own_seeds_meet(problem, options, budget)  # the premise: the time order's seeds give no plan
    got, clock = solve_with_loops_cut(problem, options, budget, monkeypatch)
    assert got.plan is not None, got.message
    assert clock.ahead_s > 0  # a loop did start, and its work was cut off
    est = estimate(problem, got.plan)
    assert in_search_space(problem, got.plan, options) and not budget_violations(got.plan, est, budget)
    assert got.objective_value == objective_value(est, budget.objective)
    assert got.stats["first_plan_s"] < _WorkClock.MISSED_S  # before any loop's first in-flight bound


@pytest.mark.parametrize("objective,max_stages", [("time", 4), ("cost", 2)])
def test_the_descent_climbs_past_seeds_that_break_the_cap_to_a_plan_that_meets_it(objective, max_stages, monkeypatch):
    """FASOP-like, micro-batches 1 and 2, one seed of each (cp, tp): from a seed plan that breaks the cap (the cap
    1.001 x the optimum of the capped quantity; checked), the climb over the budget without the cap reaches a plan
    that meets the whole budget; it is a plan of the space, carries the cost model's own estimate, and its value is
    the objective's. Minimizing time under B and cost under D alike."""
    from optsearch.solver import _budget_descent

    problem, options = _fasop_like(), SpaceOptions(max_stages=max_stages, micro_batch_sizes=(1, 2))
    other = "cost" if objective == "time" else "time"
    best = solve(problem, Budget(objective=other), options=options)
    assert best.status == "optimal"
    budget = (Budget(objective="time", max_cost_usd=best.objective_value * 1.001) if objective == "time" else
              Budget(objective="cost", max_time_s=best.objective_value * 1.001))
    starts = []
    climb = solver_module._climb

    def recorded(memo, relaxed, bounded, start, deadline, wide, until=None, **more):
        starts.append(start)
        return climb(memo, relaxed, bounded, start, deadline, wide, until, **more)

    monkeypatch.setattr(solver_module, "_climb", recorded)
    monkeypatch.setattr(solver_module, "DESCENT_SEEDS", 1)  # one seed of each (cp, tp): a start that breaks the cap
    got = _budget_descent(Memo(problem, options), budget, None)
    assert got is not None
    value, plan, est = got
    assert in_search_space(problem, plan, options) and est == estimate(problem, plan)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, budget.objective)
    assert len(starts) == 1 and budget_violations(starts[0][1], starts[0][2], budget)  # it climbed from a plan over


@settings(max_examples=draws(4), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_budget_searches_with_a_cap_just_above_the_other_optimum_equal_brute_force(case):
    """The descent's regime on random instances: time under 1.02 x the cheapest plan's cost, or cost under 1.02 x the
    fastest plan's time (where the descent runs before the seed search). Both backends equal brute force; every plan
    _budget_descent returns is in the space, priced and within the budget."""
    from optsearch.solver import _budget_descent

    problem, options, objective, _, _ = case
    budget = budget_at_free_plan(problem, options, objective, 1.02)
    found = _budget_descent(Memo(problem, options), budget, None)
    if found is not None:
        value, plan, est = found
        assert in_search_space(problem, plan, options) and est == estimate(problem, plan)
        assert not budget_violations(plan, est, budget) and value == objective_value(est, budget.objective)
    assert_backends_equal_brute_force(problem, budget, options)
