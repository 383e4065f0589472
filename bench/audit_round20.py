"""Post-merge audit of round 20 (audit12): inflightb (inflight.BUDGET_CUTOFF / _budget_cut, BUDGET_WHOLE_CUTOFF;
solver.QUICK_RATE_SKIP: _quick_within, _quick_plans_by_rate, _sibling_floor, _usd_per_hour). See docs/solver.md,
"Round 20 after the merges: the audit (audit12, 2026-11-25)". Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round20.py --kind hypinter --seeds 0-19 --checks cutoff,climb,quick
    nice -n 5 python bench/audit_round20.py --kind tight --seeds 0-9 --checks solve,clock

kinds: bench/audit_round19's. checks:
  cutoff  time under cost caps (plans' exact costs and 5 % above): every candidate brute force prices, its in-flight
          bound (_inflight_bounded, a fresh memo per setting) at cutoffs inf, its own best plan's time, the optimum's
          time and 0.9 x it, with BUDGET_CUTOFF on and off: below the cut the same float, else ruled out both ways
          (None or >= cut x (1 - INCUMBENT_REL)); every value (BUDGET_WHOLE_CUTOFF on too) at or below every plan of
          the candidate that meets the cap, never None where one does;
  climb   _refined_at_least(value, interleaved=True) on v = 1 candidates with BUDGET_CUTOFF on and off (values at
          plans' times): True only where no plan of the candidate or of its v siblings beats value; counts the
          decisions that differ between on and off (the docs claim none);
  quick   every v > 1 candidate the loop's in-flight branch would open under the cap: its own floor (the in-flight
          bound) and _sibling_floor at or below every plan meeting the cap of the candidate's v siblings (v = 1
          included); _quick_within's list = the whole list less plans that, priced, break the cap; and
          _quick_plans_by_rate(never) == heuristic.quick_plans;
  solve, clock  bench/audit_round19's (both backends against brute force at plans' exact budgets and 5 % above;
          clocks that jump past the limit; every offered plan honest).
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import math
import random
import sys
import time as real_time
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import audit_round13  # noqa: E402
import audit_round14  # noqa: E402
import audit_round15  # noqa: E402
import audit_round18  # noqa: E402
import audit_round19  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import inflight as inflight_module  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.formulation.heuristic import quick_plans  # noqa: E402
from optsearch.search import budget_violations  # noqa: E402
from optsearch.solver import REFINED, Bounded, Memo, _bounded, _inflight_bounded  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9
V_AT = 6  # Candidate.key: (tp, dp, b, pp, ep, cp, v, o)


def _caps(priced, rng) -> list[Budget]:
    return [b for b in audit_round19.round19_budgets(priced, rng) if b.max_cost_usd is not None
            and b.objective == "time" and b.max_time_s is None]


def _times(plans, budget):
    return [e.training_time_s for p, e in plans if not budget_violations(p, e, budget)]


def _siblings(by_cand, key):
    """The plans of the candidates that differ from key only in v."""
    out = []
    for other, (cand, plans) in by_cand.items():
        if other[:V_AT] + other[V_AT + 1:] == key[:V_AT] + key[V_AT + 1:]:
            out += plans
    return out


def _values(problem, options, by_cand, budget, cutoffs, **flags):
    out = {}
    with mock.patch.multiple(inflight_module, **flags):
        memo = Memo(problem, options)
        for key, (cand, plans) in by_cand.items():
            item = Bounded(cand, 0.0, audit_round14._terms(memo, cand), REFINED)
            for c in cutoffs[key]:
                out[(key, c)] = _inflight_bounded(memo, budget, item, 0.0, c)
    return out


def check_cutoff(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in _caps(priced, rng):
        every = [t for _, plans in by_cand.values() for t in _times(plans, budget)]
        best = min(every) if every else None
        cutoffs = {}
        for key, (cand, plans) in by_cand.items():
            own = _times(plans, budget)
            cutoffs[key] = sorted({math.inf, *([min(own)] if own else []), *([best, 0.9 * best] if best else [])})
        on = _values(problem, options, by_cand, budget, cutoffs, BUDGET_CUTOFF=True)
        off = _values(problem, options, by_cand, budget, cutoffs, BUDGET_CUTOFF=False)
        whole = _values(problem, options, by_cand, budget, cutoffs, BUDGET_CUTOFF=True, BUDGET_WHOLE_CUTOFF=True)
        for (key, c), want in off.items():
            have, loose = on[(key, c)], whole[(key, c)]
            where = (key, c, budget.model_dump(exclude_none=True), have, want, loose)
            test = c * (1 - solver_module.INCUMBENT_REL)
            stats["cutoff_compared"] += 1
            if want is not None and want < test:
                assert have == want, ("not the same float below the cut",) + where
                stats["cutoff_below_same"] += 1
                # BUDGET_WHOLE_CUTOFF (off in the solver) may move values below the cut (its docs): counted
                stats["cutoff_whole_moves_below"] += loose != want
            else:
                assert have is None or have >= test, ("not ruled out with the cutoff",) + where
                assert loose is None or loose >= test, ("not ruled out with the whole cutoff",) + where
                stats["cutoff_ruled_out"] += 1
                stats["cutoff_none_became_value"] += want is None and have is not None
            own = _times(by_cand[key][1], budget)
            if own:
                stats["cutoff_below_plans"] += 1
                for v in (have, want, loose):
                    assert v is not None and v <= min(own) * (1 + REL), ("above a plan or rules one out",) + where


def check_climb(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in _caps(priced, rng):
        every = sorted({t for _, plans in by_cand.values() for t in _times(plans, budget)})
        if not every:
            continue
        values = sorted({every[0], every[len(every) // 2], 1.2 * every[0]})
        got = {}
        for on in (False, True):
            with mock.patch.object(inflight_module, "BUDGET_CUTOFF", on):
                memo = Memo(problem, options)
                listed, _ = solver_module._candidates(memo, budget, 0.0, solver_module.ALL)
                for item in listed:
                    if item.cand.v != 1:
                        continue
                    for value in values:
                        got[(on, item.cand.key, value)] = solver_module._refined_at_least(memo, budget, item, value,
                                                                                         True)
        for (on, key, value), at_least in got.items():
            if not on:
                continue
            stats["climb_compared"] += 1
            old = got[(False, key, value)]
            stats["climb_differ"] += at_least != old
            stats["climb_differ_on_says_open"] += old and not at_least
            if at_least:
                below = [t for t in _times(_siblings(by_cand, key), budget) if t < value * (1 - REL)]
                assert not below, ("_refined_at_least rules out a plan below value", key, value, min(below))


def check_quick(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in _caps(priced, rng):
        memo = Memo(problem, options)
        listed, _ = solver_module._candidates(memo, budget, 0.0, solver_module.ALL)
        for item in listed:
            sk = memo.skeleton(item.cand)
            if sk.most is not None:
                whole = quick_plans(sk)
                assert solver_module._quick_plans_by_rate(problem, sk, lambda rate: False) == whole, item.cand.key
                stats["quick_lists_equal"] += 1
            if item.cand.v == 1:
                continue
            refined = _bounded(problem, budget, item.terms, item.cand, True,
                               memo.refined_bound(item.terms, item.cand, budget))
            if refined is None:
                continue
            sharper = _inflight_bounded(memo, budget, refined)
            if sharper is None:
                continue
            floor = solver_module._sibling_floor(memo, budget, item, sharper)
            own = _times(by_cand.get(item.cand.key, (None, []))[1], budget)
            sib = _times(_siblings(by_cand, item.cand.key), budget)
            stats["quick_floors"] += 1
            assert not own or sharper <= min(own) * (1 + REL), ("own floor above a plan", item.cand.key, sharper)
            assert not sib or floor <= min(sib) * (1 + REL), ("sibling floor above a plan", item.cand.key, floor,
                                                               min(sib))
            for sk2, f in ((sk, sharper), (memo.skeleton(replace(item.cand, v=1)), floor)):
                if sk2.most is None:
                    continue
                got = solver_module._quick_within(Memo(problem, options), budget, sk2, f)
                full = Memo(problem, options).quick_plans(sk2)
                kept = [p for p, _ in got]
                assert kept == [p for p, _ in full if p in kept], ("not the whole list less some", item.cand.key)
                for plan, est in full:
                    if plan not in kept:
                        stats["quick_left_out"] += 1
                        assert budget_violations(plan, est, budget), ("left out a plan that meets B", str(plan))
                    stats["quick_plans"] += 1


def _deadlines(priced, rng) -> list[Budget]:
    """Cost minimized: no limit, and deadlines at plans' exact times and 5 % above (audit_round19's budgets)."""
    return [b for b in audit_round19.round19_budgets(priced, rng) if b.objective == "cost"
            and b.max_usd_per_hour is None]


def check_middle(problem, options, seed, stats):
    """costmid's middle floor as the loop takes it (solver._middle_bound on every listed candidate of pp > 1, every
    optimizer setting and gather copy, v = 1 and v > 1): at or below the cost of every plan of the candidate that
    meets the budget (inf only where none does); the same value whether its degree's floors were computed alone (an
    empty heap) or in a batch of every listed degree (Memo.middle keeps batch values); and a patched module limit
    (MIDDLE_MARKS) between two asks on one memo gives the value computed fresh under it (the key holds it)."""
    if not hasattr(solver_module, "_middle_bound"):
        stats["middle_absent"] += 1
        return
    import heapq
    from optsearch import middle
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in _deadlines(priced, rng):
        memo = Memo(problem, options)
        listed, _ = solver_module._candidates(memo, budget, 0.0, solver_module.ALL)
        heap = [(item.lower_bound, item.cand.key, i, item) for i, item in enumerate(listed)]
        heapq.heapify(heap)
        batch_memo = Memo(problem, options)
        for item in listed:
            alone = solver_module._middle_bound(Memo(problem, options), budget, item, [], 0.0, math.inf)
            if alone is None:
                continue
            batched = solver_module._middle_bound(batch_memo, budget, item, heap, 0.0, math.inf)
            assert batched == alone, ("a batch changes the floor", item.cand.key, alone, batched)
            stats["middle_compared"] += 1
            plans = by_cand.get(item.cand.key, (None, []))[1]
            costs = [e.cost_usd for p, e in plans if not budget_violations(p, e, budget)]
            if costs:
                stats["middle_below_plans"] += 1
                stats["middle_tight_1pct"] += alone >= 0.99 * min(costs)
                assert alone <= min(costs) * (1 + REL), ("the middle floor above a plan", item.cand.key, alone,
                                                         min(costs), budget.model_dump(exclude_none=True))
            stats["middle_inf"] += alone == math.inf
        # the module limit in the key: a coarse grid asked after the fine one on the same memo
        if listed:
            item = next((i for i in listed if i.cand.pp > 1), None)
            if item is not None:
                memo2 = Memo(problem, options)
                fine = solver_module._middle_bound(memo2, budget, item, [], 0.0, math.inf)
                with mock.patch.object(middle, "MIDDLE_MARKS", 2):
                    coarse = solver_module._middle_bound(memo2, budget, item, [], 0.0, math.inf)
                    fresh = solver_module._middle_bound(Memo(problem, options), budget, item, [], 0.0, math.inf)
                assert coarse == fresh, ("Memo.middle's key misses MIDDLE_MARKS", item.cand.key, fine, coarse, fresh)
                stats["middle_key_checked"] += 1
                stats["middle_key_coarse_differs"] += coarse != fine


def check_pair20(problem, options, seed, stats):
    """deep1t: pair_cover_both_floor_s (PAIR_COVER_BOTH, off in the solver) at or below every v = 1 plan's slowest
    stage; the positional bound with PAIR_COVER_BOTH on at least the bound with it off and at or below every plan
    that meets the budget (v > 1 through interleaved_positional_bound); PAIR_COVER_LAZY on equals off bit for bit
    over one random order of asks (budgets x slower_than_s) on one skeleton."""
    from optsearch.formulation import positional
    from optsearch.bounds import interleaving_factor
    if not hasattr(positional, "PAIR_COVER_BOTH"):
        stats["pair20_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand, budgets, median, memo = audit_round18._walk_setup(problem, options, seed, audit_round19.round19_budgets,
                                                               None, rng)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        if cand.v == 1:
            for wider in (True, False):
                audit_round19._fresh(sibling, PAIR_COVER_LAZY=False)
                with mock.patch.multiple(positional, PAIR_COVER_ONLY_WIDER=wider):
                    floor = positional.pair_cover_both_floor_s(sibling, sibling.positional.blocks)
                    single = positional.pair_cover_floor_s(sibling, sibling.positional.blocks)
                stats["pair20_floors"] += 1
                stats["pair20_both_above_single"] += floor > single * (1 + REL) and math.isfinite(floor)
                for plan, est in plans:
                    slowest = max(st.time_s for st in est.stages)
                    stats["pair20_below_plans"] += 1
                    assert floor <= slowest * (1 + REL), ("M_pair both above a plan's slowest stage", key, wider,
                                                          floor, slowest, str(plan))
        factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
        asks = [(i, slower) for i in range(len(budgets)) for slower in ((0.0, median) if cand.v == 1 else (0.0,))]
        rng.shuffle(asks)
        got = {}
        for label, flags in (("both", dict(PAIR_COVER_BOTH=True, PAIR_COVER_LAZY=False)),
                             ("eager", dict(PAIR_COVER_BOTH=False, PAIR_COVER_LAZY=False)),
                             ("lazy", dict(PAIR_COVER_BOTH=False, PAIR_COVER_LAZY=True)),
                             ("lazyboth", dict(PAIR_COVER_BOTH=True, PAIR_COVER_LAZY=True))):
            audit_round19._fresh(sibling, **flags)
            with mock.patch.multiple(positional, **flags):
                for i, slower in asks:
                    if cand.v == 1:
                        got[(label, i, slower)] = positional.positional_bound(sibling, budgets[i],
                                                                              slower_than_s=slower).bound
                    else:
                        got[(label, i, slower)] = solver_module.interleaved_positional_bound(sibling, budgets[i],
                                                                                             factor)
        sibling.positional = None
        for i, slower in asks:
            budget = budgets[i]
            eager, lazy = got[("eager", i, slower)], got[("lazy", i, slower)]
            both, lazyboth = got[("both", i, slower)], got[("lazyboth", i, slower)]
            where = (key, budget.model_dump(exclude_none=True), slower, eager, lazy, both, lazyboth)
            stats["pair20_bounds"] += 1
            assert lazy == eager, ("PAIR_COVER_LAZY changes the bound",) + where
            assert lazyboth == both, ("PAIR_COVER_LAZY changes the bound under PAIR_COVER_BOTH",) + where
            assert both >= eager * (1 - 1e-12), ("PAIR_COVER_BOTH lowers the bound",) + where
            stats["pair20_both_raised"] += both > eager * (1 + REL)
            values = audit_round19._meeting(plans, budget, slower)
            if values:
                stats["pair20_bound_below_plans"] += 1
                assert both <= min(values) * (1 + REL), ("above a plan",) + where


def check_suffix(problem, options, seed, stats):
    """timesmall: the in-flight bound (time, no cost cap: no limit, deadlines at plans' exact times and 5 % above;
    cutoffs inf and at the candidate's best plan's time) with WHOLE_SUFFIX on: at least off's, at or below every
    plan of the candidate that meets the budget, None only where none does."""
    if not hasattr(inflight_module, "WHOLE_SUFFIX"):
        stats["suffix_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = [b for b in audit_round19.round19_budgets(priced, rng) if b.objective == "time"
               and b.max_cost_usd is None]
    for budget in budgets:
        cutoffs = {}
        for key, (cand, plans) in by_cand.items():
            own = _times(plans, budget)
            cutoffs[key] = (math.inf,) + ((min(own),) if own else ())
        on = _values(problem, options, by_cand, budget, cutoffs, WHOLE_SUFFIX=True)
        off = _values(problem, options, by_cand, budget, cutoffs, WHOLE_SUFFIX=False)
        for (key, c), have in on.items():
            want = off[(key, c)]
            where = (key, c, budget.model_dump(exclude_none=True), have, want)
            stats["suffix_compared"] += 1
            if want is None:
                assert have is None, ("the suffix un-rules a candidate",) + where
            elif have is not None:
                stats["suffix_raised"] += have > want * (1 + REL)
                stats["suffix_lowered"] += have < want * (1 - REL)
            stats["suffix_ruled_out_more"] += have is None and want is not None
            own = _times(by_cand[key][1], budget)
            if own:
                stats["suffix_below_plans"] += 1
                assert have is not None and have <= min(own) * (1 + REL), ("above a plan",) + where


def check_solve_as_refined(problem, options, seed, stats):
    """audit_round19's solve check with every pp > 1 degree taken as unlisted (solver.composition_count patched to a
    huge count), so that each middle floor taken sends its entry to the REFINED level without a refined bound
    (MIDDLE_AS_REFINED): a path the small instances never take at MAX_COMPOSITIONS = 300."""
    real = solver_module._middle_bound

    def counted(*args):
        got = real(*args)
        stats["as_refined_middle_taken"] += got is not None and got != math.inf
        return got

    with mock.patch.object(solver_module, "composition_count", lambda terms, pp: 10**9 if pp > 1 else 1), \
            mock.patch.object(solver_module, "_middle_bound", counted):
        audit_round19.CHECKS["solve"](problem, options, seed, stats)


CHECKS = {"solve-asref": check_solve_as_refined, "pair20": check_pair20, "suffix": check_suffix, "middle": check_middle, "cutoff": check_cutoff, "climb": check_climb, "quick": check_quick,
          "solve": audit_round19.CHECKS["solve"], "clock": audit_round19.CHECKS["clock"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="hypinter",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "boundary-deep"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="cutoff,climb,quick")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "boundary-deep":
        instance = audit_round19.boundary_deep
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
