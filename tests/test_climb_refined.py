"""The climb's refined-bound skip (issue 14, item 3, round 10, costside; docs/solver.md "Round 10: the climb
skips what its bound rules out (costside)").

_climb prices a neighbouring candidate's quick plans only where solver._refined_at_least does not say that the
candidate's refined bound under the budget reaches the current plan's value. The skip is valid when that bound lies
below every plan of the candidate that meets the budget, over every mode, pattern, kind, cp, v and optimizer setting:
checked here against brute force (tests/test_audit_dist_bounds.py's instances: small GPUs, long sequences, slow
links, mixture of experts, the megatron target's space, the optimizer left open) under edge budgets at plans' exact
values, the wide climb's form (which prices interleaved variants: every v > 1 candidate of the same (tp, dp, b, pp)
must be ruled out too, by its refined or its in-flight bound) against the plans of every v. A skip that is too
eager (the refined or the in-flight bound raised by 2 %, or the v = 1 bound alone in the wide form) fails the
check. And the climb's answer is the same with and without the skip, with fewer candidates' quick plans priced.
"""

from __future__ import annotations

import random
from unittest import mock

import pytest

from optsearch import solver
from optsearch.search import budget_violations, objective_value

from tests.test_audit_dist_bounds import edge_budgets, random_instance, small, space_plans

REL = 1e-9
SEEDS = (3, 6, 7, 8, 20, 36)  # 7 and 20 mixtures of experts; 6, 8 and 20 seq 8192 on 4-12 GiB GPUs and 36 a
# 2.5 GiB GPU (memory-tight); 8 with cp; 6 and 36 interleaved (v = 2 plans beat their v = 1 twins); 3 uniform + block
CLIMB_SEEDS = (36, 7)


def check_skip(problem, options, seed: int) -> dict:
    """For every budget of edge_budgets and every v = 1 candidate with a plan that meets it: _refined_at_least is
    False at that candidate's best plan's value (so _climb would price its quick plans). Returns counts."""
    memo = solver.Memo(problem, options)
    priced = list(space_plans(problem, options))
    by_key: dict[tuple, list] = {}
    for cand, plan, est in priced:
        by_key.setdefault(cand.key, []).append((plan, est))
    stats = {"checked": 0, "skipped": 0, "interleaved": 0, "moe": problem.model.is_moe}
    for budget in edge_budgets(priced, random.Random(seed)):
        kept = {b.cand.key: b for b in solver._candidates(memo, budget)[0]}
        values = [objective_value(e, budget.objective) for _, p, e in priced if not budget_violations(p, e, budget)]
        overall = min(values) if values else None
        for key, plans in by_key.items():
            if key[6] != 1:  # _climb's neighbours are v = 1 candidates
                continue
            meeting = [objective_value(e, budget.objective) for p, e in plans if not budget_violations(p, e, budget)]
            if not meeting:
                continue
            best = min(meeting)
            assert key in kept, ("pruned by its cheap bound", key, budget)
            assert not solver._refined_at_least(memo, budget, kept[key], best * (1 + REL)), (key, budget, best)
            # the wide climb's form: the plans of the same (tp, dp, b, pp) at every v count too
            every_v = min([best] + [objective_value(e, budget.objective) for k, others in by_key.items()
                                    if k[:6] + k[7:] == key[:6] + key[7:] and k[6] > 1
                                    for p, e in others if not budget_violations(p, e, budget)])
            assert not solver._refined_at_least(memo, budget, kept[key], every_v * (1 + REL), True), (key, budget)
            stats["interleaved"] += every_v < best
            stats["checked"] += 1
            # the skip does fire: candidates ruled out at the optimum's value (a climb that has reached it)
            stats["skipped"] += solver._refined_at_least(memo, budget, kept[key], overall * (1 + REL))
    return stats


def test_the_refined_skip_never_rules_out_a_plan_that_meets_the_budget():
    checked = moe = skipped = interleaved = 0
    for seed in SEEDS:
        problem, options = random_instance(seed)
        assert small(problem, options)
        stats = check_skip(problem, options, seed)
        checked += stats["checked"]
        skipped += stats["skipped"]
        interleaved += stats["interleaved"]
        moe += stats["moe"] and stats["checked"] > 0
    assert checked > 200 and moe >= 2 and skipped > 0 and interleaved > 0  # some v > 1 plan beats its v = 1 twin


def test_the_check_fails_on_a_skip_that_is_too_eager():
    """The check can fail: with the refined bound (the one _refined_at_least reads; the cheap bounds unchanged)
    raised by 2 %, the skip rules out candidates whose best plan beats the value (seed 3)."""
    from optsearch.bounds import CandidateBound

    real = solver.Memo.refined_bound

    def raised(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        return CandidateBound(out.feasible, out.iteration_s * 1.02, out.rate_usd_per_hour,
                              out.cost_per_iteration_usd * 1.02) if out.feasible else out

    problem, options = random_instance(3)
    with mock.patch.object(solver.Memo, "refined_bound", raised), pytest.raises(AssertionError, match="_refined_at_least"):
        check_skip(problem, options, 3)


def test_the_check_fails_on_a_wide_skip_that_ignores_interleaving():
    """The wide climb prices interleaved variants: a skip that reads the v = 1 bound only rules out neighbours whose
    v = 2 plans beat the value (seed 36)."""
    real = solver._refined_at_least

    def v1_only(memo, budget, item, value, interleaved=False):
        return real(memo, budget, item, value, False)

    problem, options = random_instance(36)
    with mock.patch.object(solver, "_refined_at_least", v1_only), pytest.raises(AssertionError, match="v1_only"):
        check_skip(problem, options, 36)


def test_the_check_fails_on_a_raised_inflight_bound_in_the_wide_skip():
    """The wide climb's skip also reads the v > 1 candidates' in-flight bounds (CLIMB_INFLIGHT): raised by 2 %, it
    rules out a neighbour whose v = 2 plan beats the value (seed 36)."""
    real = solver._inflight_bounded

    def raised(*args, **kwargs):
        out = real(*args, **kwargs)
        return None if out is None else out * 1.02

    problem, options = random_instance(36)
    with mock.patch.object(solver, "_inflight_bounded", raised), pytest.raises(AssertionError,
                                                                             match="_refined_at_least"):
        check_skip(problem, options, 36)


def test_the_climb_gives_the_same_plan_with_fewer_quick_plans():
    """_neighbour_search from the worst plan that meets each budget: the same value with and without the skip, and
    never more candidates' quick plans priced with it."""
    compared = fewer = 0
    for seed in CLIMB_SEEDS:
        problem, options = random_instance(seed)
        priced = list(space_plans(problem, options))
        for budget in edge_budgets(priced, random.Random(seed))[4:]:  # the budgets at plans' values
            meeting = [(objective_value(e, budget.objective), p, e) for _, p, e in priced
                       if p.virtual_stages == 1 and not budget_violations(p, e, budget)]
            if not meeting:
                continue
            start = max(meeting, key=lambda t: t[0])
            got = {}
            for on in (False, True):
                memo = solver.Memo(problem, options)
                bounded = solver._candidates(memo, budget)[0]
                with mock.patch.object(solver, "CLIMB_REFINED", on):
                    best = solver._neighbour_search(memo, budget, bounded, start, None)
                got[on] = (best[0], len(memo.quick))
            assert got[True][0] == got[False][0], (seed, budget, got)
            assert got[True][1] <= got[False][1]
            compared += 1
            fewer += got[True][1] < got[False][1]
    assert compared > 5 and fewer > 0
