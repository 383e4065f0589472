"""Minimizing cost under a deadline, after the climbs: the quick plans of the candidates whose GPU count fills the
deadline at the incumbent's GPU-seconds (solver.py DEADLINE_FILL, _deadline_fill_plans; issue 14, item 3, round 23,
loop175; docs/solver.md "Round 23: cost under a deadline, the loop's throughput and the deadline's slack (loop175,
2026-11-25)"). Incumbents only: every plan is a listed candidate's quick plan, priced and checked against the budget;
the solver's answers still equal brute force."""

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
D_175B_8K = 1_066_400.75  # the round-23 grid's deadline (GPT-3 175B, mixed-pool-8k)


@pytest.fixture(scope="module")
def gpt3_175b():
    """GPT-3 175B on mixed-pool-8k, megatron target: the grid's instance (bench/objective_grid.py)."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt3-175b", "mixed-pool-8k", []))
    return problem, space_from_target("megatron", problem)


def _climbs_end(problem, options):
    """The climbs' plan of the 175B 8k cost<=D row (tp 2, dp 16, cp 2, 12 stages of 8 layers at v = 4, all p5)."""
    stages = tuple(Stage(node_type=P5, num_layers=8) for _ in range(12))
    plan = solver._with_degrees(problem, Plan(tp=2, dp=16, micro_batch_size=1, stages=stages, cp=2, virtual_stages=4),
                                2, 16, 2, stages)
    est = solver.Memo(problem, options).priced(plan)
    assert est is not None
    return est.cost_usd, plan, est


def test_the_deadline_fill_of_175b_8k(gpt3_175b, monkeypatch):
    """From the climbs' plan ($1,930,643 in 736,362 s on 768 GPUs: 530 GPUs fill D) the rule prices, in order of
    their bounds, only the listed v = 1 candidates with 477-541 GPUs below the plan's value (fewer GPUs are not
    listed: their bounds break D), and returns the quick plan of tp 1, dp 4, cp 4, 33 stages ($1,909,290, all p5;
    3 x 32 + 0 layers), with DEADLINE_FILL_SPLIT (round 24) its layers moved at the ends, 2, 2, 3 x 30, 2: the row's
    optimum, $1,906,385.28 (proven by the loop at 11-13 s of CPU); none without a deadline, none without slack, at
    most DEADLINE_FILL_MOST priced."""
    problem, options = gpt3_175b
    monkeypatch.setattr(solver, "DEADLINE_FILL_SPLIT", False)
    start = _climbs_end(problem, options)
    assert 1_930_000 < start[0] < 1_931_000 and start[2].training_time_s < D_175B_8K
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost", max_time_s=D_175B_8K)
    neighbours = solver._LazyNeighbours(memo, budget)
    inside = [(1, 4, 1, 33, 1, 4, 1, 0), (1, 4, 1, 32, 1, 4, 1, 0), (2, 2, 1, 33, 1, 4, 1, 0)]  # 528, 512, 528 GPUs
    outside = [(1, 4, 1, 40, 1, 4, 1, 0), (2, 8, 1, 14, 1, 4, 1, 0), (1, 4, 1, 34, 1, 4, 1, 0)]  # 640, 896, 544
    bounded = [neighbours[key] for key in inside + outside]
    asked = []
    real = solver.Memo.quick_plans
    monkeypatch.setattr(solver.Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.key) or real(self, sk))
    got = solver._deadline_fill_plans(memo, budget, bounded, start)
    order = sorted(inside, key=lambda k: (neighbours[k].lower_bound, k))
    assert asked == order
    assert got is not None and 1_909_000 < got[0] < 1_909_500 and len(got[1].stages) == 33
    assert {s.node_type for s in got[1].stages} == {P5} and got[1].dp == 4 and got[1].cp == 4
    assert got[2].training_time_s <= D_175B_8K
    assert math.isclose(estimate(problem, got[1]).cost_usd, got[0], rel_tol=1e-12)
    assert in_search_space(problem, got[1], options)
    assert [s.num_layers for s in got[1].stages] == [3] * 32 + [0]
    monkeypatch.setattr(solver, "DEADLINE_FILL_SPLIT", True)  # (the quick plans are the memo's: none priced again)
    split = solver._deadline_fill_plans(memo, budget, bounded, start)
    assert math.isclose(split[0], 1_906_385.2805, rel_tol=1e-9) and split[2].training_time_s <= D_175B_8K
    assert [s.num_layers for s in split[1].stages] == [2, 2] + [3] * 30 + [2] and split[1].dp == 4
    assert math.isclose(estimate(problem, split[1]).cost_usd, split[0], rel_tol=1e-12)
    assert in_search_space(problem, split[1], options) and asked == order + order
    asked.clear()
    assert solver._deadline_fill_plans(memo, Budget(objective="cost"), bounded, start) is None  # no deadline
    tight = Budget(objective="cost", max_time_s=start[2].training_time_s)  # no slack
    assert solver._deadline_fill_plans(memo, tight, bounded, start) is None and asked == []
    monkeypatch.setattr(solver, "DEADLINE_FILL_MOST", 1)
    solver._deadline_fill_plans(memo, budget, bounded, start)
    assert asked == order[:1]


@pytest.mark.parametrize("seed, factor", [(48, 3.0), (63, 3.0), (61, 1.5)])
def test_deadline_fill_answers_equal_brute_force(seed, factor, monkeypatch):
    """On small random instances, cost under a deadline at factor x the least time (the climbs run under a time
    limit, so the rule does): solve's answer, with the rule asked, equals brute force, and every plan it returns is
    a plan of the space that meets the deadline (it returns one on seeds 48 and 63, none better than the climbs'; on
    61 none, from a start 51 % above the optimum)."""
    problem, options = random_instance(seed)
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options)
    assert fastest.status == "optimal"
    budget = Budget(objective="cost", max_time_s=factor * fastest.objective_value)
    real, got_plans = solver._deadline_fill_plans, []

    def spy(*a, **k):
        out = real(*a, **k)
        got_plans.append(out)
        return out
    monkeypatch.setattr(solver, "_deadline_fill_plans", spy)
    got = solver.solve(problem, budget, options=options, time_limit_s=60.0)
    truth = solve_exhaustive(problem, budget, options=options)
    assert got_plans and got.status == truth.status == "optimal"
    assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-9)
    assert any(got_plans) is (seed != 61)
    for found in filter(None, got_plans):
        assert in_search_space(problem, found[1], options) and found[2].training_time_s <= budget.max_time_s
        assert math.isclose(estimate(problem, found[1]).cost_usd, found[0], rel_tol=1e-12)
