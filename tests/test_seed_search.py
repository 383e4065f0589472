"""Issue 14, item 3: a budget search's first plan comes from its seed search, which tries the cp = 1, v = 1 part of
the space first (solver._seed_search). Its plans are incumbents only: each must be a plan of the whole space that
meets the budget, and the answer must stay brute force's on both backends."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import in_search_space
from optsearch.search import budget_violations
from optsearch.solver import Memo, _seed_search, solve
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_solver import MAX_PLANS, assert_backends_equal_brute_force


def budget_at_free_plan(problem, options, objective: str, factor: float) -> Budget:
    """The budget search's budget on a small instance: the other objective's optimum, scaled by factor (time under
    factor x its cost, or cost under factor x its time); the example is skipped when the space is too large for brute
    force or has no plan."""
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    free = solve(problem, Budget(objective="cost" if objective == "time" else "time"), options=options)
    assume(free.estimate is not None)
    return (Budget(objective="time", max_cost_usd=free.estimate.cost_usd * factor) if objective == "time" else
            Budget(objective="cost", max_time_s=free.estimate.training_time_s * factor))


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_a_budget_search_seeded_from_the_cp1_v1_part_gives_brute_forces_optimum(case):
    """Spaces with interleaving and context parallelism, some without v = 1 (where the cp = 1, v = 1 part is not a
    part of the space and must not be searched): every seed plan is in the whole space and meets the budget, and the
    budget search (time under a cost budget, or cost under a deadline) equals brute force on both backends."""
    problem, options, objective, factor = case
    budget = budget_at_free_plan(problem, options, objective, factor)
    seed_budget = budget.model_copy(update={"objective": "cost" if objective == "time" else "time"})
    found = _seed_search(problem, seed_budget, "cpsat", None, options, Memo(problem, options))
    narrow = ((options.context_parallel_sizes != (1,) or options.virtual_stages != (1,))
              and 1 in options.context_parallel_sizes and 1 in options.virtual_stages)
    assert len(found) == (2 if narrow else 1)
    for result, _ in found:
        if result.plan is not None:
            assert in_search_space(problem, result.plan, options)
            assert not budget_violations(result.plan, result.estimate, seed_budget)
    assert_backends_equal_brute_force(problem, budget, options)
