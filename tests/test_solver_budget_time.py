"""Budget searches on the large pools (issue 14, item 3, time under a cost budget): the interleaved candidates'
budget-aware bound (solver.interleaved_positional_bound) below every plan that meets the budget, with the budget set
at each plan's own cost or time (the tightest budget that plan meets), and the neighbour search of a budget search's
incumbent (solver._neighbour_search), whose plans must meet the budget and never change the answer."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from draws import draws
from priced import least_recompute

from optsearch.baselines.exhaustive import _least_recompute, count_plans, partitions, type_sequences
from optsearch.bounds import degree_terms, interleaving_factor
from optsearch.candidates import SpaceOptions, interleaving_allowed
from optsearch.formulation.model import Candidate
from optsearch.plan import Plan, Stage
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _neighbour_search, interleaved_positional_bound, solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_solver import MAX_PLANS, assert_backends_equal_brute_force, instances, make_problem, usable_degrees


def _interleaved_plans(problem, options):
    """(candidate, priced plan) for every plan of every v > 1 candidate (cp = 1), at its least recomputation."""
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for pp in range(2, options.max_stages + 1):
            for v in options.virtual_stages:
                if v == 1 or not interleaving_allowed(problem, pp, dp, mbs, v):
                    continue
                cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v)
                for types in type_sequences(list(uses), pp, None, tp * dp):
                    for chunks in partitions(problem.model.num_layers // v, pp):
                        plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, virtual_stages=v, stages=tuple(
                            Stage(node_type=t, num_layers=v * n) for t, n in zip(types, chunks)))
                        priced = least_recompute(problem, plan, options)
                        if priced is not None:
                            yield cand, priced


def _tightest(problem, options) -> float:
    """Over every plan X of every v > 1 candidate and both budget searches with the budget at X's own value (time
    under max_cost = cost(X), cost under max_time = time(X)): the least objective(X) / bound. It must be at least 1
    (1e-9 for rounding)."""
    memo = Memo(problem, options)
    least = float("inf")
    for cand, (plan, est) in _interleaved_plans(problem, options):
        terms = degree_terms(problem, cand.tp, cand.dp, cand.micro_batch_size, cand.uses)
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        factor = interleaving_factor(terms.m, cand.pp, cand.v)
        for budget in (Budget(objective="time", max_cost_usd=est.cost_usd),
                       Budget(objective="cost", max_time_s=est.training_time_s)):
            assert not budget_violations(plan, est, budget)
            bound = interleaved_positional_bound(sibling, budget, factor)
            least = min(least, objective_value(est, budget.objective) / bound)
            refined = memo.refined_bound(terms, cand, budget)  # the v = 1 refined bound under budget / f_v, x f_v
            assert refined.feasible, (plan, refined)
            least = min(least, est.iteration_time_s / refined.iteration_s,
                        est.usd_per_hour * est.iteration_time_s / 3600 / refined.cost_per_iteration_usd)
    return least


@settings(max_examples=draws(7), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_the_interleaved_bound_under_a_budget_at_a_plans_own_value_stays_below_that_plan(case):
    """interleaved_positional_bound (the sibling's positional bound under the budget / f_v, times f_v) and the
    refined bound of a v > 1 candidate (Memo.refined_bound: the sibling's under the budget / f_v, relaxed by f_v),
    below every plan that meets the budget, with the budget at the plan's own cost (time objective) or time (cost
    objective).
    On equal stages the bound comes within 1 % of a plan (test_..._is_tight_on_equal_stages); the budget not
    divided by f_v makes this test fail (checked when written)."""
    problem, options, _, _ = case
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return
    least = _tightest(problem, options)
    event(f"plans: {'none' if least == float('inf') else 'some'}")
    assert least >= 1 - 1e-9, least


def _tight_problem():
    """One type, equal stages, no sends to speak of: f_v is tight (bounds.interleaving_factor)."""
    gpus = [GpuSpec(name="G0", memory_gib=80.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=2000.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=4, price_usd_per_node_hour=2.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=400.0)]
    problem = make_problem(layers=24, hidden=4096, heads=2, gbs=12, node_types=nodes, gpus=gpus)
    return problem, SpaceOptions(micro_batch_sizes=(1,), max_stages=4, virtual_stages=(1, 2))


def test_the_interleaved_bound_under_a_budget_is_tight_on_equal_stages():
    """The bound reaches within 1 % of a plan (0.6 % when written): raised by 1 %, it lies above that plan."""
    problem, options = _tight_problem()
    least = _tightest(problem, options)
    assert 1 - 1e-9 <= least < 1.01, least  # raised by 1 % (least / 1.01 < 1) it lies above a plan


def test_neighbour_search_improves_the_seed_with_plans_that_meet_the_budget_and_keeps_the_optimum():
    """From the slowest plan that meets a cost budget, the neighbour search finds a faster one; every plan it returns
    meets the budget, and the whole solve still equals brute force (incumbents never decide the answer)."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=2000.0),
            GpuSpec(name="G1", memory_gib=12.0, peak_fp16_tflop_per_s=30.0, hbm_gbyte_per_s=300.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=2, num_nodes_available=4, price_usd_per_node_hour=9.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=100.0),
             dict(name="t1", gpu="G1", gpus_per_node=1, num_nodes_available=8, price_usd_per_node_hour=0.7,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=400.0)]
    problem = make_problem(layers=8, hidden=1024, heads=4, gbs=16, node_types=nodes, gpus=gpus)
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=3)
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.estimate.cost_usd * 1.3)
    memo = Memo(problem, options)
    from optsearch.solver import _candidates

    bounded, _ = _candidates(memo, budget)
    start = (cheapest.estimate.training_time_s, cheapest.plan, cheapest.estimate)
    value, plan, est = _neighbour_search(memo, budget, bounded, start, None)
    assert value < start[0]
    assert not budget_violations(plan, est, budget) and value == est.training_time_s
    assert_backends_equal_brute_force(problem, budget, options)


def _aggregate_time_bound_ratio(problem, options) -> float:
    """Over every plan X of every candidate: the least iteration(X) / (the aggregate refined bound's iteration time
    minimizing time under a cost budget at X's own cost). At least 1 (1e-9 for rounding) when the bound is valid."""
    from unittest import mock

    from optsearch import bounds as bounds_module
    from optsearch.bounds import candidate_bound
    from optsearch.candidates import max_stages

    least = float("inf")
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        terms = degree_terms(problem, tp, dp, mbs, uses)
        for pp in range(1, max_stages(problem, options) + 1):
            for types in type_sequences(list(uses), pp, None, tp * dp):
                for parts in partitions(problem.model.num_layers, pp):
                    stages = tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts))
                    found = _least_recompute(problem, Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages), options)
                    if found is None:
                        continue
                    est = found[1]
                    budget = Budget(objective="time", max_cost_usd=est.cost_usd)
                    with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):
                        bound = candidate_bound(problem, terms, pp, budget, refined=True)
                    assert bound.feasible, (found[0], bound)
                    least = min(least, est.iteration_time_s / (bound.iteration_s))
    return least


@settings(max_examples=draws(12), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_the_aggregate_time_bound_under_a_cost_budget_at_a_plans_own_cost_stays_below_that_plan(case):
    """bounds._least_iteration_under_cost_s (the aggregate refined bound minimizing time under a cost budget): with
    the budget at each plan's own cost (the tightest budget it meets), the candidate stays feasible and its
    iteration bound stays below the plan's. A fixed sequence of 25 instances (derandomized); taking the breakpoint
    after the first one whose cost fits, or the bound 5 % higher, makes it fail (checked when written)."""
    problem, options, _, _, _ = case
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return
    least = _aggregate_time_bound_ratio(problem, options)
    event(f"plans: {'none' if least == float('inf') else 'some'}")
    assert least >= 1 - 1e-9, least
