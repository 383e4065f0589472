"""The moved sequences of an open candidate's positional bound (issue 14, item 3, costbig; docs/solver.md "Round 11:
moved sequences, and where the cost rows' 10 s goes (costbig)").

Minimizing cost, the loop prices the heuristic's plans of the node-type sequences one move away from the best
sequence of a candidate's positional bound, where that bound is below the incumbent. Incumbents only: the plans must
be honest plans of the space (in it, fitting, priced by the cost model), and the solver's answers must still equal
brute force, with both backends, where the moves fire.
"""

from __future__ import annotations

import math
from collections import Counter
from unittest import mock

from optsearch import solver
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.spec.budget import Budget
from priced import solve_exhaustive

from tests.test_audit_dist_bounds import MAX_PLANS, check_plan_honest, random_instance, small, space_plans

SEEDS = (39, 22, 11, 36)  # positional sequences of two or more types: moves priced in the solves of all four, moved
# plans given in 39's (22's outside the solve); 36 a 2.5 GiB GPU (memory-tight) with v > 1


def test_moved_sequences_by_hand():
    # (0, 1, 0, 0): the type-1 stage taken to positions 0, 2 and 3 (a type-0 stage taken out and put back next to
    # it gives the same sequences); nearest moves first
    assert solver._moved_sequences((0, 1, 0, 0)) == [(1, 0, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1)]
    got = solver._moved_sequences((0, 0, 1, 1))
    assert (0, 1, 0, 1) == got[0] and len(got) == len(set(got)) and (0, 0, 1, 1) not in got
    assert set(got) == {(0, 1, 0, 1), (0, 1, 1, 0), (1, 0, 0, 1)}  # (1, 1, 0, 0) is two moves away
    assert solver._moved_sequences((2, 2, 2)) == []  # one type: nothing to move
    long = (0,) * 20 + (1,) * 20 + (2,) * 4
    capped = solver._moved_sequences(long, most=10)
    assert len(capped) == 10 and all(Counter(s) == Counter(long) and s != long for s in capped)


def test_moved_plans_are_honest_plans_of_the_space():
    """Every plan _moved_plans gives, for every v = 1 candidate's positional sequences, is in the space, fits and
    carries the cost model's estimate."""
    from optsearch.formulation.positional import positional_bound

    seen = 0
    for seed in (22, 39):  # 20 and 6 moved plans
        problem, options = random_instance(seed)
        memo = solver.Memo(problem, options)
        budget = Budget(objective="cost")
        for item in solver._candidates(memo, budget)[0]:
            sk = memo.skeleton(item.cand)
            if item.cand.v != 1 or sk.most is None:
                continue
            pos = positional_bound(sk, budget)
            for seq in pos.sequences[:1]:
                for plan, est in solver._moved_plans(memo, sk, seq):
                    assert in_search_space(problem, plan, options) and est.fits
                    assert math.isclose(estimate(problem, plan).cost_usd, est.cost_usd, rel_tol=1e-12)
                    assert tuple(s.num_layers for s in plan.stages) and len(plan.stages) == item.cand.pp
                    seen += 1
    assert seen > 0


def test_cost_answers_equal_brute_force_where_the_moves_fire():
    """Both backends, minimizing cost without a budget and under a deadline at the cheapest plan's time and a
    random plan's: the answers equal brute force, and the moves priced plans on the way."""
    real = solver._moved_plans
    calls = []

    def counted(memo, sk, seq, *deadline):
        out = real(memo, sk, seq, *deadline)
        calls.append(len(out))
        return out

    checked = 0
    with mock.patch.object(solver, "_moved_plans", counted):
        for seed in SEEDS:
            problem, options = random_instance(seed)
            assert small(problem, options)
            ests = sorted((e for _, _, e in space_plans(problem, options)), key=lambda e: e.cost_usd)
            budgets = [Budget(objective="cost")]
            if ests:
                budgets += [Budget(objective="cost", max_time_s=ests[0].training_time_s),
                            Budget(objective="cost", max_time_s=ests[len(ests) // 2].training_time_s)]
            for budget in budgets:
                truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
                for name in ("cbc", "cpsat"):
                    got = solver.solve(problem, budget, solver=name, options=options)
                    if truth.status == "infeasible":
                        assert got.status == "infeasible", (seed, name, budget)
                        continue
                    assert got.status == "optimal", (seed, name, budget, got.status)
                    check_plan_honest(problem, options, budget, got.plan, got.objective_value)
                    assert not budget_violations(got.plan, got.estimate, budget)
                    assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6), (
                        seed, name, budget, got.objective_value, truth.objective_value)
                    assert math.isclose(objective_value(got.estimate, "cost"), got.objective_value, rel_tol=1e-9)
                    checked += 1
    assert checked >= 8 and len(calls) > 0 and sum(calls) > 0


def test_moved_plans_priced_at_most_the_work_over_pp():
    """Round 21: _moved_plans prices at most min(SEQUENCE_MOVES_MAX, SEQUENCE_MOVES_WORK // pp**2) moved
    sequences (at least one), the nearest first (_moved_sequences' order); SEQUENCE_MOVES_WORK = 0: the round-11 cap
    alone."""

    class Counting:
        def __init__(self):
            self.asked = []

        def plan_of(self, sk, seq):
            self.asked.append(seq)
            return None

    for pp in (4, 9, 34, 64, 130):
        seq = tuple([0] * (pp // 2) + [1] * (pp - pp // 2))
        every = solver._moved_sequences(seq, 10**6)
        for work, most in ((0, solver.SEQUENCE_MOVES_MAX), (40_000, max(1, 40_000 // pp**2)), (1, 1)):
            memo = Counting()
            with mock.patch.object(solver, "SEQUENCE_MOVES_WORK", work):
                solver._moved_plans(memo, None, seq)
            assert memo.asked == every[:min(most, solver.SEQUENCE_MOVES_MAX, len(every))], (pp, work)
