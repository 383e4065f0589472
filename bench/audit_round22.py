"""Post-merge audit of round 22 (audit14): plateau22 (positional.budget_pair_lift, BUDGET_PAIR_RENT: a bound change
for time under a cost budget) and deep1t22 (positional._pair_supply, PAIR_COVER_WITHIN_PP: the pair-cover floors'
index within pp), and the branches merged after them. See docs/solver.md, "Round 22 after the merges: the audit
(audit14, 2026-11-25)". Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round22.py --kind coupled --seeds 0-29 --checks rent,rent-cut
    nice -n 5 python bench/audit_round22.py --kind boundary-tight --seeds 0-19 --checks within,solve-ab

kinds: bench/audit_round21's, and coupled (a fast, dear type on a fast network beside one or two cheap ones on slow
networks, test_budget_time_lift._coupled drawn: roomy on even seeds, memory-tight (long sequences, 16-40 GiB GPUs,
the overlap, cp 1-2) on odd ones). checks:
  rent      every candidate's positional bound (v = 1; v > 1 through its sibling / f_v) minimizing time under cost
            caps at 1.00, 1.01, 1.05, 1.10 and 1.15 x plans' own costs (its own plans' and the instance's), with
            slower_than_s 0 and the median plan time, BUDGET_PAIR_RENT on and off, on fresh tables: the bound with the
            lift at least the bound without it, and at or below the candidate's least time among its plans that meet
            the cap (brute force); raised bounds counted;
  rent-cut  the same asks with the loop's cutoff (1.001 x that least time), one table per candidate asked in a
            shuffled order (kept marks shared between asks): at or below the plan;
  rent-mut  the check `rent` against a lift that takes the slowest-stage side from the bound's own lifted iteration
            (lifted + (m - 1)(X - M), the hidden-reduce level kept): over-tight in principle; counts the bounds it puts
            above a plan (does the check bite?);
  within    the pair-cover floors (pair_cover_floor_s, pair_cover_both_floor_s) with PAIR_COVER_WITHIN_PP on and off
            at PAIR_COVER_STATES 4096 and at small limits (1-64; where only the index within pp counts every type),
            and at work limits of 200-5,000 (where only the states within pp fit: floors newly run, counted):
            bit for bit equal where both count the same types; each finite floor at or below every plan's slowest
            stage of its candidate; the index cache warm or cleared gives the same floors; and the positional bound
            (every objective, audit_round19's budgets) on and off at or below the candidate's plans;
  solve-ab  both backends, no limit, audit_round19's budgets and time under caps at 1.00-1.15 x plans' costs, with
            BUDGET_PAIR_RENT and PAIR_COVER_WITHIN_PP both on and both off: brute force's answer each time, every plan
            re-priced;
  solve, clock, switches  bench/audit_round21's.
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import json
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
import audit_round21  # noqa: E402
from test_audit_dist_bounds import MAX_PLANS, small, space_plans  # noqa: E402
from test_audit_round11 import KINDS, assert_equals_truth  # noqa: E402
from test_audit_round21 import deep_kind  # noqa: E402

from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.formulation import positional  # noqa: E402
from optsearch.solver import Memo, solve  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9
SCALES = (1.0, 1.01, 1.05, 1.10, 1.15)


def coupled_kind(seed: int):
    """tests/test_audit_round22.coupled_draw."""
    from test_audit_round22 import coupled_draw
    return coupled_draw(seed)


def rent_budgets(by_cand, rng, own: int = 3, shared: int = 4):
    """{candidate key: [Budget]}: time under caps at SCALES x the costs of `own` of its plans and `shared` plans of
    the instance (drawn)."""
    every = [e.cost_usd for _, plans in by_cand.values() for _, e in plans]
    common = rng.sample(every, min(shared, len(every)))
    out = {}
    for key, (cand, plans) in by_cand.items():
        costs = [e.cost_usd for _, e in rng.sample(plans, min(own, len(plans)))] + common
        out[key] = [Budget(objective="time", max_cost_usd=c * s) for c in costs for s in SCALES]
    return out


def _bound(memo, cand, sibling, budget, slower, cutoff=math.inf):
    from optsearch.bounds import interleaving_factor
    from optsearch.solver import interleaved_positional_bound
    if cand.v == 1:
        return positional.positional_bound(sibling, budget, cutoff=cutoff, slower_than_s=slower).bound
    factor = interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
    return interleaved_positional_bound(sibling, budget, factor, cutoff=cutoff)


def _rent_walk(problem, options, seed, stats, tag, flags_on, cut=False):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    budgets = rent_budgets(by_cand, rng)
    times = sorted(e.training_time_s for _, plans in by_cand.values() for _, e in plans)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            stats[f"{tag}_no_tables"] += 1
            continue
        asks = [(b, s) for b in budgets[key] for s in ((0.0, median) if cand.v == 1 and not cut else (0.0,))]
        rng.shuffle(asks)
        if cut:
            audit_round19._fresh(sibling, **flags_on)
            with mock.patch.multiple(positional, **flags_on):
                for budget, slower in asks:
                    values = audit_round19._meeting(plans, budget, slower)
                    if not values:
                        continue
                    best = min(values)
                    got = _bound(memo, cand, sibling, budget, slower, cutoff=best * 1.001)
                    stats[f"{tag}_asks"] += 1
                    stats[f"{tag}_tight"] += got >= best * (1 - 1e-6)
                    assert got <= best * (1 + REL), ("above a plan under a cutoff", key,
                                                     budget.model_dump(exclude_none=True), got, best)
            sibling.positional = None
            continue
        got = {}
        for name, flags in (("off", dict(BUDGET_PAIR_RENT=False)), ("on", flags_on)):
            audit_round19._fresh(sibling, **flags)
            with mock.patch.multiple(positional, **flags):
                got[name] = [_bound(memo, cand, sibling, b, s) for b, s in asks]
            sibling.positional = None
        for (budget, slower), off, on in zip(asks, got["off"], got["on"]):
            stats[f"{tag}_asks"] += 1
            raised = on > off * (1 + REL)
            stats[f"{tag}_raised"] += raised
            stats[f"{tag}_raised_to_inf"] += raised and math.isinf(on)
            assert on >= off * (1 - 1e-12), ("lowered", key, budget.max_cost_usd, slower, off, on)
            values = audit_round19._meeting(plans, budget, slower)
            if not values:
                stats[f"{tag}_no_plan"] += 1
                continue
            stats[f"{tag}_compared"] += 1
            best = min(values)
            stats[f"{tag}_raised_compared"] += raised
            stats[f"{tag}_tight"] += on >= best * (1 - 1e-6)
            if on > best * (1 + REL):
                stats[f"{tag}_above"] += 1
                where = {"seed": seed, "cand": repr(key), "cap": budget.max_cost_usd, "slower": slower,
                         "off": off, "on": on, "plan": best}
                print(json.dumps({f"{tag}_above_plan": repr(where)}), flush=True)
                if tag == "rent":
                    raise AssertionError(("above a plan", where))


def check_rent(problem, options, seed, stats):
    _rent_walk(problem, options, seed, stats, "rent", dict(BUDGET_PAIR_RENT=True))


def check_rent_cut(problem, options, seed, stats):
    _rent_walk(problem, options, seed, stats, "rent_cut", dict(BUDGET_PAIR_RENT=True), cut=True)


def check_rent_mut(problem, options, seed, stats):
    real = positional.budget_pair_lift

    def mutant(f, tab, ix, lifted, plain_of, b):
        return real(f, tab, ix, lifted, lambda r: lifted[r], b)

    with mock.patch.object(positional, "budget_pair_lift", mutant):
        _rent_walk(problem, options, seed, stats, "mut", dict(BUDGET_PAIR_RENT=True))


LIMITS = (1, 2, 3, 5, 8, 16, 64, 4096)
WORKS = (200, 1000, 5000)  # PAIR_COVER_WORK and _BOTH_WORK this low: floors the states within pp let run


def check_within(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None or cand.pp < 2 or len(cand.uses) < 2:
            continue
        blocks = positional.tables(sk).blocks
        slowest = min(max(s.time_s for s in e.stages) for _, e in plans)
        for limit, work in [(lim, None) for lim in LIMITS] + [(4096, w) for w in WORKS]:
            got = {}
            for within in (False, True):
                more = {} if work is None else dict(PAIR_COVER_WORK=work, PAIR_COVER_BOTH_WORK=work)
                with mock.patch.multiple(positional, PAIR_COVER_WITHIN_PP=within, PAIR_COVER_STATES=limit,
                                         PAIR_COVER_ONLY_WIDER=False, **more):
                    wide = positional._pair_supply(sk, limit)[0]
                    got[within] = (positional._counted(wide),
                                   positional.pair_cover_floor_s(sk, blocks), positional.pair_cover_both_floor_s(sk, blocks))
            stats["within_asks"] += 1
            (c0, a0, b0), (c1, a1, b1) = got[False], got[True]
            if c0 == c1:
                stats["within_same_counted"] += 1
                for off, on in ((a0, a1), (b0, b1)):
                    if math.isfinite(off):
                        assert on == off, ("differ over the same counted types", key, limit, got)
                    stats["within_work_newly"] += not math.isfinite(off) and math.isfinite(on)
            else:
                stats["within_more_counted"] += c1 > c0
                stats["within_fewer_counted"] += c1 < c0
            for floor in (a0, b0, a1, b1):
                if math.isfinite(floor):
                    stats["within_finite_floors"] += 1
                    assert floor <= slowest * (1 + REL), ("a floor above a plan's slowest stage", key, limit, got,
                                                          slowest)
                    stats["within_floor_tight"] += floor >= slowest * (1 - 1e-6)
        # the index's cache: cleared, then asked in a shuffled order of limits, equal to the first answers
        saved = dict(positional._PAIR_SUPPLY)
        try:
            order = list(LIMITS)
            rng.shuffle(order)
            want = {lim: positional._pair_supply(sk, lim) for lim in LIMITS}
            positional._PAIR_SUPPLY.clear()
            for lim in order:
                sup, upto = positional._pair_supply(sk, lim)
                assert sup.size == want[lim][0].size and (sup.src == want[lim][0].src).all() and \
                    (upto == want[lim][1]).all(), ("cache", key, lim)
                stats["within_cache_asks"] += 1
        finally:
            positional._PAIR_SUPPLY.clear()
            positional._PAIR_SUPPLY.update(saved)
    # the positional bound on and off (every objective) at or below the candidates' plans
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = audit_round19.round19_budgets(priced, rng)
    for key, (cand, plans) in by_cand.items():
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        for within in (False, True):
            for states in (4096, 8):
                flags = dict(PAIR_COVER_WITHIN_PP=within, PAIR_COVER_STATES=states)
                audit_round19._fresh(sk, **flags)
                with mock.patch.multiple(positional, **flags):
                    for budget in budgets:
                        values = audit_round19._meeting(plans, budget)
                        if not values:
                            continue
                        got = positional.positional_bound(sk, budget).bound
                        stats["within_bounds"] += 1
                        assert got <= min(values) * (1 + REL), ("positional above a plan", key, flags,
                                                                budget.model_dump(exclude_none=True), got, min(values))
                sk.positional = None


def check_solve_ab(problem, options, seed, stats):
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    if not priced:
        return
    budgets = audit_round19.round19_budgets(priced, rng)
    pick = rng.sample(priced, min(2, len(priced)))
    budgets += [Budget(objective="time", max_cost_usd=e.cost_usd * s) for _, _, e in pick for s in (1.0, 1.02, 1.1)]
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for name in ("cbc", "cpsat"):
            answers = []
            for on in (False, True):
                with mock.patch.multiple(positional, BUDGET_PAIR_RENT=on, PAIR_COVER_WITHIN_PP=on):
                    got = solve(problem, budget, solver=name, options=options)
                stats["ab_solves"] += 1
                answers.append(got)
                assert_equals_truth(problem, options, budget, got, truth,
                                    (name, on, budget.model_dump(exclude_none=True), truth.status,
                                     truth.objective_value, got.status, got.objective_value, got.message))
            off, on = answers
            assert off.status == on.status, (name, off.status, on.status)


CHECKS = {"rent": check_rent, "rent-cut": check_rent_cut, "rent-mut": check_rent_mut, "within": check_within,
          "solve-ab": check_solve_ab, "solve": audit_round21.CHECKS["solve"], "clock": audit_round21.CHECKS["clock"],
          "switches": audit_round21.CHECKS["switches"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="coupled",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "t5", "deep", "coupled"])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="rent")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "coupled":
        instance = coupled_kind
    elif args.kind == "t5":
        instance = audit_round21.t5_kind
    elif args.kind == "deep":
        instance = deep_kind
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
