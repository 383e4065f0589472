"""Audit of round 24's merges (audit16; docs/solver.md "Round 24 after the merges: the audit (audit16, 2026-11-25)").

- loopB's DEPTH_PLANS (solver._depth_plans: minimizing cost under a deadline, a new loop incumbent's candidate at
  pp +- DEPTH_PLANS_NEAR, their quick plans; incumbents only): asked directly for every listed v = 1 candidate on
  draws its own tests do not make (supply draws of up to 6 stages, roomy and memory-tight, experts on some; the small
  random instances), deadlines at 1.00-1.05 x candidates' own quick plans' times (tight: neighbours' plans break them):
  every plan returned is in the space, the cost model's price, within D, of the candidate's degrees at another depth
  within 2; the mutant without the deadline check returns plans that break D on the same asks (caught here), and
  inside solve it gives wrong answers where the rule fires (loopB's draws, tight D).
- loopB's DEADLINE_FILL_SPLIT (the deadline fill's best quick plan through _split_improved): from every listed
  candidate's best quick plan under D, the fill with the split on and off: both in the space, priced, within D; on
  at or below off.
- Both backends with DEPTH_PLANS and DEADLINE_FILL_SPLIT on and off (each alone too): brute force's answer at cost
  under deadlines at 1.00 / 1.01 / 1.05 x drawn plans' times (and the other objectives), every plan re-priced.
bench/audit_round24.py sweeps more seeds with the same checks.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

import optsearch.formulation.positional as positional
import optsearch.solver as solver_module
from draws import draws
from optsearch.baselines.exhaustive import solve_exhaustive
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations
from optsearch.bounds import interleaving_factor
from optsearch.solver import Memo, interleaved_positional_bound
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, random_instance, space_plans
from test_audit_round11 import assert_equals_truth
from test_audit_round23 import by_candidate, supply_draw, time_asks
from test_positional_type_boundary import boundary_instance

DEADLINE_SCALES = (1.0, 1.01, 1.02, 1.05)
REL = 1e-12


def depth_plans_reference(memo, budget, bounded, cand, check: bool = True):
    """_depth_plans as merged at 946547d (before main 5b78c35's _best_listed); with check False, no deadline check
    (the best quick plan of each neighbour, whatever its time): the mutant loopB's own tests did not catch."""
    by_key = solver_module._v1_by_key(bounded)
    key, best = cand.key, None
    for pp in range(key[3] - solver_module.DEPTH_PLANS_NEAR, key[3] + solver_module.DEPTH_PLANS_NEAR + 1):
        item = by_key.get(key[:3] + (pp,) + key[4:]) if pp != key[3] else None
        if item is None:
            continue
        own = solver_module._best_meeting(budget if check else Budget(objective="cost"),
                                          memo.quick_plans(memo.skeleton(item.cand)))
        if own is not None and (best is None or own[0] < best[0]):
            best = own
    return best


def depth_plans_unchecked(memo, budget, bounded, cand):
    return depth_plans_reference(memo, budget, bounded, cand, check=False)


def _quick_times(memo, v1) -> list[float]:
    """Each listed v = 1 candidate's fastest quick plan's time (the deadlines are drawn at these)."""
    times = set()
    for item in v1:
        quick = memo.quick_plans(memo.skeleton(item.cand))
        if quick:
            times.add(min(e.training_time_s for _, e in quick))
    return sorted(times)


def deadlines(problem, options, seed, picks: int = 3, scales=DEADLINE_SCALES) -> list[Budget]:
    """Cost under deadlines at `scales` x `picks` drawn candidates' fastest quick plans' times."""
    memo = solver_module.Memo(problem, options)
    base, _ = solver_module._candidates(memo, Budget(objective="cost"))
    times = _quick_times(memo, [b for b in base if b.cand.v == 1])
    rng = random.Random(24_000 + seed)
    return [Budget(objective="cost", max_time_s=t * s) for t in rng.sample(times, min(picks, len(times)))
            for s in scales]


def check_priced(problem, options, budget, got, where) -> None:
    plan, est = got[1], got[2]
    assert in_search_space(problem, plan, options), ("not in the space", where)
    assert est.training_time_s <= budget.max_time_s, ("breaks D", where, est.training_time_s, budget.max_time_s)
    assert math.isclose(estimate(problem, plan).cost_usd, got[0], rel_tol=REL), ("price", where, got[0])


def depth_walk(problem, options, seed, stats, picks: int = 3, rule=None):
    """Every listed v = 1 candidate's _depth_plans (or `rule`) under each drawn deadline: stats depth_asks,
    depth_returned, depth_mut_breaks (the unchecked mutant's plan above D on the same ask)."""
    rule = rule or solver_module._depth_plans
    memo = solver_module.Memo(problem, options)
    for budget in deadlines(problem, options, seed, picks):
        bounded, _ = solver_module._candidates(memo, budget)
        for item in bounded:
            if item.cand.v != 1:
                continue
            stats["depth_asks"] += 1
            got = rule(memo, budget, bounded, item.cand)
            mut = depth_plans_unchecked(memo, budget, bounded, item.cand)
            stats["depth_mut_breaks"] += mut is not None and mut[2].training_time_s > budget.max_time_s
            if rule is solver_module._depth_plans:  # main 5b78c35's _best_listed: the same plan as 946547d's loop
                ref = depth_plans_reference(memo, budget, bounded, item.cand)
                assert (ref is None and got is None) or (ref is not None and got is not None and ref[0] == got[0]
                                                          and ref[1] == got[1]), ("refactor differs", item.cand.key)
            if got is None:
                continue
            stats["depth_returned"] += 1
            where = (seed, budget.max_time_s, item.cand.key)
            check_priced(problem, options, budget, got, where)
            plan = got[1]
            assert (plan.tp, plan.dp, plan.micro_batch_size, plan.cp) == (
                item.cand.tp, item.cand.dp, item.cand.micro_batch_size, item.cand.cp), where
            assert 0 < abs(len(plan.stages) - item.cand.pp) <= solver_module.DEPTH_PLANS_NEAR, where
    return stats


def fill_walk(problem, options, seed, stats, picks: int = 2, starts: int = 12):
    """From up to `starts` listed v = 1 candidates' best quick plans under each drawn deadline (with time to spare),
    _deadline_fill_plans with DEADLINE_FILL_SPLIT on and off: each plan in the space, priced, within D; on at or below
    off. stats fill_asks, fill_returned, fill_split_better."""
    memo = solver_module.Memo(problem, options)
    for budget in deadlines(problem, options, seed, picks):
        bounded, _ = solver_module._candidates(memo, budget)
        asked = 0
        for item in bounded:
            if item.cand.v != 1 or asked >= starts:
                continue
            start = solver_module._best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
            if start is None:
                continue
            asked += 1
            got = {}
            for on in (True, False):
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(solver_module, "DEADLINE_FILL_SPLIT", on)
                    got[on] = solver_module._deadline_fill_plans(memo, budget, bounded, start)
            stats["fill_asks"] += 1
            where = (seed, budget.max_time_s, item.cand.key)
            assert (got[True] is None) == (got[False] is None), where
            if got[True] is None:
                continue
            stats["fill_returned"] += 1
            for value in got.values():
                check_priced(problem, options, budget, value, where)
            assert got[True][0] <= got[False][0], where
            stats["fill_split_better"] += got[True][0] < got[False][0] * (1 - 1e-9)
    return stats


# ---- sum1t: the cost lift (positional.cost_pair_lift, COST_PAIR_SUM; a bound change minimizing cost) ---------------

EXACT = ("PAIR_SUM_RING", "SEND_VARIANTS_AT_ONCE")


def _bound(memo, cand, sibling, budget, slower=0.0, cutoff=math.inf):
    """The loop's positional bound of cand (v > 1 through its v = 1 sibling / f_v, as solve asks it)."""
    if cand.v == 1:
        return positional.positional_bound(sibling, budget, cutoff=cutoff, slower_than_s=slower).bound
    d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
    return interleaved_positional_bound(sibling, budget, interleaving_factor(d.m, cand.pp, cand.v), cutoff=cutoff)


def _bound_sides(memo, cand, sibling, budget, floor, cutoff, sides) -> dict:
    """{label: the candidate's bound (_bound) with positional's switches set as in that side}, fresh tables each."""
    got = {}
    for label, side in sides:
        sibling.positional = None
        with pytest.MonkeyPatch.context() as mp:
            for name, value in side.items():
                mp.setattr(positional, name, value)
            got[label] = _bound(memo, cand, sibling, budget, floor, cutoff)
    sibling.positional = None
    return got


def cost_walk(problem, options, seed, stats, picks: int = 2, cuts=(math.inf, 1.0, 1.001, 1.02, 1.5), shared=True,
              exact=True):
    """Every candidate's positional bound minimizing cost (v > 1 through its sibling), with no budget and under
    deadlines at 1.00 / 1.05 / 1.15 x `picks` drawn plans' times, slower_than_s 0 and (v = 1, no deadline) the median
    plan time, cutoffs at `cuts` x the candidate's best plan under the budget: with COST_PAIR_SUM on, at or below that
    plan (cost_above: a defect), fresh tables each time; against the switch off: raised and lowered counted; with
    `exact`, PAIR_SUM_RING and SEND_VARIANTS_AT_ONCE off: the same bound bit for bit (cost_exact_differ); with `shared`
    the same asks on one kept skeleton per candidate in a shuffled order: the fresh value each time (cost_cache_differ).
    """
    rng = random.Random(24_100 + seed)
    by_cand = by_candidate(problem, options)
    every = [e for _, plans in by_cand.values() for _, e in plans]
    if not every:
        return stats
    budgets = [Budget(objective="cost")] + [Budget(objective="cost", max_time_s=e.training_time_s * s)
                                             for e in rng.sample(every, min(picks, len(every)))
                                             for s in (1.0, 1.05, 1.15)]
    median = sorted(e.training_time_s for e in every)[len(every) // 2] * 0.999
    memo, kept = Memo(problem, options), Memo(problem, options)
    for cand, plans in by_cand.values():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None or cand.pp < 2 or len(cand.uses) < 2:
            continue
        asks = []
        for budget in budgets:
            for slower in ((0.0, median) if cand.v == 1 and budget.max_time_s is None else (0.0,)):
                values = [e.cost_usd for p, e in plans
                          if e.training_time_s > slower and not budget_violations(p, e, budget)]
                for cut in cuts:
                    if values or cut == math.inf:
                        asks.append((budget, slower, cut if cut == math.inf else min(values) * cut, values))
        fresh = {}
        for budget, slower, cutoff, values in asks:
            sides = [("on", {"COST_PAIR_SUM": True}), ("off", {"COST_PAIR_SUM": False})]
            if exact:
                sides += [(name, {name: False}) for name in EXACT]
            got = _bound_sides(memo, cand, sibling, budget, slower, cutoff, sides)
            where = (seed, cand.key, budget.model_dump(exclude_none=True), slower, cutoff)
            fresh[(id(budget), slower, cutoff)] = got["on"]
            stats["cost_asks"] += 1
            stats["cost_asks_v2"] += cand.v > 1
            stats["cost_asks_deadline"] += budget.max_time_s is not None
            stats["cost_raised"] += got["on"] > got["off"] * (1 + 1e-9)
            stats["cost_lowered"] += got["on"] < got["off"] * (1 - 1e-9)
            if any(got[name] != got["on"] for name in EXACT if name in got):
                stats["cost_exact_differ"] += 1
                raise AssertionError(("not bit for bit", where, got))
            if values:
                stats["cost_compared"] += 1
                stats["cost_compared_raised"] += got["on"] > got["off"] * (1 + 1e-9)
                if got["on"] > min(values) * (1 + 1e-9):
                    stats["cost_above"] += 1
                    raise AssertionError(("above a plan", where, got, min(values)))
        if shared:
            kept_sibling = kept.skeleton(replace(cand, v=1))
            order = list(asks)
            rng.shuffle(order)
            for budget, slower, cutoff, _ in order:
                value = _bound(kept, cand, kept_sibling, budget, slower, cutoff)
                stats["cost_cache_asks"] += 1
                if value != fresh[(id(budget), slower, cutoff)]:
                    stats["cost_cache_differ"] += 1
                    raise AssertionError(("kept tables differ", seed, cand.key, budget, slower, cutoff, value,
                                          fresh[(id(budget), slower, cutoff)]))
    return stats


# ---- time530: the ends-class floor's live sums and marks 3 -> 8 (a bound change for time rows) --------------------

LIVE_SIDES = (("on", {}), ("live_off", {"ENDS_CLASS_LIVE_SUMS": False}), ("marks3", {"ENDS_CLASS_MARKS": 3}),
              ("round23", {"ENDS_CLASS_LIVE_SUMS": False, "ENDS_CLASS_MARKS": 3}))


def live_walk(problem, options, seed, stats, cuts=(math.inf, 1.0, 1.0001, 1.02, 1.5), slower: bool = True,
              sides=LIVE_SIDES):
    """Every candidate's positional bound minimizing time (v > 1 through its sibling / f_v) with no budget, a deadline
    and a cost cap at a drawn plan's values and 5 % above them, slower_than_s 0 and (v = 1) the median plan time,
    cutoffs at `cuts` x the candidate's best plan under each: as merged (ENDS_CLASS_LIVE_SUMS, ENDS_CLASS_MARKS 8) at
    or below that plan where it lies below the cutoff (live_above: a defect); raised against the live sums off and
    against round 23's (marks 3, no live sums) counted."""
    memo = Memo(problem, options)
    for cand, sibling, budget, floor, values, cutoff in time_asks(by_candidate(problem, options), memo,
                                                                   random.Random(24_200 + seed), cuts, slower):
        got = _bound_sides(memo, cand, sibling, budget, floor, cutoff, sides)
        stats["live_asks"] += 1
        stats["live_asks_v2"] += cand.v > 1
        if "live_off" in got:
            stats["live_raised_vs_live_off"] += got["on"] > got["live_off"] * (1 + 1e-9)
        if "round23" in got:
            stats["live_raised_vs_round23"] += got["on"] > got["round23"] * (1 + 1e-9)
            stats["live_lowered_vs_round23"] += got["on"] < got["round23"] * (1 - 1e-9)
        if values and min(values) < cutoff:
            stats["live_compared"] += 1
            if got["on"] > min(values) * (1 + 1e-9):
                stats["live_above"] += 1
                raise AssertionError(("above a plan", seed, cand.key, budget.model_dump(exclude_none=True),
                                      floor, cutoff, got, min(values)))
    return stats


FLIPS = ((solver_module, "DEPTH_PLANS"), (solver_module, "DEADLINE_FILL_SPLIT"), (positional, "COST_PAIR_SUM"),
         (positional, "ENDS_CLASS_LIVE_SUMS"))  # loopB, loopB, sum1t, time530


def solve_ab(problem, options, seed, stats, budgets, backends=("cbc", "cpsat"), alone: bool = False,
             flips=FLIPS, rule=None):
    """Both backends, no limit, the switches all on and all off (and each off alone where `alone`): brute force's
    answer each time, every plan re-priced (assert_equals_truth). rule: _depth_plans replaced (a mutant). Counts
    _depth_plans' calls and the plans it returns."""
    real = rule or solver_module._depth_plans

    def spy(memo, budget, bounded, cand):
        out = real(memo, budget, bounded, cand)
        stats["depth_calls"] += 1
        stats["depth_calls_returned"] += out is not None
        return out
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        sides = [{f: True for f in flips}, {f: False for f in flips}]
        if alone:
            sides += [{f: f != g for f in flips} for g in flips]
        for name in backends:
            for side in sides:
                with pytest.MonkeyPatch.context() as mp:
                    for (module, flag), on in side.items():
                        mp.setattr(module, flag, on)
                    mp.setattr(solver_module, "_depth_plans", spy)
                    got = solver_module.solve(problem, budget, solver=name, options=options)
                stats["solves"] += 1
                off = [flag for (_, flag), value in side.items() if not value]
                assert_equals_truth(problem, options, budget, got, truth,
                                    (seed, name, off, budget.model_dump(exclude_none=True), truth.status,
                                     truth.objective_value, got.status, got.objective_value))
    return stats


def drawn_budgets(problem, options, seed, picks: int = 1, scales=(1.0, 1.01, 1.05), others: bool = True):
    """Cost under deadlines at `scales` x `picks` drawn plans' times; with `others`, cost, time and time under a cap
    at the first scale x the first plan's cost too."""
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    drawn = rng.sample(priced, min(picks, len(priced)))
    out = [Budget(objective="cost", max_time_s=e.training_time_s * s) for _, _, e in drawn for s in scales]
    if others and drawn:
        out += [Budget(objective="cost"), Budget(objective="time"),
                Budget(objective="time", max_cost_usd=drawn[0][2].cost_usd * scales[0])]
    return out


def _supply(seeds):
    for seed in seeds:
        made = supply_draw(seed)
        if made is not None:
            yield seed, made


# ---- the tests -------------------------------------------------------------------------------------------------------

def test_the_depth_plans_meet_the_deadline_on_supply_draws():
    """Supply draws 0 (roomy, up to 6 stages) and 5 (memory-tight), deadlines at 1.00-1.05 x three candidates' quick
    plans' times: every plan _depth_plans returns is a plan of the space at another depth within 2 of the same
    degrees, priced, within D; the unchecked mutant breaks D on some of the same asks."""
    stats = Counter()
    for seed, made in _supply((0, 5)):
        depth_walk(*made, seed, stats)
    assert stats["depth_returned"] > 50 and stats["depth_mut_breaks"] > 10, stats


def test_the_unchecked_depth_plans_mutant_is_caught_by_the_walk():
    """The walk with the mutant as the rule: a plan above D (supply draw 0)."""
    with pytest.raises(AssertionError, match="breaks D"):
        depth_walk(*supply_draw(0), 0, Counter(), rule=depth_plans_unchecked)


def test_the_depth_plans_on_random_instances():
    """OPTSEARCH_DRAWS of the small random instances (1-3 stages, memory-tight, experts, cp, v 2 on some)."""
    stats = Counter()
    for seed in (53, 61, 62, 7, 11, 19, 23, 31, 37, 41, 43, 47)[: 2 * draws(1)]:
        depth_walk(*random_instance(seed), seed, stats)
    assert stats["depth_asks"] > 0, stats


def test_the_deadline_fill_split_meets_the_deadline():
    """Supply draws 0 and 5: the fill from candidates' quick plans with the split on and off, each plan in the space,
    priced, within D, on at or below off."""
    stats = Counter()
    for seed, made in _supply((0, 5)):
        fill_walk(*made, seed, stats)
    assert stats["fill_returned"] > 10, stats


def test_the_cost_lift_under_deadlines_lies_below_every_plan():
    """sum1t's COST_PAIR_SUM minimizing cost with no budget and under deadlines at 1.00-1.15 x drawn plans' times
    (its own tests ask plain cost), cutoffs none and 1.0-1.5 x the candidate's best plan, slower_than_s the median:
    boundary_instance 7 (roomy, NICs 10-3,200 Gbit/s) with the ring and the variant rows at once off (bit for bit) and
    one kept skeleton per candidate asked in a shuffled order (the fresh value), and boundary_instance 101 (tight):
    every bound at or below the candidate's best plan; the lift raises some bounds under deadlines."""
    stats = Counter()
    cost_walk(*boundary_instance(7), 7, stats)
    cost_walk(*boundary_instance(101, tight=True), 101, stats, picks=1, cuts=(math.inf, 1.0, 1.02), exact=False,
              shared=False)
    assert stats["cost_above"] == stats["cost_exact_differ"] == stats["cost_cache_differ"] == 0, stats
    assert stats["cost_compared_raised"] > 20 and stats["cost_asks_deadline"] > 20, stats


def test_the_cost_lift_through_the_interleaved_sibling():
    """Interleaved supply draw 0 (v = 2 candidates bounded through their v = 1 sibling / f_v): at or below every
    candidate's best plan, no budget and under deadlines; raised on some v = 2 asks too."""
    stats = cost_walk(*supply_draw(0, interleaved=True), 0, Counter(), picks=1, cuts=(math.inf, 1.0, 1.02),
                      exact=False, shared=False)
    assert stats["cost_asks_v2"] > 50 and stats["cost_compared_raised"] > 50, stats


def test_an_over_tight_cost_lift_is_caught_by_the_walk(monkeypatch):
    """sum1t's 'narrow' mutant (side (a) over the layouts within M, not X) lies above a plan on boundary_instance 7."""
    real = positional._pair_least_sum
    monkeypatch.setattr(positional, "_pair_least_sum",
                        lambda f, tab, setup, Ms, Xs, weight, shift: real(f, tab, setup, Ms, Ms, weight, shift))
    with pytest.raises(AssertionError, match="above a plan"):
        cost_walk(*boundary_instance(7), 7, Counter(), exact=False, shared=False)


@pytest.mark.parametrize("seed", [7, 109])
def test_both_backends_with_the_round24_switches_on_and_off(seed):
    """boundary_instance 7 (roomy) and 109 (memory-tight): cost, time, time<=B and cost<=D at 1.00 / 1.05 x a drawn
    plan's time, cbc and cpsat, DEPTH_PLANS, DEADLINE_FILL_SPLIT, COST_PAIR_SUM and ENDS_CLASS_LIVE_SUMS all on and
    all off: brute force's answer, every plan re-priced."""
    problem, options = boundary_instance(seed, tight=seed > 100)
    stats = solve_ab(problem, options, seed, Counter(), drawn_budgets(problem, options, seed, scales=(1.0, 1.05)))
    assert stats["solves"] == 20, stats


def test_the_variant_rows_at_once_and_the_ring_are_bit_for_bit_on_every_objective(monkeypatch):
    """SEND_VARIANTS_AT_ONCE feeds the ends-class floor and budget_pair_lift too (time rows): round 23's exact_walk
    with these two switches in place of front1t's, each off alone and both off, on the memory-tight supply draw 39:
    every objective's budgets, no cutoff and the loop's, the same positional bounds and pair-cover floors."""
    import test_audit_round23 as audit23

    monkeypatch.setattr(audit23, "RINGS", EXACT)
    stats = audit23.exact_walk(*supply_draw(39), 39, Counter())
    assert stats["exact_differ"] == 0 and stats["exact_above"] == 0, stats
    assert stats["exact_asks"] > 50 and stats["exact_pair_cover"] > 0, stats


def test_the_live_sums_under_budgets_lie_below_every_plan():
    """time530's ENDS_CLASS_LIVE_SUMS and ENDS_CLASS_MARKS 8 minimizing time under a deadline and a cost cap at a drawn
    plan's values and 5 % above them, slower_than_s 0 and the median, cutoffs at 1.0-1.5 x the candidate's best plan
    (its own tests ask no budget): boundary_instance 8 (roomy; where the live sums raise bounds): at or below every
    candidate's best plan below the cutoff."""
    stats = live_walk(*boundary_instance(8), 8, Counter(), cuts=(1.0001, 1.02), sides=LIVE_SIDES[:2])
    assert stats["live_above"] == 0 and stats["live_compared"] > 100, stats
    assert stats["live_raised_vs_live_off"] > 0, stats


def test_the_smallest_live_marks_sum_is_caught_by_the_walk(monkeypatch):
    """time530's invalid _live_sum (S at the smallest live mark, not the largest) on boundary_instance 15."""
    from test_positional_ends_class import _least_live

    monkeypatch.setattr(positional, "_live_sum", _least_live)
    with pytest.raises(AssertionError, match="above a plan"):
        live_walk(*boundary_instance(15), 15, Counter(), cuts=(1.0001, 1.02), sides=LIVE_SIDES[:1])
