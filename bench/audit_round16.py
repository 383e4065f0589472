"""Post-merge audit of round 16 (audit8): inflight3 (inflight.RAW_BY_MODE, WHOLE_WINDOW, LEAST_BY_ROWS), timeb
(solver.PART_CLIMB_LAZY: the part's seeds climbed over the whole space's lazy neighbours), lists2 (bounds.cheap_bounds_many, _least_slowest_many, slowest_floors_many
filling bounds._FLOORS; solver.BATCHED_CHEAP / BATCH_DEGREES, _cheap_ahead filling Memo.cheap_by_pp) and smalltime
(solver.INTERLEAVED_QUICK: Memo.quick_plans at v > 1 and the in-flight step's own quick plans; heuristic.PARAM_SPLIT,
split_layers(by_params=True)). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round16.py --kind hyptight --seeds 0-29 --checks cheap,lists,quick
    nice -n 5 python bench/audit_round16.py --kind hypinter --seeds 0-19 --checks solve,clock

kinds: bench/audit_round15's (tests/test_audit_round11.KINDS: random, offheavy, tight, each also -pipelined;
hypinter, hypinter-off; hyptight (memory-tight, T5-like two-kind models among them); moe, moe1; moe1-v: moe1 with
v = 1, 2). --catalog model:cluster,... runs check_catalog alone. checks:
  cheap    every DegreeTerms a memo holds after the lists of cost, time, a cost cap and a deadline (settings ALL,
           DEFAULT, OFF; the part's memo too; the gather copies' and the off ones' terms included):
           cheap_bounds_many of all of them in a shuffled order and in uneven random batches, each with
           bounds._FLOORS emptied first, against cheap_bounds one at a time (emptied first): every array's bytes;
           the floors kept by either path the same bytes; and the cheap bound of every candidate of the space that
           brute force prices at or below each of its plans (iterations x iteration <= its time, iterations x USD
           per iteration <= its cost), never "infeasible" at a pp where it has one (the bound's validity, v = 1 and,
           through interleaved_bound, v > 1);
  lists    _build_candidates under those budgets and settings with BATCHED_CHEAP on (BATCH_DEGREES drawn from 1, 2,
           3, 5, 128) against off, fresh memos and emptied floors: every row equal (candidate, uses, bound's hex,
           level, terms, total); then one memo with the switch and the batch size flipped between its builds (on,
           off, on with another size) and the floors kept from the on path while FAST_FLOOR / ONE_SUPPLY_VECTORS
           are off, and a memo whose _LazyNeighbours (timeb's first climb over the whole space) bounded its keys
           first: the same lists again (the caches' keys); and every listed candidate's bound at or below each of
           its plans that meets the budget, and the list's least bound at or below the optimum;
  quick    every v > 1 candidate of the lists (DEFAULT, cost and time): each Memo.quick_plans plan has the
           candidate's tp, dp, b, pp, cp, v, counts multiples of v, is in the space, fits, carries
           costmodel.estimate's own estimate, and is priced at or above brute force's best plan of that candidate;
           where PARAM_SPLIT's second split differs from the first, its slowest stage (as split_layers prices it)
           equals the first's;
  inflight _inflight_bounded under edge budgets with inflight3's three switches on, off, and flipped at random
           before every call of one memo (fresh memos; candidates shuffled, so the degree tables grow): equal (==),
           None on the same candidates, at or below every plan of the candidate that meets the budget;
  solve, clock   bench/audit_round14's (both backends against brute force at plans' exact budgets and 5 % above;
           clocks that jump past the limit or by a share at random calls, and slowed clocks; _SOLVE_DEADLINE unset
           after every solve), counting how often a v > 1 candidate's own quick plans were priced in a solve
           (quick_v_priced) and gave a plan (quick_v_plans), and how often the part's descent took timeb's path
           (part_climb_lazy).
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
import random
import sys
import time as real_time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import audit_round13  # noqa: E402
import audit_round14  # noqa: E402
import audit_round15  # noqa: E402
from audit_round14 import _least_meeting, _terms, plans_by_candidate  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import bounds as bounds_module  # noqa: E402
from optsearch import inflight as inflight_module  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.bounds import DegreeTerms, cheap_bounds, cheap_bounds_many, interleaved_bound  # noqa: E402
from optsearch.candidates import in_search_space, max_stages  # noqa: E402
from optsearch.costmodel import estimate  # noqa: E402
from optsearch.formulation.heuristic import _sends, _type_sequences, split_layers  # noqa: E402
from optsearch.formulation.model import pattern_compute_s  # noqa: E402
from optsearch.search import objective_value  # noqa: E402
from optsearch.solver import (  # noqa: E402
    ALL, DEFAULT, OFF, REFINED, Bounded, Memo, _build_candidates, _inflight_bounded, _narrow_memo,
)
from optsearch.spec.budget import Budget  # noqa: E402
from optsearch.units import SECONDS_PER_HOUR  # noqa: E402

REL = 1e-9


def _bytes(arrays) -> tuple:
    return tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)


def _budgets(problem, options, rng, by_cand):
    """cost, time, and a cost cap and a deadline at one plan's exact values (rough ones where there is no plan)."""
    ests = [e for _, plans in by_cand.values() for _, e in plans]
    out = [Budget(objective="cost"), Budget(objective="time")]
    if ests:
        est = rng.choice(ests)
        out += [Budget(objective="time", max_cost_usd=est.cost_usd),
                Budget(objective="cost", max_time_s=est.training_time_s)]
    else:
        out += [Budget(objective="time", max_cost_usd=1e3), Budget(objective="cost", max_time_s=1e6)]
    return out


def _lists(problem, options, budgets, memo=None, alls=None):
    """Every list of each budget (settings OFF first: the gather twins not yet bounded; the part's DEFAULT list
    where the space has a part), as comparable rows."""
    memo = Memo(problem, options) if memo is None else memo
    alls = {} if alls is None else alls
    part = _narrow_memo(problem, options, memo)
    out = []
    for budget in budgets:
        for settings in (OFF, DEFAULT, ALL):
            if part is not None and settings == DEFAULT:
                listed, total = _build_candidates(part, budget, 0.0, settings)
                out.append((total, [(b.cand, b.cand.uses, b.lower_bound.hex(), b.level, b.terms) for b in listed]))
            listed, total = _build_candidates(memo, budget, 0.0, settings)
            out.append((total, [(b.cand, b.cand.uses, b.lower_bound.hex(), b.level, b.terms) for b in listed]))
            if settings == ALL:
                alls[id(budget)] = out[-1]
    return memo, out


def _same(a, b, what):
    assert len(a) == len(b), (what, "lists", len(a), len(b))
    for (ta, ra), (tb, rb) in zip(a, b):
        assert ta == tb and len(ra) == len(rb), (what, "sizes", ta, tb, len(ra), len(rb))
        for x, y in zip(ra, rb):
            assert x[0] == y[0] and x[0].key == y[0].key and x[1] == y[1] and x[2] == y[2] and x[3] == y[3] and \
                x[4] == y[4], (what, "row", x[0].key, y[0].key, x[2], y[2])


def check_cheap(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    budgets = _budgets(problem, options, rng, by_cand)
    with mock.patch.object(solver_module, "BATCHED_CHEAP", False), mock.patch.object(bounds_module, "_FLOORS", {}):
        memo, _ = _lists(problem, options, budgets)
    terms = [t[0] if isinstance(t, tuple) else t for t in memo.terms.values() if t is not None]
    terms = [t for t in terms if isinstance(t, DegreeTerms)]
    pps = np.arange(1, max_stages(problem, options) + 1)
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        was = [_bytes(cheap_bounds(problem, d, pps)) for d in terms]
        kept = {k: v.tobytes() for k, v in bounds_module._FLOORS.items()}
    order = list(range(len(terms)))
    rng.shuffle(order)
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        now = cheap_bounds_many(problem, [terms[i] for i in order], pps)
        assert {k: v.tobytes() for k, v in bounds_module._FLOORS.items()} == kept, "kept floors differ"
    for i, got in zip(order, now):
        stats["cheap_terms"] += 1
        assert _bytes(got) == was[i], ("cheap_bounds_many differs (all at once)", i)
    with mock.patch.object(bounds_module, "_FLOORS", {}):  # uneven random batches
        at = 0
        while at < len(order):
            size = rng.choice([1, 2, 3, 7, 50])
            part = order[at:at + size]
            for i, got in zip(part, cheap_bounds_many(problem, [terms[i] for i in part], pps)):
                stats["cheap_batched"] += 1
                assert _bytes(got) == was[i], ("cheap_bounds_many differs (batches)", i, size)
            at += size
    # the cheap bound below every plan of its candidate (validity: unchanged if the bits are, checked anyway)
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        fresh = Memo(problem, options)
        for key, (cand, plans) in by_cand.items():
            d = _terms(fresh, cand)
            ok, iteration, rate, cost = cheap_bounds_many(problem, [d], pps)[0]
            stats["cheap_below_cands"] += 1
            assert ok[cand.pp - 1], ("cheap bound rules out a candidate with plans", key)
            it, co = float(iteration[cand.pp - 1]), float(cost[cand.pp - 1])
            if cand.v > 1:
                bound = interleaved_bound(bounds_module.CandidateBound(True, it, float(rate[cand.pp - 1]), co),
                                          d.m, cand.pp, cand.v)
                it, co = bound.iteration_s, bound.cost_per_iteration_usd
            for plan, est in plans:
                stats["cheap_below_plans"] += 1
                assert problem.iterations * it <= est.training_time_s * (1 + REL), ("time above a plan", key, it)
                assert problem.iterations * co <= est.cost_usd * (1 + REL), ("cost above a plan", key, co)
                assert float(rate[cand.pp - 1]) <= est.cost_usd / est.training_time_s * SECONDS_PER_HOUR * (1 + REL), (
                    "rent above a plan's", key)


def check_lists(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    budgets = _budgets(problem, options, rng, by_cand)
    batch = rng.choice([1, 2, 3, 5, 128])
    with mock.patch.object(solver_module, "BATCHED_CHEAP", False), mock.patch.object(bounds_module, "_FLOORS", {}):
        _, base = _lists(problem, options, budgets)
    alls: dict = {}
    with mock.patch.multiple(solver_module, BATCHED_CHEAP=True, BATCH_DEGREES=batch), \
            mock.patch.object(bounds_module, "_FLOORS", {}):
        _, new = _lists(problem, options, budgets, alls=alls)
    _same(new, base, ("on against off", batch))
    stats["lists_compared"] += len(base)
    stats["lists_rows"] += sum(len(rows) for _, rows in base)
    # one memo, the switch and the batch size flipped between its builds, the floors kept across FAST_FLOOR /
    # ONE_SUPPLY_VECTORS off (the caches' keys hold none of them: the values must not depend on them)
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        memo = Memo(problem, options)
        for step, (on, size, fast) in enumerate([(True, batch, True), (False, batch, False), (True, 2, False),
                                                 (True, 7, True)]):
            with mock.patch.multiple(solver_module, BATCHED_CHEAP=on, BATCH_DEGREES=size), \
                    mock.patch.multiple(bounds_module, FAST_FLOOR=fast, ONE_SUPPLY_VECTORS=fast):
                if step == 2:  # a new memo on the floors the others kept, off paths
                    memo = Memo(problem, options)
                if step == 3:  # a new memo whose lazy neighbours (timeb's first climb) bound degrees one at a time first
                    memo = Memo(problem, options)
                    for budget in budgets:
                        lazy = solver_module._LazyNeighbours(memo, budget)
                        for key in [r[0].key for r in alls[id(budget)][1] if r[0].v == 1 and r[0].key[7] == 0]:
                            stats["lists_lazy_first"] += key in lazy
                _, got = _lists(problem, options, budgets, memo)
            _same(got, base, ("switched between builds", step, on, size, fast))
            stats["lists_switched"] += 1
    # every listed candidate's bound at or below its plans that meet the budget; the least at or below the optimum
    for budget in budgets:
        total, rows = alls[id(budget)]
        best_all = None
        for cand, _, lower, _, _ in rows:
            entry = by_cand.get(cand.key)
            if entry is None:
                continue
            best = _least_meeting(entry[1], budget)
            if best is None:
                continue
            stats["lists_below_plans"] += 1
            assert float.fromhex(lower) <= best * (1 + REL), ("list bound above a plan", cand.key, lower, best)
        for key, (cand, plans) in by_cand.items():
            best = _least_meeting(plans, budget)
            if best is not None and (best_all is None or best < best_all):
                best_all = best
        if best_all is not None:
            stats["lists_optimum_checked"] += 1
            assert rows and float.fromhex(rows[0][2]) <= best_all * (1 + REL), ("list's least above the optimum",
                                                                               budget.model_dump(exclude_none=True))


def _slowest(sk, seq, parts):
    e = _sends(sk, seq)
    pp = sk.cand.pp
    return max(pattern_compute_s(sk, s, seq[s], n) + (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0)
               for s, n in enumerate(parts))


def check_quick(problem, options, seed, stats):
    by_cand = plans_by_candidate(problem, options)
    for objective in ("cost", "time"):
        memo = Memo(problem, options)
        listed, _ = solver_module._candidates(memo, Budget(objective=objective), 0.0, DEFAULT)
        for item in listed:
            cand = item.cand
            if cand.v == 1:
                continue
            sk = memo.skeleton(cand)
            plans = memo.quick_plans(sk)
            stats["quick_candidates"] += 1
            stats["quick_plans"] += len(plans)
            entry = by_cand.get(cand.key)
            best = None if entry is None else min(objective_value(e, objective) for _, e in entry[1])
            for plan, est in plans:
                assert (plan.tp, plan.dp, plan.micro_batch_size, plan.pp, plan.cp, plan.virtual_stages) == (
                    cand.tp, cand.dp, cand.micro_batch_size, cand.pp, cand.cp, cand.v), ("not its candidate's", plan)
                assert all(s.num_layers % cand.v == 0 for s in plan.stages), plan
                assert in_search_space(problem, plan, options), plan
                assert est.fits and est == estimate(problem, plan), plan
                assert best is not None, ("a quick plan of a candidate brute force has no plan of", cand.key, plan)
                assert objective_value(est, objective) >= best * (1 - REL), ("below brute force's best", cand.key)
            if sk.patterns is None:
                continue
            for seq in _type_sequences(sk):
                first = split_layers(sk, seq)
                other = split_layers(sk, seq, by_params=True)
                if first is None:
                    assert other is None, (cand.key, seq)
                    continue
                assert other is not None and sum(other) == sum(first), (cand.key, seq, first, other)
                stats["quick_splits"] += 1
                if other != first:
                    stats["quick_splits_differ"] += 1
                    assert _slowest(sk, seq, other) == _slowest(sk, seq, first), (
                        "the by-parameters split is slower", cand.key, seq, first, other)


INFLIGHT3 = ("RAW_BY_MODE", "WHOLE_WINDOW", "LEAST_BY_ROWS")


def check_inflight(problem, options, seed, stats):
    """inflight3: _inflight_bounded with RAW_BY_MODE, WHOLE_WINDOW and LEAST_BY_ROWS on (a fresh memo, candidates in a
    shuffled order, so a degree's tables grow and are shared) against all three off (a fresh memo), and on one memo
    with the three flipped at random before every call (the tables kept in Memo.calls under a key without them):
    equal (the claim: the same floats, so ==), None on the same candidates, and at or below every plan of the
    candidate that meets the budget."""
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    keys = list(by_cand)
    original = inflight_module._DegreePart.least_times

    def counted(self, count, v, L):
        stats["inflight_degree_tables"] += 1
        return original(self, count, v, L)

    for budget in audit_round14.edge_budgets(priced, rng):
        rng.shuffle(keys)
        values = {}
        for flag in (True, False, None):
            memo = Memo(problem, options)
            for key in keys:
                flags = {name: (rng.random() < 0.5 if flag is None else flag) for name in INFLIGHT3}
                with mock.patch.multiple(inflight_module, **flags), \
                        mock.patch.object(inflight_module._DegreePart, "least_times", counted):
                    cand = by_cand[key][0]
                    item = Bounded(cand, 0.0, _terms(memo, cand), REFINED)
                    values[(key, flag)] = _inflight_bounded(memo, budget, item)
        for key in keys:
            new, old, mixed = values[(key, True)], values[(key, False)], values[(key, None)]
            where = (key, budget.model_dump(exclude_none=True), new, old, mixed)
            stats["inflight_compared"] += 1
            assert new == old and mixed == old, ("in-flight bound moved with inflight3's switches",) + where
            best = _least_meeting(by_cand[key][1], budget)
            if best is None:
                continue
            stats["inflight_below_plans"] += 1
            assert new is not None, ("rules out a candidate with a plan",) + where
            assert new <= best * (1 + REL), ("above a plan", best) + where


def _counting_quick(stats):
    original = solver_module.Memo.quick_plans

    def counted(self, sk):
        out = original(self, sk)
        if sk.cand.v > 1:
            stats["quick_v_priced"] += 1
            stats["quick_v_plans"] += bool(out)
        return out
    return counted


def _counting_descent(stats):
    original = solver_module._budget_descent

    def counted(memo, budget, time_limit_s, start=None, ends=None, whole=None, stopped=None, finish=None):
        stats["part_climb_lazy"] += whole is not None and start is None  # timeb's PART_CLIMB_LAZY path
        return original(memo, budget, time_limit_s, start=start, ends=ends, whole=whole, stopped=stopped,
                        finish=finish)
    return counted


def _with_quick_count(check):
    def run(problem, options, seed, stats):
        with mock.patch.object(solver_module.Memo, "quick_plans", _counting_quick(stats)), \
                mock.patch.object(solver_module, "_budget_descent", _counting_descent(stats)):
            check(problem, options, seed, stats)
    return run


def check_catalog(model: str, cluster: str, stats) -> None:
    """A catalog instance in the megatron target's space (bench/objective_grid's): every terms of its cost and time
    lists (settings ALL: the off and gather copies' too) through cheap_bounds_many in batches of 128 against
    cheap_bounds one at a time (floors emptied first each), every array's bytes; and the ALL lists of cost and time
    with BATCHED_CHEAP on against off (fresh memos, floors emptied): the same rows, bounds bit for bit."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    options = space_from_target("megatron", problem)
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    rows = {}
    for on in (False, True):
        with mock.patch.object(solver_module, "BATCHED_CHEAP", on), mock.patch.object(bounds_module, "_FLOORS", {}):
            memo = Memo(problem, options)
            rows[on] = [[(b.cand.key, b.cand.uses, b.lower_bound.hex(), b.level) for b in
                         _build_candidates(memo, budget, 0.0, ALL)[0]] for budget in budgets]
            if not on:
                terms = [t[0] if isinstance(t, tuple) else t for t in memo.terms.values() if t is not None]
                terms = [t for t in terms if isinstance(t, DegreeTerms)]
    assert rows[True] == rows[False], ("catalog lists differ", model, cluster)
    stats["catalog_rows"] += sum(len(r) for r in rows[True])
    pps = np.arange(1, max_stages(problem, options) + 1)
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        was = [_bytes(cheap_bounds(problem, d, pps)) for d in terms]
    with mock.patch.object(bounds_module, "_FLOORS", {}):
        now = [_bytes(got) for i in range(0, len(terms), 128) for got in cheap_bounds_many(problem, terms[i:i + 128],
                                                                                          pps)]
    bad = [i for i, (a, b) in enumerate(zip(was, now)) if a != b]
    stats["catalog_terms"] += len(terms)
    assert not bad, ("catalog cheap bounds differ", model, cluster, len(bad))
    # the quick plans of the first QUICK_AT_SCALE v > 1 candidates of the time list (no brute force at this size)
    memo = Memo(problem, options)
    listed, _ = solver_module._candidates(memo, Budget(objective="time"), 0.0, DEFAULT)
    for item in [b for b in listed if b.cand.v > 1][:QUICK_AT_SCALE]:
        cand, sk = item.cand, memo.skeleton(item.cand)
        stats["catalog_quick_candidates"] += 1
        for plan, est in memo.quick_plans(sk):
            stats["catalog_quick_plans"] += 1
            assert (plan.tp, plan.dp, plan.micro_batch_size, plan.pp, plan.cp, plan.virtual_stages) == (
                cand.tp, cand.dp, cand.micro_batch_size, cand.pp, cand.cp, cand.v), ("not its candidate's", plan)
            assert all(st.num_layers % cand.v == 0 for st in plan.stages), plan
            assert in_search_space(problem, plan, options) and est.fits and est == estimate(problem, plan), plan
        for seq in _type_sequences(sk) if sk.patterns is not None else ():
            first, other = split_layers(sk, seq), split_layers(sk, seq, by_params=True)
            assert (first is None) == (other is None), (cand.key, seq)
            if first is not None and other != first:
                stats["catalog_splits_differ"] += 1
                assert _slowest(sk, seq, other) == _slowest(sk, seq, first), ("slower", cand.key, seq, first, other)


QUICK_AT_SCALE = 150


CHECKS = {"cheap": check_cheap, "lists": check_lists, "quick": check_quick, "inflight": check_inflight,
          "solve": _with_quick_count(audit_round14.CHECKS["solve"]),
          "clock": _with_quick_count(audit_round14.CHECKS["clock"])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1",
                                                      "moe1-v"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="cheap,lists,quick")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    ap.add_argument("--catalog", default=None, help="model:cluster,... : check_catalog on each, nothing else")
    args = ap.parse_args()
    if args.catalog:
        args.kind, args.seeds, args.checks = "catalog", args.catalog, "catalog"
        totals = audit_round14.Totals(instances=0, failures=0)
        began = real_time.process_time()
        for pair in args.catalog.split(","):
            model, cluster = pair.split(":")
            totals["instances"] += 1
            try:
                check_catalog(model, cluster, totals)
            except Exception as exc:  # a failure: printed, the sweep goes on
                totals["failures"] += 1
                print(json.dumps({"catalog": pair, "error": repr(exc)[:2000]}), flush=True)
        audit_round13.print_totals(args, totals, began)
        return 0
    lo, _, hi = args.seeds.partition("-")
    totals = audit_round14.Totals(instances=0, failures=0)
    began = real_time.process_time()
    seeds = range(int(lo), int(hi or lo) + 1)
    if args.kind == "moe1-v":  # the one-kind mixture-of-experts draws with v = 1, 2 (interleaved expert layers)
        moe1 = audit_round15.seeded_instances("moe1", seeds, KINDS)

        def instance(seed):
            drawn = moe1(seed)
            return None if drawn is None else (drawn[0], replace(drawn[1], virtual_stages=(1, 2)))
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began)


if __name__ == "__main__":
    sys.exit(main())
