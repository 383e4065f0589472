"""The timebig branch (issue 14, item 3, round 11): minimizing time under a cost budget, solver._climb moves dp to
every data-parallel size of the space between dp / 2 and 4 dp (solver._fill_dps), not only dp / 2, 2 dp and 4 dp.
Incumbents only: every plan the climb returns must be a priced plan of the space that meets the budget and no worse
than its start, and the budget search must stay brute force's on both backends."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _candidates, _fill_dps, _neighbour_search, solve
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_seed_search import budget_at_free_plan
from test_solver import _fasop_like, assert_backends_equal_brute_force


def test_fill_dps_are_the_powers_of_two_steps_and_every_dp_of_the_space_between_half_and_four_times():
    dps = [1, 2, 4, 7, 8, 14, 16, 28, 32, 56, 64, 112, 128]  # the divisors of a global batch of 1,792 (2^8 x 7)
    assert _fill_dps(16, dps) == [8, 14, 16, 28, 32, 56, 64]
    assert _fill_dps(14, dps) == [7, 8, 14, 16, 28, 32, 56]
    assert _fill_dps(1, dps) == [0, 1, 2, 4]  # dp // 2 = 0 is no candidate's dp: _climb finds no candidate there
    assert _fill_dps(3, []) == [1, 3, 6, 12]  # without the space's list: the plain steps


def test_the_climb_fills_dp_only_minimizing_time_under_a_cost_budget(monkeypatch):
    """The other budgets keep the plain dp steps: _climb asks _fill_dps only where time is minimized under a cost cap."""
    asked = []
    monkeypatch.setattr(solver_module, "_fill_dps", lambda dp, dps: asked.append(dp) or [dp // 2, dp, 2 * dp, 4 * dp])
    problem, options = _fasop_like(), SpaceOptions(max_stages=2)
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    fastest = solve(problem, Budget(objective="time"), options=options)
    for budget, fills in ((Budget(objective="cost", max_time_s=fastest.objective_value * 2.0), False),
                          (Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.3), True)):
        asked.clear()
        memo = Memo(problem, options)
        bounded, _ = _candidates(memo, budget)
        start = solve(problem, budget.model_copy(update={"objective": "cost" if budget.objective == "time" else "time"}),
                      options=options)
        begin = (objective_value(start.estimate, budget.objective), start.plan, start.estimate)
        _neighbour_search(memo, budget, bounded, begin, None)
        assert bool(asked) == fills


@settings(max_examples=draws(5), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_the_filling_climb_gives_priced_plans_that_meet_the_budget_and_the_optimum_stays(case):
    """Time under a cost budget on small spaces whose global batch (6 or 12) has dp sizes off the powers of 2: from the
    cost objective's first plan, _neighbour_search returns a plan of the space, priced by the cost model, that meets
    the budget and is no worse than its start; the budget search equals brute force on both backends."""
    problem, options, _, factor = case
    budget = budget_at_free_plan(problem, options, "time", factor)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    start = solve(problem, budget.model_copy(update={"objective": "cost"}), options=options, first_plan_only=True)
    if start.plan is not None and 1 in options.virtual_stages:
        begin = (objective_value(start.estimate, budget.objective), start.plan, start.estimate)
        value, plan, est = _neighbour_search(memo, budget, bounded, begin, None)
        assert value <= begin[0] and in_search_space(problem, plan, options)
        assert est == estimate(problem, plan) and not budget_violations(plan, est, budget)
        assert value == objective_value(est, budget.objective)
    assert_backends_equal_brute_force(problem, budget, options)
