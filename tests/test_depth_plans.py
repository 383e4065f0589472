"""Cost under a deadline: a new loop incumbent's candidate at the depths beside it, their quick plans (solver.py
DEPTH_PLANS, _depth_plans; issue 14, item 3, round 24, loopB; docs/solver.md "Round 24: ... (loopB, 2026-11-25)").
Incumbents only: every plan is a listed candidate's quick plan, priced by the cost model and checked against the
deadline; the solver's answers still equal brute force."""

from __future__ import annotations

import math

import pytest

from optsearch import solver
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance
from priced import solve_exhaustive

D_1T_8K = 2_882_801.43  # /work/brief/budgets24.txt (Megatron 1T, mixed-pool-8k)


def test_the_depth_plans_of_1t_8k(monkeypatch):
    """Megatron 1T, mixed-pool-8k, D = 2,882,801 s: from the 45-stage candidate (tp 4, dp 6, cp 2; the loop's
    incumbent at 3.3 s of CPU is its quick plan, $16,344,986) the rule prices the listed 43, 44, 46 and 47-stage
    candidates (not its own, not 48) and returns the 46-stage one's quick plan, $16,107,790.55 (40 p5 stages of 3
    layers, 4 p4d stages of 1: the row's optimum, proven at 20-23 s of CPU); at DEPTH_PLANS_NEAR = 1 it prices 44 and
    46 only."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("megatron-1t", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost", max_time_s=D_1T_8K)
    neighbours = solver._LazyNeighbours(memo, budget)
    keys = {q: (4, 6, 1, q, 1, 2, 1, 0) for q in range(43, 49)}
    bounded = [neighbours[key] for key in keys.values()]
    asked = []
    real = solver.Memo.quick_plans
    monkeypatch.setattr(solver.Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.pp) or real(self, sk))
    got = solver._depth_plans(memo, budget, bounded, neighbours[keys[45]].cand)
    assert asked == [43, 44, 46, 47]
    assert got is not None and math.isclose(got[0], 16_107_790.5456, rel_tol=1e-9) and len(got[1].stages) == 46
    assert got[2].training_time_s <= D_1T_8K and in_search_space(problem, got[1], options)
    assert math.isclose(estimate(problem, got[1]).cost_usd, got[0], rel_tol=1e-12)
    assert sum(s.node_type == "p5.48xlarge" for s in got[1].stages) == 42
    asked.clear()
    monkeypatch.setattr(solver, "DEPTH_PLANS_NEAR", 1)
    solver._depth_plans(memo, budget, bounded, neighbours[keys[45]].cand)
    assert asked == [44, 46]


def _solve_with_spy(problem, options, budget, monkeypatch):
    real, plans = solver._depth_plans, []

    def spy(*a):
        out = real(*a)
        plans.append(out)
        return out
    monkeypatch.setattr(solver, "_depth_plans", spy)
    return solver.solve(problem, budget, options=options, time_limit_s=60.0), plans


@pytest.mark.parametrize("seed", [53, 61, 62])
def test_depth_plans_answers_equal_brute_force(seed, monkeypatch):
    """On small random instances, cost under a deadline at 1.5 and 3 x the least time: solve's answer with the rule
    asked, and with it off, equals brute force; every plan it returns is a plan of the space within the deadline,
    priced by the cost model; it returns one on each seed (53 at 3 x, 61 and 62 at 1.5 x)."""
    problem, options = random_instance(seed)
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options)
    returned = []
    for factor in (1.5, 3.0):
        budget = Budget(objective="cost", max_time_s=factor * fastest.objective_value)
        truth = solve_exhaustive(problem, budget, options=options)
        got, plans = _solve_with_spy(problem, options, budget, monkeypatch)
        assert got.status == truth.status == "optimal"
        assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-9)
        for found in filter(None, plans):
            assert in_search_space(problem, found[1], options) and found[2].training_time_s <= budget.max_time_s
            assert math.isclose(estimate(problem, found[1]).cost_usd, found[0], rel_tol=1e-12)
        returned += [found for found in plans if found is not None]
        monkeypatch.setattr(solver, "DEPTH_PLANS", False)
        off = solver.solve(problem, budget, options=options, time_limit_s=60.0)
        monkeypatch.setattr(solver, "DEPTH_PLANS", True)
        assert off.status == "optimal" and math.isclose(off.objective_value, truth.objective_value, rel_tol=1e-9)
    assert returned
