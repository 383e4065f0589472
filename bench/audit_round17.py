"""Post-merge audit of round 17 (audit9): trim3 (tests/priced.py, brute force's priced plans kept per instance),
compbatch (bounds.LIVE_GROUPS in _pipelines_at_once), and the later merges of the round (see docs/solver.md,
"Round 17 after the merges: the audit"). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round17.py --kind tight --seeds 0-39 --checks live,priced
    nice -n 5 python bench/audit_round17.py --kind hyptight --seeds 0-19 --checks solve,clock

kinds: bench/audit_round16's (tests/test_audit_round11.KINDS: random, offheavy, tight, each also -pipelined;
hypinter, hypinter-off, hyptight (memory-tight, T5-like), moe, moe1). checks:
  live    every candidate of the space that brute force prices, under edge budgets (bench/audit_round14.edge_budgets:
          none; cost caps and deadlines at plans' exact values; both), with slower_than_s 0 and at the median plan's
          time: Memo.refined_bound with bounds.LIVE_GROUPS on (a fresh memo, every bounds cache emptied) equals the
          bound with it off, bit for bit, with the composition path (MAX_COMPOSITIONS as set) and with the aggregate
          tables only (MAX_COMPOSITIONS = 0); its _bounded value lies at or below every plan of the candidate that
          meets the budget (None only where none does); composition_bounds and refined_tables of every degree and
          pp 1..12 the same bytes on and off;
  priced  tests/priced.solve_exhaustive equals exhaustive.solve_exhaustive (status, value, plan) on every budget of
          bench/audit_round13.budgets_of, called twice (the memo then answers every plan), and on an equal copy of
          the problem; priced.least_recompute equals _least_recompute on every plan of the space; and the memo's
          hazard: a cost-model constant patched between two calls on an equal problem (counted as stale_prices
          where the memo's answer is not the patched model's: see tests/test_audit_round17.py);
  solve, clock  bench/audit_round14's (both backends against brute force, budgets at plans' exact values and 5 %
          above; clocks that jump past the limit or by a share, slowed clocks: every answer honest).
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import audit_round13  # noqa: E402
import audit_round14  # noqa: E402
import audit_round15  # noqa: E402
import priced  # noqa: E402
from test_audit_dist_bounds import MAX_PLANS, space_plans  # noqa: E402

from optsearch import bounds as bounds_module  # noqa: E402
from optsearch import costmodel  # noqa: E402
from optsearch.baselines import exhaustive  # noqa: E402
from optsearch.bounds import composition_bounds, refined_tables  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import Memo, _bounded  # noqa: E402

REL = 1e-9
CACHES = ("_FLOORS", "_COUNTS", "_LISTED", "_RATES", "_DEGREE_ROWS")


def _clear_caches() -> None:
    for name in CACHES:
        getattr(bounds_module, name).clear()


def _bytes_of_tables(tab) -> tuple:
    return (tab.ok.tobytes(), tab.iteration_s.tobytes(), tab.rate_usd_per_hour.tobytes(), tab.cost_rate_s.tobytes(),
            repr([[x.hex() for x in row] for row in tab.joint_iteration_s]),
            repr([[x.hex() for x in row] for row in tab.joint_rate]), tab.joint_floor_rate.tobytes())


def _hexes(got):
    return None if got is None else tuple(tuple(x.hex() for x in row) for row in got)


def check_live(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced_plans = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = audit_round14.edge_budgets(priced_plans, rng)
    cases = [(b, 0.0) for b in budgets]
    if priced_plans:
        times = sorted(e.training_time_s for _, _, e in priced_plans)
        cases += [(b, times[len(times) // 2] * 0.999) for b in budgets]
    keys = list(by_cand)
    for most in (bounds_module.MAX_COMPOSITIONS, 0):
        got = {}
        for live in (True, False):
            _clear_caches()
            with mock.patch.multiple(bounds_module, LIVE_GROUPS=live, MAX_COMPOSITIONS=most):
                for budget, slower in cases:
                    memo = Memo(problem, options)
                    for key in keys:
                        cand = by_cand[key][0]
                        terms = audit_round14._terms(memo, cand)
                        got[(live, key, budget, slower)] = memo.refined_bound(terms, cand, budget, slower)
        _clear_caches()
        for budget, slower in cases:
            memo = Memo(problem, options)
            for key in keys:
                cand, plans = by_cand[key]
                have, want = got[(True, key, budget, slower)], got[(False, key, budget, slower)]
                where = (most, key, budget.model_dump(exclude_none=True), slower, str(have), str(want))
                stats["live_compared"] += 1
                assert have == want, ("LIVE_GROUPS changes the bound",) + where
                best = audit_round14._least_meeting([(p, e) for p, e in plans if e.training_time_s > slower], budget)
                if best is None:
                    continue
                item = _bounded(problem, budget, audit_round14._terms(memo, cand), cand, True, have, slower)
                stats["live_below_plans"] += 1
                assert item is not None, ("rules out a candidate with a plan that meets the budget", best) + where
                assert item.lower_bound <= best * (1 + REL), ("above a plan", item.lower_bound, best) + where
    # the bounds module's functions on every degree of the candidates, pp 1..12
    memo = Memo(problem, options)
    degrees = {}
    for cand, _ in by_cand.values():
        d = audit_round14._terms(memo, cand)
        if d is not None:
            degrees.setdefault(id(d), d)
    for d in degrees.values():
        out = []
        for live in (False, True):
            _clear_caches()
            with mock.patch.object(bounds_module, "LIVE_GROUPS", live):
                out.append(({pp: _hexes(composition_bounds(problem, d, pp)) for pp in range(1, 13)},
                            _bytes_of_tables(refined_tables(problem, d, 12, every_pp=True))))
        stats["live_degrees"] += 1
        assert out[0] == out[1], ("LIVE_GROUPS changes composition_bounds or refined_tables", d.slots)
    _clear_caches()


def _same_answer(a, b) -> bool:
    return (a.status, a.objective_value, a.plan) == (b.status, b.objective_value, b.plan)


def check_priced(problem, options, seed, stats):
    budgets = audit_round13.budgets_of(problem, options, seed)
    for budget in budgets:
        want = exhaustive.solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for again in range(2):
            got = priced.solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
            stats["priced_compared"] += 1
            assert _same_answer(got, want), ("priced differs", again, budget.model_dump(exclude_none=True))
        copy = replace(problem)  # an equal problem, another object: the memo's equality look-up
        got = priced.solve_exhaustive(copy, budget, options=replace(options), max_plans=10 * MAX_PLANS)
        stats["priced_compared"] += 1
        assert _same_answer(got, want), ("priced differs on an equal copy", budget.model_dump(exclude_none=True))
    for _, plan, _ in space_plans(problem, options):  # priced plans asked again (a block-recomputed one raises)
        answers = []
        for price in (exhaustive._least_recompute, priced.least_recompute, priced.least_recompute):
            try:
                answers.append(price(problem, plan, options))
            except Exception as exc:  # the same error from each
                answers.append(type(exc).__name__)
        stats["priced_plans"] += 1
        assert answers[0] == answers[1] == answers[2], (plan, answers)
    # the hazard: a cost-model constant patched between two calls on an equal problem
    budget = budgets[0]
    with mock.patch.object(costmodel, "ACTIVATION_DTYPE_BYTES", 4):
        fresh = exhaustive.solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        memoed = priced.solve_exhaustive(replace(problem), budget, options=options, max_plans=10 * MAX_PLANS)
    stats["stale_checked"] += 1
    stats["stale_prices"] += not _same_answer(fresh, memoed)


def _plans_meeting(plans, budget, slower):
    return [objective_value(e, budget.objective) for p, e in plans
            if e.training_time_s > slower and not budget_violations(p, e, budget)]


def _fresh_positional(sk, last: bool):
    """A fresh set of the skeleton's positional tables, with or without the last end's floor."""
    from optsearch.formulation import positional
    sk.positional = None
    with mock.patch.object(positional, "LAST_END_EMBEDDING", last):
        positional.tables(sk)


def check_lastend(problem, options, seed, stats, budgets_kept: int | None = None):
    """timerows: the positional bound with LAST_END_EMBEDDING (embedding_last_rows) below every plan of its candidate
    that meets the budget (v = 1: positional_bound with slower_than_s 0 and at the median time; v > 1: the solver's
    interleaved_positional_bound from the sibling), never below the bound without it, and above it somewhere
    (counted); the sequences it returns and every quick plan (end_matched's among them) are plans of the space that
    fit, priced as the cost model prices them."""
    from optsearch.bounds import interleaving_factor
    from optsearch.candidates import in_search_space
    from optsearch.costmodel import estimate
    from optsearch.formulation import positional
    from optsearch.solver import interleaved_positional_bound

    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced_plans = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = audit_round14.edge_budgets(priced_plans, rng)[:budgets_kept]
    times = sorted(e.training_time_s for _, _, e in priced_plans)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        sk = memo.skeleton(cand)
        for plan, est in memo.quick_plans(sk):
            stats["lastend_quick_plans"] += 1
            assert in_search_space(problem, plan, options) and est.fits and est == estimate(problem, plan), plan
        factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
        for budget in budgets:
            for slower in (0.0, median) if cand.v == 1 else (0.0,):
                values = _plans_meeting(plans, budget, slower)
                got = {}
                # Round 23: the last end's floor alone never lowers the bound, compared with the ends-class floor's
                # marks off (ENDS_CLASS_MARKS = 0): with them on, the floor's intervals start at the walk's first
                # marks, which the last end's floor moves, and their floor is not monotone in them (--hypothesis-seed
                # 25: 261.78 without the last end, 261.31 with it, both below the plan 266.68). The bound as solved
                # (the marks on) is checked against the plans and never below the marks-off one (ENDS_CLASS_MARKS_MAX).
                for last in (False, True, "solved"):
                    _fresh_positional(sibling, last is not False)
                    with mock.patch.object(positional, "ENDS_CLASS_MARKS",
                                           positional.ENDS_CLASS_MARKS if last == "solved" else 0):
                        if cand.v == 1:
                            pos = positional.positional_bound(sibling, budget, slower_than_s=slower)
                            got[last] = pos.bound
                            if last == "solved":
                                for seq in pos.sequences:
                                    found = memo.plan_of(sibling, seq)
                                    stats["lastend_sequences"] += 1
                                    if found is not None:
                                        plan, est = found
                                        stats["lastend_sequence_plans"] += 1
                                        assert in_search_space(problem, plan, options) and est.fits, plan
                                        assert est == estimate(problem, plan), plan
                        else:
                            got[last] = interleaved_positional_bound(sibling, budget, factor)
                where = (key, budget.model_dump(exclude_none=True), slower, got, min(values, default=None))
                stats["lastend_bounds"] += 1
                stats["lastend_interleaved"] += cand.v > 1
                assert got[True] >= got[False] * (1 - 1e-12), ("the floor lowers the bound",) + where
                assert got["solved"] >= got[True] * (1 - 1e-12), ("the marks lower the bound",) + where
                stats["lastend_raised"] += got[True] > got[False] * (1 + 1e-9)
                if values:
                    stats["lastend_below_plans"] += 1
                    assert got["solved"] <= min(values) * (1 + REL), ("above a plan",) + where
        sibling.positional = None


def check_rent(problem, options, seed, stats, budgets_kept: int | None = None):
    """rentbatch: inflight.sharpened_many over every candidate of the space (random batches, each walk on its own
    tables) equals sharpened one at a time (fresh tables and call caches for each path), bit for bit, minimizing cost
    under every cost-objective edge budget with the cutoffs none, at the least plan's value and at half of it; with no
    cutoff its bound (_bounded) lies below every plan of its candidate that meets the budget."""
    from optsearch.bounds import CandidateBound
    from optsearch.inflight import sharpened, sharpened_many

    rng = random.Random(seed)
    start = CandidateBound(True, 0.0, 0.0, 0.0)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced_plans = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = [b for b in audit_round14.edge_budgets(priced_plans, rng) if b.objective == "cost"][:budgets_kept]
    memo = Memo(problem, options)
    cands = [(cand, audit_round14._terms(memo, cand), plans) for cand, plans in by_cand.values()]
    cands = [c for c in cands if c[1] is not None]
    for budget in budgets:
        values = [min(v) for *_, plans in cands if (v := _plans_meeting(plans, budget, 0.0))]
        least = min(values, default=math.inf)
        for cutoff in (math.inf, least, 0.5 * least):
            alone_kept, alone_cache, many_kept, many_cache = {}, {}, {}, {}
            want = [sharpened(problem, alone_kept, d, cand, budget, start, alone_cache, cutoff) for cand, d, _ in cands]
            order = list(range(len(cands)))
            rng.shuffle(order)
            got = [None] * len(cands)
            at = 0
            while at < len(order):
                part = order[at:at + rng.randint(1, 40)]
                asks = [(cands[x][1], cands[x][0], budget, start, cutoff, math.inf) for x in part]
                for x, bound in zip(part, sharpened_many(problem, many_kept, asks, many_cache)):
                    got[x] = bound
                at += len(part)
            for (cand, d, plans), g, w in zip(cands, got, want):
                stats["rent_compared"] += 1
                assert g == w, ("sharpened_many differs", cand.key, budget.model_dump(exclude_none=True), cutoff, g, w)
                if cutoff == math.inf and (v := _plans_meeting(plans, budget, 0.0)):
                    stats["rent_below_plans"] += 1
                    item = _bounded(problem, budget, d, cand, True, g, 0.0) if g.feasible else None
                    assert item is not None and item.lower_bound <= min(v) * (1 + REL), (
                        "above a plan", cand.key, budget.model_dump(exclude_none=True), g, min(v))


def _honest_offers(problem, options, stats):
    """solver._best_meeting checking every plan offered to it (every incumbent's source: seeds, climbs, reshaped and
    deepest plans, positional sequences, descents): in the space, fits, priced as the cost model prices it."""
    from optsearch import solver as solver_module
    from optsearch.candidates import in_search_space
    from optsearch.costmodel import estimate

    real = solver_module._best_meeting

    def checked(budget, plans):
        plans = list(plans)
        for plan, est in plans:
            stats["offered_plans"] += 1
            assert in_search_space(problem, plan, options) and est.fits and est == estimate(problem, plan), plan
        return real(budget, plans)

    return mock.patch.object(solver_module, "_best_meeting", checked)


COUNTED = ("_reshaped", "_deepest_plans", "_layer_step_depths", "_plain_then_wide", "_seed_ruled_out",
           "sharpened_many", "end_matched")


def _counting(stats):
    """The round's new incumbent sources and batches, counted where they run (and give something) in the solves."""
    from optsearch import solver as solver_module
    from optsearch.formulation import heuristic

    patches = []
    for name in COUNTED:
        module = heuristic if name == "end_matched" else solver_module
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            out = _real(*args, **kwargs)
            stats[f"calls_{_name}"] += 1
            stats[f"gave_{_name}"] += bool(out)
            return out
        patches.append(mock.patch.object(module, name, counted))
    return patches


def _with_offers_checked(check):
    def run(problem, options, seed, stats):
        patches = [_honest_offers(problem, options, stats), *_counting(stats)]
        for patch in patches:
            patch.start()
        try:
            check(problem, options, seed, stats)
        finally:
            for patch in reversed(patches):
                patch.stop()
    return run


CHECKS = {"live": check_live, "priced": check_priced, "lastend": check_lastend, "rent": check_rent,
          "solve": _with_offers_checked(audit_round14.CHECKS["solve"]),
          "clock": _with_offers_checked(audit_round14.CHECKS["clock"])}


def main() -> int:
    return audit_round15.seeded_main(CHECKS, "live,priced")


if __name__ == "__main__":
    sys.exit(main())
