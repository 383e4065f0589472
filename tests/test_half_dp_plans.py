"""Minimizing cost, a new loop incumbent's candidate at half its dp: quick plans (solver.py HALF_DP_PLANS,
_half_dp_plans; issue 14, item 3, round 22, quick1t; docs/solver.md "Round 22: Megatron 1T 3k cost, the half-dp
quick plans, the traced sequence and the deferred pair cover (quick1t, 2026-11-25)"). Incumbents only."""

from __future__ import annotations

import math

from optsearch import solver
from optsearch.costmodel import estimate
from optsearch.spec.budget import Budget
from optsearch.candidates import in_search_space


def test_the_half_dp_plans_of_1t_3k(monkeypatch):
    """Megatron 1T on mixed-pool-3k, cost: from the loop's first plan's candidate (tp 4, dp 2, cp 2, 69 stages) the
    half-dp candidates at 67-71 stages hold the best plan known ($15,486,753, tp 4, dp 1, cp 2, 67 stages, every one
    on p5.48xlarge); only those (listed) are priced; an odd dp gives none."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("megatron-1t", "mixed-pool-3k", []))
    options = space_from_target("megatron", problem)
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost")
    neighbours = solver._LazyNeighbours(memo, budget)
    keys = [(4, 2, 1, 69, 1, 2, 1, 0), (4, 1, 1, 66, 1, 2, 1, 0), (4, 1, 1, 67, 1, 2, 1, 0),
            (4, 1, 1, 71, 1, 2, 1, 0), (4, 1, 1, 72, 1, 2, 1, 0), (4, 1, 1, 69, 1, 1, 1, 0)]
    bounded = [neighbours[key] for key in keys]
    asked = []
    real = solver.Memo.quick_plans
    monkeypatch.setattr(solver.Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.key) or real(self, sk))
    got = solver._half_dp_plans(memo, budget, bounded, bounded[0].cand)
    assert sorted(asked) == [(4, 1, 1, 67, 1, 2, 1, 0), (4, 1, 1, 71, 1, 2, 1, 0)]  # within 2 stages, same cp
    assert got is not None and got[0] < 15_486_754 and len(got[1].stages) == 67
    assert {s.node_type for s in got[1].stages} == {"p5.48xlarge"}
    assert math.isclose(estimate(problem, got[1]).cost_usd, got[0], rel_tol=1e-12)
    assert in_search_space(problem, got[1], options)
    assert solver._half_dp_plans(memo, budget, bounded, bounded[1].cand) is None  # dp 1: no half
