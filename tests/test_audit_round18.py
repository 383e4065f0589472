"""Post-merge audit of round 18 (audit10; bench/audit_round18.py runs the same checks over many seeds and kinds):
- costbound: positional.mixed_slowest_floor_s (TYPE_BOUNDARY_FLOOR). `single` False only where brute force finds no
  plan of the candidate on one type; M_mix at or below the slowest stage of every mixed plan, interleaved (v = 2),
  cp = 2 and mixture-of-experts plans included; the positional bound with the floor at least the bound without it
  and at or below every plan that meets the budget, for v > 1 through the solver's interleaved_positional_bound; the
  tables kept on a skeleton across budgets (as a sweep keeps them) answer as fresh tables do, bit for bit.
On ecb0759 (the session's base) mixed_slowest_floor_s and TYPE_BOUNDARY_FLOOR do not exist: every test here fails
there on the import or the switch."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from optsearch.bounds import interleaving_factor
from optsearch.formulation import positional
from optsearch.formulation.positional import TYPE_BOUNDARY_FLOOR, mixed_slowest_floor_s
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, interleaved_positional_bound
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import space_plans
from test_positional_type_boundary import boundary_instance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

REL = 1e-9
_FLOOR = mixed_slowest_floor_s  # the function under test, before any monkeypatch


def _by_candidate(problem, options):
    out: dict = {}
    for cand, plan, est in space_plans(problem, options):
        out.setdefault(cand.key, (cand, []))[1].append((plan, est))
    return out


def _fresh(sk, on: bool) -> None:
    sk.positional = None
    with mock.patch.object(positional, "TYPE_BOUNDARY_FLOOR", on):
        positional.tables(sk)


def _budgets(plans) -> list[Budget]:
    """No budget, and a cost cap, a deadline and a rent limit at the exact values of the cheapest, the fastest and one
    other plan (each objective)."""
    out = [Budget(objective="cost"), Budget(objective="time")]
    ests = [e for _, e in plans]
    if not ests:
        return out
    picks = [min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s), ests[len(ests) // 2]]
    for est in picks:
        for objective in ("time", "cost"):
            out += [Budget(objective=objective, max_cost_usd=est.cost_usd),
                    Budget(objective=objective, max_time_s=est.training_time_s),
                    Budget(objective=objective, max_usd_per_hour=est.usd_per_hour)]
    return out


def _least_meeting(plans, budget):
    values = [objective_value(e, budget.objective) for p, e in plans if not budget_violations(p, e, budget)]
    return min(values, default=None)


def audit_candidates(problem, options, floor=None) -> dict:
    """Every candidate of the space whose v = 1 sibling is in pattern mode, checked as bench/audit_round18's
    check_boundary does (fewer budgets): returns the counts; asserts on the first failure. floor: the function that
    gives (M_mix, single) (mixed_slowest_floor_s unless a test patches an invalid one in)."""
    floor = floor or _FLOOR
    by_cand = _by_candidate(problem, options)
    every = [pe for _, plans in by_cand.values() for pe in plans]
    budgets = _budgets(every)
    memo = Memo(problem, options)
    counts = dict(candidates=0, not_single=0, mixed=0, interleaved=0, cp=0, bounds=0, raised=0, raised_v=0, below=0)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        m_mix, single = floor(sibling)
        counts["candidates"] += 1
        counts["not_single"] += not single
        for plan, est in plans:
            if len({s.node_type for s in plan.stages}) > 1:
                counts["mixed"] += 1
                counts["interleaved"] += plan.virtual_stages > 1
                counts["cp"] += plan.cp > 1
                assert max(s.time_s for s in est.stages) >= m_mix * (1 - REL), (key, str(plan))
            else:
                assert single, ("single False, but this plan runs on one type", key, str(plan))
        factor = 1.0 if cand.v == 1 else interleaving_factor(memo.degree_terms(
            cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist).m, cand.pp, cand.v)
        got = {}
        for on in (True, False):
            _fresh(sibling, on)
            for i, budget in enumerate(budgets):
                got[(on, i)] = (positional.positional_bound(sibling, budget).bound if cand.v == 1 else
                                interleaved_positional_bound(sibling, budget, factor))
        sibling.positional = None
        for i, budget in enumerate(budgets):
            have, want = got[(True, i)], got[(False, i)]
            counts["bounds"] += 1
            assert have >= want * (1 - 1e-12), ("the floor lowers the bound", key, budget, have, want)
            counts["raised"] += have > want * (1 + REL)
            counts["raised_v"] += cand.v > 1 and have > want * (1 + REL)
            best = _least_meeting(plans, budget)
            if best is not None:
                counts["below"] += 1
                assert have <= best * (1 + REL), ("above a plan", key, budget, have, best)
    return counts


# boundary_wide draws measured when written: 21 (dense; 18 candidates, 11 with single False, 189 mixed plans, 31 of
# them at v = 2 and 32 at cp = 2; the floor raises 8 bounds) and 4 (a mixture of experts; 5 with single False, 116
# mixed plans, 8 bounds raised). About 0.8 s and 0.4 s of CPU.
WIDE_SEED, MOE_SEED = 21, 4


def _wide(seed: int):
    from audit_round18 import boundary_wide

    made = boundary_wide(seed)
    assert made is not None
    return made


def test_single_false_only_where_no_plan_runs_on_one_type():
    """Supply that binds (boundary_instance): where `single` is False the marks below M_mix are dropped, so every
    plan of the candidate must mix types; brute force finds none on one type."""
    problem, options = boundary_instance(4)
    counts = audit_candidates(problem, options)
    assert counts["not_single"] > 0 and counts["mixed"] > 0 and counts["raised"] > 0


def test_an_invalid_single_is_caught():
    """The check above can fail: `single` computed from the supply with the nodes per block left out (or any single
    False where a one-type plan exists) meets a plan on one type."""
    problem, options = boundary_instance(4)

    def always_mixed(f, compute=None):
        return _FLOOR(f, compute)[0], False

    with pytest.raises(AssertionError, match="single False"):
        audit_candidates(problem, options, floor=always_mixed)


def test_interleaved_cp_and_expert_plans_lie_above_the_floor_and_the_bound():
    """v = 2, cp = 2 and a mixture of experts on supply that binds: every mixed plan's slowest stage (v sends a
    micro-batch) at least M_mix, every interleaved bound (the v = 1 sibling's, through the solver's
    interleaved_positional_bound) below every plan that meets the budget."""
    problem, options = _wide(WIDE_SEED)
    counts = audit_candidates(problem, options)
    assert counts["interleaved"] > 0 and counts["cp"] > 0 and counts["raised"] > 0, counts
    problem, options = _wide(MOE_SEED)
    assert problem.model.is_moe
    counts = audit_candidates(problem, options)
    assert counts["not_single"] > 0 and counts["raised"] > 0, counts


def test_an_invalid_floor_fails_on_interleaved_plans():
    problem, options = _wide(WIDE_SEED)

    def doubled(f, compute=None):
        m_mix, single = _FLOOR(f, compute)
        return m_mix * 1.5, single

    with pytest.raises(AssertionError):
        audit_candidates(problem, options, floor=doubled)


def test_kept_tables_answer_as_fresh_tables_across_budgets():
    """A skeleton's tables are kept between budgets (a what-if sweep, a budget row's solves); with the new mark their
    per-mark memos (rent, comm, sums, combined) are indexed by the marks M_mix joined: every budget's bound from
    kept tables, asked in a shuffled order, equals the bound from tables built for it alone, bit for bit."""
    assert TYPE_BOUNDARY_FLOOR
    problem, options = boundary_instance(4)
    by_cand = _by_candidate(problem, options)
    memo = Memo(problem, options)
    rng = random.Random(0)
    compared = 0
    for cand, plans in by_cand.values():
        sk = memo.skeleton(cand)
        if cand.v != 1 or sk.most is None or not math.isfinite(_FLOOR(sk)[0]):
            continue
        budgets = _budgets(plans)
        rng.shuffle(budgets)
        sk.positional = None
        kept = [positional.positional_bound(sk, b) for b in budgets]
        for budget, have in zip(budgets, kept):
            sk.positional = None
            want = positional.positional_bound(sk, budget)
            assert (have.bound, have.sequences) == (want.bound, want.sequences), (cand.key, budget)
            compared += 1
    assert compared > 0


# ---- budgetbound (BUDGET_LAGRANGE) beside costbound's floor; timerows2 (INFLIGHT_ENDS_TIME); budgetb2 --------------

def _totals():
    from audit_round14 import Totals

    return Totals()


def test_the_lift_and_the_floor_together_lie_below_every_plan_and_above_each_alone():
    """Time under a cost cap on supply that binds (boundary_wide: v = 2 and cp = 2 candidates among them), every
    setting of (TYPE_BOUNDARY_FLOOR, BUDGET_LAGRANGE) on fresh tables: at or below every plan that meets the cap
    (slower_than_s 0 and at the median time), both on at least each other setting (bench/audit_round18.check_lift)."""
    from audit_round18 import check_lift

    stats = _totals()
    check_lift(*_wide(WIDE_SEED), WIDE_SEED, stats, budgets_kept=4)
    assert stats["lift_below_plans"] > 0 and stats["lift_interleaved"] > 0, dict(stats)


def test_a_lift_that_ignores_the_smaller_root_is_caught(monkeypatch):
    """The lift's check can fail: the larger root taken whether or not T0 lies above the smaller one, at large
    weights (budgetbound's own invalid variant), lies above a plan of some candidate."""
    from audit_round18 import check_lift

    real = positional.budget_time_lift

    def careless(tab, ix, K, iteration, shift, b, weights=None):
        lam = (iteration ** 2 / b)[:, None] * np.array([0.5, 1.0, 2.0, 4.0, 8.0])[None, :]
        phi = tab.combined_at(np.repeat(ix, lam.shape[1]), lam.ravel(),
                              None if shift is None else np.repeat(shift, lam.shape[1])).reshape(lam.shape)
        a = K[:, None] + phi
        t2 = (a + np.sqrt(np.maximum(a * a - 4.0 * lam * b, 0.0))) / 2
        return np.maximum(real(tab, ix, K, iteration, shift, b, weights), np.where(np.isfinite(a), t2, -np.inf).max(axis=1))

    monkeypatch.setattr(positional, "budget_time_lift", careless)
    with pytest.raises(AssertionError, match="above a plan"):
        check_lift(*_wide(WIDE_SEED), WIDE_SEED, _totals(), budgets_kept=4)


def test_the_ends_walk_follows_its_switch_on_kept_tables_and_lies_below_every_plan():
    """timerows2: solver._inflight_bounded minimizing time (no budget, a deadline at the cheapest plan's time),
    INFLIGHT_ENDS_TIME on, off, and flipped at random before each call on one memo (its in-flight tables and call
    caches kept under keys without the switch), with no cutoff and at the least plan's time: each answer is the fresh
    answer of the setting it was asked under; on at least off; with no cutoff below every plan that meets the budget. random_instance(5): two types, tied
    embeddings whose all-reduce differs by the end pair, interleaved candidates."""
    from audit_round18 import check_ends
    from test_audit_dist_bounds import random_instance

    stats = _totals()
    check_ends(*random_instance(5), 5, stats, budgets_kept=2, cutoffs=(1.0,), caps=False)
    assert stats["ends_raised"] > 0 and stats["ends_below_plans"] > 0, dict(stats)


def test_split_descents_and_repairs_give_real_plans_on_the_same_nodes():
    """budgetb2: _split_descent from random plans of the space gives a plan of the space that fits, priced as
    estimate prices it, on the same node types (the same rent), no slower and no dearer; _split_repaired gives None or
    a plan that meets the cap and beats `beat`; _end_retyped keeps every stage but the last, put on a cheaper
    GPU-hour (bench/audit_round18.check_split)."""
    from audit_round18 import check_split
    from test_audit_dist_bounds import random_instance

    stats = _totals()
    for seed in (0, 4):
        check_split(*random_instance(seed), seed, stats, starts=15)
    assert stats["split_moved"] > 0 and stats["split_repaired"] > 0 and stats["split_retyped"] > 0, dict(stats)
