"""Post-merge audit of round 15 (audit7): aggfirst (refined_tables(every_pp), aggregate_bound_at,
Memo.aggregate_first, the loop's cheap step), lists (FAST_CANDIDATES, SHARED_CANDIDATES, ONE_SUPPLY_VECTORS,
SHARED_SENDS) and inflight2 (RENT_BY_ENVELOPE, SPLIT_IN_PYTHON, DEGREE_WHOLE_TERMS). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round15.py --kind tight --seeds 0-39 --checks agg,one,inflight,lists
    nice -n 5 python bench/audit_round15.py --kind hyptight --seeds 0-29 --checks agg,one,inflight,lists
    nice -n 5 python bench/audit_round15.py --kind random --seeds 0-9 --checks solve,clock

kinds: bench/audit_round14's (random, offheavy, tight, each also -pipelined; hypinter, hypinter-off; hyptight: the
memory-tight draws of tests/test_solver_memory.tight_instances, T5-like two-kind models among them) and moe
(derandomized draws of tests/test_moe.moe_instances). checks:
  agg      every candidate (pp > 1, v = 1) of the brute-forced space at every pp of its degree that has listed
           compositions, under edge budgets (none; cost caps and deadlines at plans' exact values; both):
           aggregate_bound_at from tables built with every_pp equals, bit for bit, candidate_bound(refined=True)
           with MAX_COMPOSITIONS = 0 (the claim), refined_bound_at at the pp not listed equals it from tables
           without every_pp, and its _bounded value lies at or below every plan of the candidate that meets the
           budget (None only where none does); Memo.aggregate_first (AGGREGATE_FIRST_FROM 1, tables from the first
           ask), v > 1 included, the same;
  one      least_slowest_stage_s(d, L, 1..most, v) for v = 1, 2, 3 on every degree's terms of both objectives'
           lists (both optimizer settings): ONE_SUPPLY_VECTORS on against off, array_equal (the claim: the same
           floats), and below the slowest stage of every plan of the degree's candidates (v = 1);
  inflight _inflight_bounded with RENT_BY_ENVELOPE, SPLIT_IN_PYTHON and DEGREE_WHOLE_TERMS (one memo, candidates
           asked in shuffled order, so the degree part is shared) against all three off (fresh memo): within a
           relative 1e-12 (the claim: the old maximum to an ulp inside the 1e-12), None on the same candidates,
           below every plan of the candidate that meets the budget;
  lists    _candidates under cost, time, a cost cap and a deadline (both settings, one memo shared by the four,
           as a budget row shares it) with the four lists switches on against off on fresh memos: the same keys
           in the same order, equal candidates (node uses included) and cheap bounds bit for bit;
  solve, clock   bench/audit_round13's (both backends against brute force at plans' exact budgets; clocks that
           jump past the limit), run with AGGREGATE_FIRST_FROM 1 and REFINED_TABLES_FROM 1 so that the aggregate
           goes first wherever it can on these small instances (counted: agg_first_taken).
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import math
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
from audit_round14 import _least_meeting, _terms, edge_budgets, plans_by_candidate  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import bounds as bounds_module  # noqa: E402
from optsearch import inflight as inflight_module  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.bounds import aggregate_bound_at, candidate_bound, refined_bound_at, refined_tables  # noqa: E402
from optsearch.candidates import max_stages  # noqa: E402
from optsearch.solver import REFINED, Bounded, Memo, _bounded, _candidates, _inflight_bounded  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9


def _check_agg_tables(problem, options, by_cand, budgets, most, stats):
    memo = Memo(problem, options)
    tables: dict = {}
    for key, (cand, plans) in by_cand.items():
        if cand.pp < 2 or cand.v != 1:
            continue
        terms = _terms(memo, cand)
        if id(terms) not in tables:
            tables[id(terms)] = (refined_tables(problem, terms, most, every_pp=True),
                                 refined_tables(problem, terms, most, every_pp=False))
        every, plain = tables[id(terms)]
        for budget in budgets:
            where = (key, budget.model_dump(exclude_none=True))
            if every.listed[cand.pp - 1]:
                got = aggregate_bound_at(problem, terms, every, cand.pp, budget)
                with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):
                    want = candidate_bound(problem, terms, cand.pp, budget, refined=True)
                stats["agg_listed_compared"] += 1
                assert got == want, ("aggregate_bound_at differs from MAX_COMPOSITIONS 0", str(got), str(want)) + where
            else:
                got = refined_bound_at(problem, terms, every, cand.pp, budget)
                want = refined_bound_at(problem, terms, plain, cand.pp, budget)
                stats["agg_unlisted_compared"] += 1
                assert got == want, ("refined_bound_at moved with every_pp", str(got), str(want)) + where
            best = _least_meeting(plans, budget)
            item = _bounded(problem, budget, terms, cand, True, got)
            if best is None:
                continue
            stats["agg_below_plans"] += 1
            assert item is not None, ("the aggregate rules out a candidate with a plan", best) + where
            assert item.lower_bound <= best * (1 + REL), ("aggregate above a plan", item.lower_bound, best) + where


def check_agg(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    most = max_stages(problem, options)
    budgets = edge_budgets(priced, rng)
    for limit in (bounds_module.MAX_COMPOSITIONS, 1, 0):  # the default and limits that leave pp unlisted
        with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", limit):
            _check_agg_tables(problem, options, by_cand, budgets, most, stats)
    # Memo.refined_bound (tables, under-cost tables) the same with the tables built at every pp or not
    with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 1), \
            mock.patch.object(solver_module, "REFINED_TABLES_FROM", 1):
        for budget in budgets:
            got = {}
            for flag in (True, False):
                with mock.patch.object(solver_module, "AGGREGATE_FIRST", flag):
                    memo = Memo(problem, options)
                    for key, (cand, plans) in by_cand.items():
                        got[(key, flag)] = memo.refined_bound(_terms(memo, cand), cand, budget)
            for key in by_cand:
                stats["agg_refined_same"] += 1
                assert got[(key, True)] == got[(key, False)], (
                    "Memo.refined_bound moved with AGGREGATE_FIRST", key, budget.model_dump(exclude_none=True),
                    str(got[(key, True)]), str(got[(key, False)]))
    # Memo.aggregate_first itself, v > 1 included, wherever it answers
    with mock.patch.multiple(solver_module, AGGREGATE_FIRST_FROM=1, REFINED_TABLES_FROM=1):
        for budget in budgets:
            memo = Memo(problem, options)
            for key, (cand, plans) in by_cand.items():
                terms = _terms(memo, cand)
                first = memo.aggregate_first(terms, cand, budget)
                if first is None:
                    continue
                stats["agg_first_answers"] += 1
                stats["agg_first_v>1"] += cand.v > 1
                best = _least_meeting(plans, budget)
                item = _bounded(problem, budget, terms, cand, True, first)
                if best is None:
                    continue
                where = (key, budget.model_dump(exclude_none=True), str(first), best)
                assert item is not None, ("aggregate_first rules out a candidate with a plan",) + where
                assert item.lower_bound <= best * (1 + REL), ("aggregate_first above a plan",) + where


def check_one(problem, options, seed, stats):
    by_cand = plans_by_candidate(problem, options)
    memo = Memo(problem, options)
    for objective in ("cost", "time"):
        _candidates(memo, Budget(objective=objective))
    L = problem.model.num_layers
    most = max_stages(problem, options)
    pps = np.arange(1, most + 1)
    seen = {}
    for terms in list(memo.terms.values()):
        if not isinstance(terms, bounds_module.DegreeTerms) or id(terms) in seen:  # (the gather rows' entries)
            continue
        seen[id(terms)] = terms
        for v in (1, 2, 3):
            with mock.patch.object(bounds_module, "ONE_SUPPLY_VECTORS", True):
                new = bounds_module.least_slowest_stage_s(terms, L, pps, v=v)
            with mock.patch.object(bounds_module, "ONE_SUPPLY_VECTORS", False):
                old = bounds_module.least_slowest_stage_s(terms, L, pps, v=v)
            stats["one_compared"] += 1
            assert np.array_equal(new, old), ("one-supply floor differs", v, new.tolist(), old.tolist())
    # below the slowest stage of every plan (v = 1): a plan's slowest stage is at least its largest stage time
    for key, (cand, plans) in by_cand.items():
        if cand.v != 1:
            continue
        terms = _terms(memo, cand)
        floor = bounds_module.least_slowest_stage_s(terms, L, np.array([cand.pp]))[0]
        for plan, est in plans:
            slowest = max(s.time_s for s in est.stages)
            stats["one_below_plans"] += 1
            assert floor <= slowest * (1 + REL), ("floor above a plan's slowest stage", key, floor, slowest)


def check_inflight(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    keys = list(by_cand)
    for budget in edge_budgets(priced, rng):
        rng.shuffle(keys)
        values = {}
        for flag in (True, False):
            with mock.patch.multiple(inflight_module, RENT_BY_ENVELOPE=flag, SPLIT_IN_PYTHON=flag,
                                     DEGREE_WHOLE_TERMS=flag):
                memo = Memo(problem, options)
                for key in keys:
                    cand = by_cand[key][0]
                    item = Bounded(cand, 0.0, _terms(memo, cand), REFINED)
                    values[(key, flag)] = _inflight_bounded(memo, budget, item)
        for key in keys:
            cand, plans = by_cand[key]
            new, old = values[(key, True)], values[(key, False)]
            where = (key, budget.model_dump(exclude_none=True), new, old)
            stats["inflight_compared"] += 1
            assert (new is None) == (old is None), ("feasibility differs",) + where
            if new is not None:
                stats["inflight_differ"] += new != old
                assert math.isclose(new, old, rel_tol=1e-12, abs_tol=0.0), ("values differ",) + where
            best = _least_meeting(plans, budget)
            if best is None:
                continue
            stats["inflight_below_plans"] += 1
            assert new is not None, ("rules out a candidate with a plan",) + where
            assert new <= best * (1 + REL), ("above a plan", best) + where


LIST_SWITCHES = (("solver", "SHARED_CANDIDATES"), ("solver", "FAST_CANDIDATES"), ("bounds", "ONE_SUPPLY_VECTORS"),
                 ("bounds", "SHARED_SENDS"))


def _switched(flag):
    modules = {"solver": solver_module, "bounds": bounds_module}
    patches = [mock.patch.object(modules[m], name, flag) for m, name in LIST_SWITCHES]
    return patches


def check_lists(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    ests = [e for c, plans in by_cand.values() for _, e in plans]
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    if ests:
        est = rng.choice(ests)
        budgets += [Budget(objective="time", max_cost_usd=est.cost_usd),
                    Budget(objective="cost", max_time_s=est.training_time_s)]
    got = {}
    for flag in (True, False):
        patches = _switched(flag)
        for p in patches:
            p.start()
        try:
            shared = Memo(problem, options)
            for budget in budgets:
                memo = shared if flag else Memo(problem, options)
                listed, total = _candidates(memo, budget)
                got[(flag, str(budget))] = ([(b.cand, b.cand.uses, b.lower_bound, b.level) for b in listed], total)
        finally:
            for p in patches:
                p.stop()
    for budget in budgets:
        new, old = got[(True, str(budget))], got[(False, str(budget))]
        stats["lists_compared"] += 1
        stats["lists_rows"] += len(new[0])
        assert new[1] == old[1] and len(new[0]) == len(old[0]), ("list sizes differ", str(budget))
        for a, b in zip(new[0], old[0]):
            assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2] and a[3] == b[3], (
                "list rows differ", str(budget), a[0].key, b[0].key, a[2], b[2])


def _counting_first(stats):
    original = solver_module.Memo.aggregate_first

    def counted(self, terms, cand, budget):
        out = original(self, terms, cand, budget)
        stats["agg_first_taken"] += out is not None
        return out
    return counted


def _with_aggregate_first(check):
    def run(problem, options, seed, stats):
        with mock.patch.multiple(solver_module, AGGREGATE_FIRST_FROM=1, REFINED_TABLES_FROM=1), \
                mock.patch.object(solver_module.Memo, "aggregate_first", _counting_first(stats)):
            check(problem, options, seed, stats)
    return run


def moe_cases(n: int):
    """Derandomized draws of tests/test_moe.moe_instances (expert layers, a dense first layer on some, ep > 1,
    uniform and block recomputation on some)."""
    from hypothesis import HealthCheck, given, settings

    from test_moe import moe_instances

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(moe_instances())
    def draw(case):
        out.append((case[0], case[1]))

    draw()
    return out


def moe_one_kind_cases(n: int):
    """moe_cases' one-kind models only (the solve and clock checks re-check each plan's Megatron-LM launch, which
    refuses a dense layer ahead of the expert layers: the harness's limit, not the solver's)."""
    return [c for c in moe_cases(n) if len(c[0].model.kinds) == 1]


CHECKS = {"agg": check_agg, "one": check_one, "inflight": check_inflight, "lists": check_lists,
          "solve": _with_aggregate_first(audit_round14.CHECKS["solve"]),
          "clock": _with_aggregate_first(audit_round14.CHECKS["clock"])}


def seeded_main(checks: dict, default_checks: str) -> int:
    """A sweep's command line (--kind, --seeds, --checks, --max-seconds) over seeded_instances, run by
    audit_round13.sweep: rounds 15 and 17's main."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default=default_checks)
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    totals = audit_round14.Totals(instances=0, failures=0)
    began = real_time.process_time()
    seeds = range(int(lo), int(hi or lo) + 1)
    return audit_round13.sweep(checks, args, seeds, seeded_instances(args.kind, seeds, KINDS), small, totals, began)


def main() -> int:
    return seeded_main(CHECKS, "agg,one,inflight,lists")

def seeded_instances(kind: str, seeds: range, kinds: dict):
    """The sweep's instance(seed) for a kind: the drawn lists of the hypothesis-like kinds (hypinter, hypinter-off,
    hyptight, moe, moe1; None past their end), else kinds[kind](seed). Shared by rounds 15, 16 and 17's sweeps."""
    n = seeds[-1] + 1
    drawn = (audit_round13.hypinter_cases(n, kind == "hypinter-off") if kind.startswith("hypinter")
             else audit_round14.hyptight_cases(n) if kind == "hyptight" else moe_cases(n) if kind == "moe"
             else moe_one_kind_cases(n) if kind == "moe1" else None)
    if drawn is None:
        return kinds[kind]
    return lambda seed: drawn[seed] if seed < len(drawn) else None


if __name__ == "__main__":
    sys.exit(main())
