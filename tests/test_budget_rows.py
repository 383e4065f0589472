"""The budgetrows branch (issue 14, item 3): a seed search prices quick plans past the usual seeds, round robin over
(cp, tp) (solver._first_plan_seeds), and a budget search's climb goes on wide (solver._climb: deeper and shallower
pipelines, the neighbours' interleaved and rebalanced-interleaved variants). Incumbents only: every plan must be a
priced plan of the space that meets the budget, and the answer must stay brute force's on both backends."""

from __future__ import annotations


import pytest
from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.formulation.model import Candidate
from optsearch.plan import Plan, Stage
from optsearch.search import budget_violations, objective_value
from optsearch.solver import (Bounded, Memo, _best_meeting, _candidates, _climb_depths, _climb_plans,
                              _first_plan_seeds, _interleaved_rebalanced, _neighbour_search, solve)
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_seed_search import budget_at_free_plan
from test_solver import _fasop_like, assert_backends_equal_brute_force


def _bounded(tp: int, pp: int, bound: float, v: int = 1, cp: int = 1) -> Bounded:
    return Bounded(Candidate(tp=tp, dp=1, micro_batch_size=1, pp=pp, uses=(), cp=cp, v=v), bound)


def test_first_plan_seeds_are_the_usual_seeds_then_every_other_candidate_round_robin(monkeypatch):
    monkeypatch.setattr(solver_module, "QUICK_SEEDS", 2)
    a = [_bounded(1, pp, 10.0 + pp) for pp in range(1, 6)]  # group (1, 1): bounds 11..15
    b = [_bounded(2, pp, 11.5 + pp) for pp in range(1, 5)]  # group (1, 2): bounds 12.5..15.5
    inter = _bounded(1, 2, 0.5, v=2)  # interleaved: no quick plans, never a seed
    bounded = sorted(a + b + [inter], key=lambda item: item.lower_bound)
    got = _first_plan_seeds(bounded)
    assert inter not in got and len(got) == len(a) + len(b)
    # The usual seeds (QUICK_SEEDS of each group) in bound order, then ranks 2, 3, ... of each group in turn.
    assert got[:4] == [a[0], a[1], b[0], b[1]]
    assert got[4:] == [a[2], b[2], a[3], b[3], a[4]]


def _plan(layers: tuple[int, ...], v: int = 1) -> Plan:
    return Plan(tp=1, dp=1, micro_batch_size=1, virtual_stages=v,
                stages=tuple(Stage(node_type=f"t{i % 2}", num_layers=n, recompute="selective" if i == 0 else "none")
                             for i, n in enumerate(layers)))


def test_rebalanced_variants_move_layers_to_multiples_of_v_and_keep_types_and_modes():
    options = SpaceOptions(virtual_stages=(1, 2, 3, 4))
    plan = _plan((13, 12, 12, 11))
    got = _interleaved_rebalanced(plan, options)
    assert {p.virtual_stages for p in got} == {2, 3, 4}
    for p in got:
        counts = [s.num_layers for s in p.stages]
        assert sum(counts) == 48 and all(n % p.virtual_stages == 0 and n > 0 for n in counts)
        assert [(s.node_type, s.recompute) for s in p.stages] == [(s.node_type, s.recompute) for s in plan.stages]
    assert {(p.virtual_stages, tuple(s.num_layers for s in p.stages)) for p in got} >= {
        (2, (12, 12, 12, 12)), (3, (12, 12, 12, 12)), (4, (12, 12, 12, 12)), (2, (14, 12, 12, 10))}
    assert _interleaved_rebalanced(_plan((12, 12)), options) == []  # every v divides it: _interleaved's case
    assert [p.virtual_stages for p in _interleaved_rebalanced(_plan((7, 6)), options)] == []  # 13: no v divides it
    assert _interleaved_rebalanced(_plan((13, 11), v=2), options) == []  # only from v = 1 plans
    assert all(min(s.num_layers for s in p.stages) >= 1 for p in _interleaved_rebalanced(_plan((7, 1)), options))
    assert _climb_depths(4) == [2, 3, 4, 5, 6, 8, 16]


def test_a_seed_search_finds_its_plan_among_quick_plans_past_the_usual_seeds(monkeypatch):
    """With no usual seeds (QUICK_SEEDS = 0), the first-plan-only search under a deadline that some quick plans meet
    still returns a plan that meets it from its seeds alone, before any candidate of its loop gets an in-flight bound
    (the loop's plans come only after that level). Before budgetrows it seeded QUICK_SEEDS per (cp, tp) only, and
    here it would have reached the loop."""
    monkeypatch.setattr(solver_module, "QUICK_SEEDS", 0)
    problem, options = _fasop_like(), SpaceOptions(max_stages=6)
    budget = Budget(objective="cost", max_time_s=200.0)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    assert any(_best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand))) is not None
               for item in _first_plan_seeds(bounded))  # some quick plan meets it (the test's premise)

    def no_loop(*args, **kwargs):
        raise AssertionError("the loop was reached before the seeds gave a plan")

    monkeypatch.setattr(solver_module, "_inflight_bounded", no_loop)
    first = solve(problem, budget, options=options, time_limit_s=30.0, first_plan_only=True)
    assert first.plan is not None and not budget_violations(first.plan, first.estimate, budget)
    assert first.stats["first_plan_s"] <= first.solve_time_s


@settings(max_examples=draws(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_the_wide_climb_gives_priced_plans_of_the_space_that_meet_the_budget_and_the_optimum_stays(case):
    """From the other objective's first plan, _neighbour_search (plain, then wide) returns a plan of the space, priced
    by the cost model, that meets the budget and is no worse than its start; every plan _climb_plans offers is a priced
    plan of the space; and the budget search equals brute force on both backends."""
    problem, options, objective, factor = case
    budget = budget_at_free_plan(problem, options, objective, factor)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    for item in bounded:
        if item.cand.v == 1 and 1 in options.virtual_stages:
            for plan, est in _climb_plans(memo, budget, item.cand):
                assert in_search_space(problem, plan, options) and est == estimate(problem, plan)
    start = solve(problem, budget, options=options, first_plan_only=True)
    if start.plan is not None and 1 in options.virtual_stages:
        begin = (objective_value(start.estimate, budget.objective), start.plan, start.estimate)
        value, plan, est = _neighbour_search(memo, budget, bounded, begin, None)
        assert value <= begin[0] and in_search_space(problem, plan, options)
        assert est == estimate(problem, plan) and not budget_violations(plan, est, budget)
        assert value == objective_value(est, budget.objective)
    assert_backends_equal_brute_force(problem, budget, options)


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_a_budget_search_with_the_wide_climb_gives_the_optimum_of_the_search_without_climbs(solver, monkeypatch):
    """FASOP-like, interleaving allowed: time under a cost budget 30 % above the cheapest plan's cost, run to the
    end, equals the same search with _neighbour_search switched off (an incumbent never changes the optimum)."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=4, virtual_stages=(1, 2))
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.3)
    got = solve(problem, budget, solver=solver, options=options)
    monkeypatch.setattr(solver_module, "_neighbour_search", lambda *args: args[3])
    plain = solve(problem, budget, solver=solver, options=options)
    assert got.status == plain.status == "optimal"
    assert got.objective_value == pytest.approx(plain.objective_value, rel=1e-9)
    assert not budget_violations(got.plan, got.estimate, budget)
