"""The climb's reshaped plans on cost rows (issue 14, item 3, round 17, costbig; docs/solver.md "Round 17: the cost
climb's reshaped plans (costbig, 2026-11-24)").

Minimizing cost, _climb also tries the current plan in a pipeline twice as deep on half the GPUs a stage (each stage
split in two, with and without an empty last stage for the head) or half as deep on twice the GPUs (pairs merged).
Incumbents only: every plan the climb returns is an honest plan of the space, priced by the cost model; the
solver's answers still equal brute force.
"""

from __future__ import annotations

import math

import pytest

from optsearch import solver
from optsearch.baselines.exhaustive import solve_exhaustive
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.plan import Plan, Stage
from optsearch.spec.budget import Budget

from tests.test_audit_dist_bounds import random_instance

P5 = "p5.48xlarge"


@pytest.fixture(scope="module")
def megatron_1t():
    """Megatron 1T on mixed-pool-8k, megatron target: the grid's instance (bench/objective_grid.py)."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("megatron-1t", "mixed-pool-8k", []))
    return problem, space_from_target("megatron", problem)


def _plan(problem, tp, dp, cp, layers, node_type=P5):
    stages = tuple(Stage(node_type=node_type, num_layers=n) for n in layers)
    return solver._with_degrees(problem, Plan(tp=tp, dp=dp, micro_batch_size=1, stages=stages, cp=cp), tp, dp, cp,
                                stages)


def test_reshaped_by_hand(megatron_1t):
    problem, _ = megatron_1t
    plan = _plan(problem, 2, 2, 8, [1, 3, 2, 0])
    got = {(v.tp, v.dp, v.cp, tuple(s.num_layers for s in v.stages)) for v in solver._reshaped(problem, plan)}
    split = (1, 2, 1, 1, 1, 0)  # 3 -> 2 + 1, 2 -> 1 + 1; one layer and none stay whole; the last is empty already
    merged = (4, 2)  # (1, 3) and (2, 0)
    assert got == {(2, 2, 4, split), (2, 1, 8, split), (1, 2, 8, split),
                   (2, 2, 16, merged), (2, 4, 8, merged), (4, 2, 8, merged)}
    # a last stage with layers: the split also with an empty last stage (the head alone); an odd count with an
    # empty last stage merges the rest and keeps it
    plan = _plan(problem, 1, 1, 2, [2, 2, 0])
    got = {(v.tp, v.dp, v.cp, tuple(s.num_layers for s in v.stages)) for v in solver._reshaped(problem, plan)}
    assert got == {(1, 1, 1, (1, 1, 1, 1, 0)), (1, 1, 4, (4, 0)), (1, 2, 2, (4, 0)), (2, 1, 2, (4, 0))}
    plan = _plan(problem, 1, 1, 1, [1, 1])  # nothing to halve, nothing to split: the merges only
    got = {(v.tp, v.dp, v.cp, tuple(s.num_layers for s in v.stages)) for v in solver._reshaped(problem, plan)}
    assert got == {(1, 1, 2, (2,)), (1, 2, 1, (2,)), (2, 1, 1, (2,))}
    for v in solver._reshaped(problem, _plan(problem, 2, 2, 8, [1, 3, 2, 0])):  # the settings derived from the degrees
        assert v.distributed_optimizer == solver.distributed_optimizer_on(problem.job, v.dp, v.cp)
        assert v.overlap_grad_reduce == solver.overlap_grad_reduce_on(problem, v.dp, v.cp, 1)
    mixed = Plan(tp=1, dp=1, micro_batch_size=1, cp=1, stages=(Stage(node_type=P5, num_layers=2),
                                                               Stage(node_type="p4d.24xlarge", num_layers=2)))
    assert solver._reshaped(problem, mixed) == []  # a pair of two types is never merged; nothing to halve


def test_the_1t_seed_climbs_to_the_best_known_plan(megatron_1t, monkeypatch):
    """The seeds' best plan of Megatron 1T on mixed-pool-8k (tp 2, cp 8, 65 stages of two layers on p5, $16.32M):
    the climb, with no neighbours at all, reaches the 129-stage plan ($14.92M) through the split plan with an empty
    last stage; without the reshaped plans it does not move (the base's climb from this seed stayed there)."""
    problem, options = megatron_1t
    memo = solver.Memo(problem, options)
    plan, est = memo.runnable(_plan(problem, 2, 1, 8, [1] + [2] * 63 + [1]))
    start = (est.cost_usd, plan, est)
    assert 16.3e6 < start[0] < 16.33e6
    budget = Budget(objective="cost")
    end = solver._climb(memo, budget, [], start, None, wide=False)
    assert end[0] < 14.93e6 and (end[1].tp, end[1].dp, end[1].cp, len(end[1].stages)) == (2, 1, 4, 129)
    assert in_search_space(problem, end[1], options) and end[2].fits
    assert math.isclose(estimate(problem, end[1]).cost_usd, end[0], rel_tol=1e-12)
    monkeypatch.setattr(solver, "CLIMB_RESHAPE", False)
    assert solver._climb(solver.Memo(problem, options), budget, [], start, None, wide=False)[0] == start[0]
    # a time budget's climb (time the objective) is left as it was without round 18's RESHAPE_UNDER_B (budgetb2)
    monkeypatch.setattr(solver, "CLIMB_RESHAPE", True)
    calls = []
    monkeypatch.setattr(solver, "_reshaped", lambda *a: calls.append(a) or [])
    for under_b in (False, True):
        monkeypatch.setattr(solver, "RESHAPE_UNDER_B", under_b)
        calls.clear()
        solver._climb(memo, Budget(objective="time", max_cost_usd=2 * start[0]), [], start, None, wide=False)
        assert (calls != []) is under_b


@pytest.mark.parametrize("seed", [50, 57, 63])
def test_reshaped_plans_are_honest_and_answers_equal_brute_force(seed, monkeypatch):
    """On small random instances (47, 49 and 63 reshaped plans kept): every reshaped plan that Memo.runnable keeps
    is in the space, fits and carries the cost model's estimate; solve's cost answer, with the climb that tries
    them (a time limit: the climb runs only under one), equals brute force."""
    problem, options = random_instance(seed)
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost")
    kept = 0
    for item in solver._candidates(memo, budget)[0][:40]:
        if item.cand.v != 1:
            continue
        for plan, _ in memo.quick_plans(memo.skeleton(item.cand)):
            for variant in solver._reshaped(problem, plan):
                found = memo.runnable(variant)
                if found is not None:
                    kept += 1
                    assert in_search_space(problem, found[0], options) and found[1].fits
                    assert math.isclose(estimate(problem, found[0]).cost_usd, found[1].cost_usd, rel_tol=1e-12)
    assert kept > 0
    real, asked = solver._reshaped, []
    monkeypatch.setattr(solver, "_reshaped", lambda *a: asked.append(1) or real(*a))
    got = solver.solve(problem, budget, options=options, time_limit_s=60.0)
    truth = solve_exhaustive(problem, budget, options=options)
    assert asked and got.status == truth.status == "optimal"
    assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-9)
    assert math.isclose(estimate(problem, got.plan).cost_usd, got.objective_value, rel_tol=1e-12)


def test_the_deepest_plans_of_310b(monkeypatch):
    """Megatron 310B (96 layers) on mixed-pool-8k: the deepest pipelines' quick plans (_deepest_plans) hold its best
    known plan (tp 1, cp 4, 98 stages, a layer a stage and both ends empty, $3,093,782), below the plan the climb
    ended at on 3e0ad5b ($3,188,655); every plan priced is a quick plan of a listed candidate at pp 97 or 98; under a
    deadline below that plan's time none of them is returned that breaks it."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("megatron-310b", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    assert problem.model.num_layers == 96
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost")
    neighbours = solver._LazyNeighbours(memo, budget)
    # first v = 1 degrees of (cp 4, tp 1) and (cp 2, tp 1), and deep candidates of those degrees (not (1, 2, 1, 97))
    bounded = [neighbours[key] for key in ((1, 1, 1, 96, 1, 4, 1, 0), (1, 2, 1, 96, 1, 2, 1, 0),
                                           (1, 1, 1, 97, 1, 4, 1, 0), (1, 1, 1, 98, 1, 4, 1, 0),
                                           (1, 2, 1, 98, 1, 2, 1, 0))]
    asked = []
    real = solver.Memo.quick_plans
    monkeypatch.setattr(solver.Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.key) or real(self, sk))
    got = solver._deepest_plans(memo, budget, bounded)
    assert got is not None and got[0] < 3.094e6 and len(got[1].stages) == 98
    assert got[1].stages[0].num_layers == 0 == got[1].stages[-1].num_layers
    assert math.isclose(estimate(problem, got[1]).cost_usd, got[0], rel_tol=1e-12)
    assert in_search_space(problem, got[1], options)
    assert sorted(asked) == [(1, 1, 1, 97, 1, 4, 1, 0), (1, 1, 1, 98, 1, 4, 1, 0), (1, 2, 1, 98, 1, 2, 1, 0)]
    monkeypatch.setattr(solver, "DEEPEST_MOST", 1)  # in order of their bounds: the first only
    asked.clear()
    solver._deepest_plans(memo, budget, bounded)
    assert len(asked) == 1
    tight = Budget(objective="cost", max_time_s=0.999 * got[2].training_time_s)
    monkeypatch.setattr(solver, "DEEPEST_MOST", 8)
    other = solver._deepest_plans(memo, tight, bounded)
    assert other is None or other[2].training_time_s <= tight.max_time_s
