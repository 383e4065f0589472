"""The timeload branch (issue 14, item 3, round 12): time under a cost budget before the loop. The interleavable
deeper pipelines priced from the climbs' plan (solver._deeper_interleaved), a climb that steps on an earlier climb's
path returns that climb's end (solver._climb's `ends`), and ModelSpec.kinds kept per depth. Incumbents and speed
only: every plan is priced by the cost model and meets the budget, and no bound changes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _candidates, _deeper_interleaved, _interleavable_depths, _neighbour_search, solve
from optsearch.spec.budget import Budget
from optsearch.spec.cluster import GpuSpec
from optsearch.spec.model import LayerKindSpec

from test_interleaved import interleaved_instances
from test_seed_search import budget_at_free_plan
from test_solver import make_problem

INTERLEAVED = SpaceOptions(micro_batch_sizes=(1,), max_stages=8, virtual_stages=(1, 2))
PLAIN = SpaceOptions(micro_batch_sizes=(1,), max_stages=8, virtual_stages=(1,))


def _one_type_problem():
    """One GPU type, 16 single-GPU nodes, 8 layers, global batch 12: dp 1, 2, 3, 4, 6, 12 and m = 12 / dp."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=312.0, hbm_gbyte_per_s=2000.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=16, price_usd_per_node_hour=2.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=400.0)]
    return make_problem(layers=8, hidden=1024, heads=2, gbs=12, node_types=nodes, gpus=gpus, seq=2048)


def _climb_start():
    """One GPU type, time under B = 2.5 x the cheapest cost: (problem, budget, the cost objective's plan under B as a
    climb's start, priced in time)."""
    problem = _one_type_problem()
    cheapest = solve(problem, Budget(objective="cost"), options=INTERLEAVED)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 2.5)
    seed = solve(problem, budget.model_copy(update={"objective": "cost"}), options=INTERLEAVED)
    return problem, budget, (objective_value(seed.estimate, "time"), seed.plan, seed.estimate)


def test_interleavable_depths_divide_the_micro_batches_between_pp_and_twice_pp():
    assert _interleavable_depths(10, 128) == [16]  # Megatron 76B, dp 14: m = 1,792 / 14
    assert _interleavable_depths(10, 112) == [14, 16]  # dp 16
    assert _interleavable_depths(16, 128) == [16, 32]
    assert _interleavable_depths(1, 12) == [2]  # one stage does not interleave
    assert _interleavable_depths(5, 11) == []


@pytest.mark.parametrize("factor, shape", [(1.4, (2, 2)), (2.5, (3, 4))])
def test_from_the_best_plan_without_interleaving_the_step_reaches_the_interleaved_optimum(factor, shape):
    """Time under B on one GPU type: the best v = 1 plan spreads the batch over dp 4 or 6; the optimum (brute force's
    and solve's) has fewer replicas, a pipeline as deep or deeper and v = 2, which B pays for only interleaved. From
    the v = 1 optimum, _deeper_interleaved returns the optimum's value with a plan of the space, priced by the cost
    model, that meets B."""
    problem = _one_type_problem()
    cheapest = solve(problem, Budget(objective="cost"), options=INTERLEAVED)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * factor)
    best = solve(problem, budget, options=INTERLEAVED)
    plain = solve(problem, budget, options=PLAIN)
    assert best.status == plain.status == "optimal" and best.objective_value < plain.objective_value
    assert (best.plan.dp, best.plan.pp, best.plan.virtual_stages) == (*shape, 2)
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    value, plan, est = _deeper_interleaved(memo, budget, bounded, (plain.objective_value, plain.plan, plain.estimate),
                                           None)
    assert value == pytest.approx(best.objective_value, rel=1e-9)
    assert plan.virtual_stages == 2 and plan.pp >= plain.plan.pp and plan.dp < plain.plan.dp
    assert in_search_space(problem, plan, INTERLEAVED) and est == estimate(problem, plan)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, "time")


def test_the_step_is_only_taken_minimizing_time_under_a_cost_budget_in_an_interleaved_space(monkeypatch):
    problem = _one_type_problem()
    cheapest = solve(problem, Budget(objective="cost"), options=INTERLEAVED)
    fastest = solve(problem, Budget(objective="time"), options=INTERLEAVED)
    by_cost = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.4)
    plain = solve(problem, by_cost, options=PLAIN)
    start = (plain.objective_value, plain.plan, plain.estimate)
    for options, budget in ((PLAIN, by_cost), (INTERLEAVED, Budget(objective="time")),
                            (INTERLEAVED, Budget(objective="cost", max_time_s=fastest.objective_value * 1.5))):
        memo = Memo(problem, options)
        bounded, _ = _candidates(memo, budget)
        assert _deeper_interleaved(memo, budget, bounded, start, None) is start
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, by_cost)
    monkeypatch.setattr(solver_module, "DEEPER_INTERLEAVED", False)
    assert _deeper_interleaved(memo, by_cost, bounded, start, None) is start


def test_a_climb_on_an_earlier_climbs_path_returns_its_end_without_pricing(monkeypatch):
    """Two climbs of one solve under one budget: the second, from a plan on the first one's path, returns the first
    one's end and prices no quick plan; and the end is the one a climb without the record reaches."""
    problem, budget, start = _climb_start()
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    ends: dict = {}
    first = _neighbour_search(memo, budget, bounded, start, None, None, ends)
    assert first[0] < start[0] and (False, start[1]) in ends and (True, first[1]) in ends
    fresh = Memo(problem, INTERLEAVED)
    assert _neighbour_search(fresh, budget, _candidates(fresh, budget)[0], start, None) == first
    priced = []
    original = Memo.quick_plans
    monkeypatch.setattr(Memo, "quick_plans", lambda self, sk: priced.append(sk.cand.key) or original(self, sk))
    again = _neighbour_search(memo, budget, bounded, start, None, None, ends)
    assert again == first and priced == []


def test_the_one_kind_of_a_model_without_layer_kinds_is_kept_per_depth():
    problem = _one_type_problem()
    model = problem.model
    assert model.kinds is model.kinds  # built once, not on every read
    assert model.kinds == (LayerKindSpec(name="layer", num_layers=8),)
    deeper = model.model_copy(update={"num_layers": 12})
    assert deeper.kinds == (LayerKindSpec(name="layer", num_layers=12),) and deeper.kinds is not model.kinds


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_climbs_sharing_their_ends_reach_the_ends_of_climbs_without_them(case):
    """On random interleaved and cp spaces, time under a cost budget: from the seed plans of both objectives' first
    plan searches, climbs that share one record of ends return what the same climbs without it return."""
    problem, options, _, factor = case
    budget = budget_at_free_plan(problem, options, "time", factor)
    starts = []
    for objective in ("cost", "time"):
        got = solve(problem, budget.model_copy(update={"objective": objective}), options=options, first_plan_only=True)
        if got.plan is not None:
            starts.append((objective_value(got.estimate, "time"), got.plan, got.estimate))
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    ends: dict = {}
    for start in starts + starts:
        shared = _neighbour_search(memo, budget, bounded, start, None, None, ends)
        fresh = Memo(problem, options)
        assert shared == _neighbour_search(fresh, budget, _candidates(fresh, budget)[0], start, None)
