"""Post-merge audit of round 14 (audit6): overrun (deadlines, _SOLVE_DEADLINE, ClimbCut.path), budgetrows
(degree_floors, _least_sigma, under_cost_tables), costrows (_bound_over_arrays, SHORT_MULTIPLIERS, FIRST_BY_ORDER)
and firstplans (_LazyNeighbours, SEED_RECHECK_LAST). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round14.py --kind tight --seeds 0-39 --checks bounds,under,inflight,lazy
    nice -n 5 python bench/audit_round14.py --kind random --seeds 0-19 --checks solve,clock

kinds: bench/audit_round13's (tests/test_audit_round11.KINDS: random, offheavy, tight, each also -pipelined;
hypinter, hypinter-off) and hyptight (derandomized draws of tests/test_solver_memory.tight_instances: memory-tight,
sequences 4-8k on 16-40 GiB GPUs, one or two layer kinds, T5-like). checks:
  bounds   every candidate of the space that brute force prices (space_plans: both optimizer settings, ep, cp, v)
           under edge budgets (none; cost caps and deadlines at plans' exact values; both): Memo.refined_bound with
           the round's paths (DEGREE_FLOORS from the second ask of a degree, OVER_ARRAYS) equals, bit for bit, the
           bound with DEGREE_FLOORS, BUDGET_FLOORS and OVER_ARRAYS off (a fresh memo: the budget-free list of
           every composition), and its _bounded value lies at or below every plan of the candidate that meets the
           budget (None only where none does); with slower_than_s 0 and at the median plan's time (a sweep's
           later point: only slower plans count); a memo shared by every budget gives the same bounds;
  under    the same with bounds.MAX_COMPOSITIONS = 0 (every pp aggregate: refined_bound_at), UNDER_COST_TABLES on
           against off: the same bound bit for bit, and below every plan that meets the budget;
  inflight _inflight_bounded with FIRST_BY_ORDER and SHORT_MULTIPLIERS (fresh memo) against both off: within a
           relative 1e-12 of each other (the claim: the same dual maximum within 1 ulp), both below every plan of
           the candidate that meets the budget, None only where no plan does;
  lazy     _LazyNeighbours against _candidates(memo, budget, 0.0, DEFAULT)'s v = 1 candidates for the descent's
           budgets (a cost cap or a deadline at a plan's value, objective the capped quantity): the same candidate
           and cheap bound for every key of the list, and no key outside it (the list's keys moved by one step);
  solve, clock   bench/audit_round13's (both backends against brute force; a clock that jumps past the limit or by
           a share at random calls, and slowed clocks: every answer honest), plus: _SOLVE_DEADLINE is None after
           every solve; resume, deeper: bench/audit_round13's (ClimbCut records now carry their path).
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

import audit_round13  # noqa: E402
from test_audit_dist_bounds import small, space_plans  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import bounds as bounds_module  # noqa: E402
from optsearch import inflight as inflight_module  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import (  # noqa: E402
    DEFAULT, REFINED, Bounded, Memo, _bounded, _candidates, _inflight_bounded, _LazyNeighbours,
)
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9


def edge_budgets(priced, rng):
    """None (each objective); cost caps and deadlines at the exact values of the cheapest, the fastest and two
    random plans (each objective), and both together at one plan's values."""
    out = [Budget(objective="cost"), Budget(objective="time")]
    ests = [e for _, _, e in priced]
    if not ests:
        return out
    picks = [min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s)]
    picks += rng.sample(ests, min(2, len(ests)))
    for est in picks:
        for objective in ("time", "cost"):
            out.append(Budget(objective=objective, max_cost_usd=est.cost_usd))
            out.append(Budget(objective=objective, max_time_s=est.training_time_s))
    est = picks[-1]
    out.append(Budget(objective="time", max_cost_usd=est.cost_usd, max_time_s=est.training_time_s))
    return out


def plans_by_candidate(problem, options):
    out: dict = {}
    for cand, plan, est in space_plans(problem, options):
        out.setdefault(cand.key, (cand, []))[1].append((plan, est))
    return out


def _least_meeting(plans, budget):
    values = [objective_value(est, budget.objective) for plan, est in plans if not budget_violations(plan, est, budget)]
    return min(values) if values else None


def _terms(memo, cand):
    return memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)


def _counted(stats, name, fn):
    def wrapped(*args, **kwargs):
        stats[name] += 1
        return fn(*args, **kwargs)
    return wrapped


def _check_refined(problem, options, seed, stats, label, new_flags, old_flags, extra=()):
    rng = random.Random(seed)
    new_flags = dict(new_flags, degree_floors=_counted(stats, f"{label}_degree_floors", solver_module.degree_floors),
                     under_cost_tables=_counted(stats, f"{label}_under_tables", solver_module.under_cost_tables))
    by_cand = plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    bounds_module._DEGREE_ROWS.clear()  # kept without MAX_COMPOSITIONS in its key (audit6's find): not across limits
    with mock.patch.multiple(solver_module, **new_flags), mock.patch.multiple(bounds_module, OVER_ARRAYS=True,
                                                                              **dict(extra)):
        budgets = edge_budgets(priced, rng)
        budgets.sort(key=lambda b: b.max_cost_usd is None)  # cost caps first: a memo shared by them (a sweep's)
        cases = [(b, 0.0) for b in budgets]
        if priced:  # a sweep's later point: only plans slower than a plan's time (solve's slower_than_s)
            times = sorted(e.training_time_s for _, _, e in priced)
            cases += [(b, times[len(times) // 2] * 0.999) for b in budgets]
        keys = list(by_cand)
        rng.shuffle(keys)
        got = {}
        shared = Memo(problem, options)
        for budget, slower in cases:
            fresh = Memo(problem, options)  # one search's memo
            for key in keys:  # scattered asks, as a climb makes them: first asks one pp alone, later the degree's
                cand = by_cand[key][0]
                got[(key, budget, slower)] = fresh.refined_bound(_terms(fresh, cand), cand, budget, slower)
                again = shared.refined_bound(_terms(shared, cand), cand, budget, slower)
                assert again == got[(key, budget, slower)], (
                    "a shared memo's bound differs", key, str(again), str(got[(key, budget, slower)]),
                    budget.model_dump(exclude_none=True), slower)
    with mock.patch.multiple(solver_module, **old_flags), \
            mock.patch.multiple(bounds_module, OVER_ARRAYS=False, **dict(extra)):
        for budget, slower in cases:
            old_memo = Memo(problem, options)
            for key in keys:
                cand, plans = by_cand[key]
                terms = _terms(old_memo, cand)
                want = old_memo.refined_bound(terms, cand, budget, slower)
                have = got[(key, budget, slower)]
                stats[f"{label}_compared"] += 1
                where = (label, key, budget.model_dump(exclude_none=True), slower, str(have), str(want))
                assert have == want, ("not the same bound",) + where
                best = _least_meeting([(p, e) for p, e in plans if e.training_time_s > slower], budget)
                item = _bounded(problem, budget, terms, cand, True, have, slower)
                if best is None:
                    continue
                stats[f"{label}_below_plans"] += 1
                assert item is not None, ("rules out a candidate with a plan that meets the budget", best) + where
                assert item.lower_bound <= best * (1 + REL), ("above a plan", item.lower_bound, best) + where
    bounds_module._DEGREE_ROWS.clear()


def check_bounds(problem, options, seed, stats):
    _check_refined(problem, options, seed, stats, "bounds",
                   dict(DEGREE_FLOORS=True, BUDGET_FLOORS=True, DEGREE_FLOORS_FROM=2),
                   dict(DEGREE_FLOORS=False, BUDGET_FLOORS=False))


def check_under(problem, options, seed, stats):
    _check_refined(problem, options, seed, stats, "under",
                   dict(UNDER_COST_TABLES=True, REFINED_TABLES_FROM=1),
                   dict(UNDER_COST_TABLES=False, REFINED_TABLES_FROM=1), extra=(("MAX_COMPOSITIONS", 0),))


def check_inflight(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in edge_budgets(priced, rng):
        values = {}
        for flags in (True, False):
            with mock.patch.multiple(inflight_module, FIRST_BY_ORDER=flags, SHORT_MULTIPLIERS=flags):
                memo = Memo(problem, options)
                for key, (cand, _) in by_cand.items():
                    item = Bounded(cand, 0.0, _terms(memo, cand), REFINED)
                    values[(key, flags)] = _inflight_bounded(memo, budget, item)
        for key, (cand, plans) in by_cand.items():
            new, old = values[(key, True)], values[(key, False)]
            where = (key, budget.model_dump(exclude_none=True), new, old)
            stats["inflight_compared"] += 1
            assert (new is None) == (old is None), ("feasibility differs",) + where
            if new is not None:
                assert math.isclose(new, old, rel_tol=1e-12, abs_tol=0.0), ("values differ",) + where
            best = _least_meeting(plans, budget)
            if best is None:
                continue
            stats["inflight_below_plans"] += 1
            assert new is not None, ("rules out a candidate with a plan",) + where
            assert new <= best * (1 + REL), ("above a plan", best) + where


def check_lazy(problem, options, seed, stats):
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    if priced:
        for _, plan, est in rng.sample(priced, min(3, len(priced))):
            budgets += [Budget(objective="cost", max_cost_usd=est.cost_usd),
                        Budget(objective="time", max_time_s=est.training_time_s),
                        Budget(objective="cost", max_cost_usd=est.cost_usd * 2, max_gpus=max(1, plan.num_gpus // 2)),
                        Budget(objective="time", max_time_s=est.training_time_s * 2, max_gpus=plan.num_gpus,
                               max_usd_per_hour=est.usd_per_hour)]
    for budget in budgets:
        listed, _ = _candidates(Memo(problem, options), budget, 0.0, DEFAULT)
        lazy = _LazyNeighbours(Memo(problem, options), budget)
        by_key = {item.cand.key: item for item in listed if item.cand.v == 1}
        for key, item in by_key.items():
            got = lazy[key]
            stats["lazy_keys"] += 1
            assert got.cand == item.cand and got.lower_bound == item.lower_bound and got.level == item.level, (
                key, budget.model_dump(exclude_none=True), got.lower_bound, item.lower_bound)
        asked = {key[:i] + (key[i] + step,) + key[i + 1:] for key in by_key for i in (0, 1, 2, 3, 4, 5)
                 for step in (-1, 1)}
        asked |= {key[:7] + (1,) for key in by_key}
        for key in asked - set(by_key):
            stats["lazy_absent"] += 1
            assert key not in lazy, (key, budget.model_dump(exclude_none=True))


def tall_instance(seed: int):
    """tests/test_audit_round10.tight_instance (even seeds; memory-tight: 2.5-6 GiB GPUs, 4-8k sequences) or
    test_audit_dist_bounds.random_instance (odd seeds) with 24-64 layers and up
    to 8 stages: too large for brute force (the 'cmp' check only), where the caps hold far fewer layers than L (the
    short multiplier list and the order statistics differ from the full list and the bisection) and pp has many
    compositions."""
    from dataclasses import replace

    from test_audit_dist_bounds import random_instance
    from test_audit_round10 import tight_instance

    problem, options = (tight_instance if seed % 2 == 0 else random_instance)(seed)
    rng = random.Random(30_000 + seed)
    layers = rng.choice([24, 32, 48, 64])
    model = problem.model.model_copy(update={"num_layers": layers, "layer_kinds": None})
    problem = replace(problem, model=model, profile=type(problem.profile)(model=model, gpus=problem.gpus))
    return problem, replace(options, max_stages=rng.choice([4, 6, 8]))


def check_cmp(problem, options, seed, stats):
    """Without brute force (any size): on every candidate of the lists under cost caps and deadlines at the
    cheap bounds' quantiles, the refined bound with DEGREE_FLOORS (and OVER_ARRAYS) equals it without them (a fresh
    memo), with MAX_COMPOSITIONS 0 UNDER_COST_TABLES on equals off, and the in-flight bound with FIRST_BY_ORDER and
    SHORT_MULTIPLIERS is within a relative 1e-12 of it without them."""
    rng = random.Random(seed)
    base_memo = Memo(problem, options)
    free = {obj: _candidates(base_memo, Budget(objective=obj))[0] for obj in ("cost", "time")}
    if not free["cost"]:
        return
    costs = sorted(b.lower_bound for b in free["cost"])
    times = sorted(b.lower_bound for b in free["time"])
    budgets = []
    for q in (0.02, 0.1, 0.3):
        budgets.append(Budget(objective="time", max_cost_usd=costs[int(q * (len(costs) - 1))] * 1.5))
        budgets.append(Budget(objective="cost", max_time_s=times[int(q * (len(times) - 1))] * 1.5))
    for budget in budgets:
        listed = _candidates(Memo(problem, options), budget)[0]
        items = rng.sample(listed, min(400, len(listed)))
        for label, new, old, extra in (
                ("cmp_floors", dict(DEGREE_FLOORS=True), dict(DEGREE_FLOORS=False, BUDGET_FLOORS=False), {}),
                ("cmp_under", dict(UNDER_COST_TABLES=True, REFINED_TABLES_FROM=1),
                 dict(UNDER_COST_TABLES=False, REFINED_TABLES_FROM=1), {"MAX_COMPOSITIONS": 0})):
            bounds_module._DEGREE_ROWS.clear()
            values = {}
            for flags, arrays in ((new, True), (old, False)):
                with mock.patch.multiple(solver_module, **flags), \
                        mock.patch.multiple(bounds_module, OVER_ARRAYS=arrays, **extra):
                    memo = Memo(problem, options)
                    for item in items:
                        values[(item.cand.key, arrays)] = memo.refined_bound(
                            _terms(memo, item.cand), item.cand, budget)
            bounds_module._DEGREE_ROWS.clear()
            for item in items:
                stats[label] += 1
                a, b = values[(item.cand.key, True)], values[(item.cand.key, False)]
                assert a == b, (label, item.cand.key, budget.model_dump(exclude_none=True), str(a), str(b))
        got = {}
        tables = inflight_module.inflight_tables

        def counted(*args, **kwargs):
            tab = tables(*args, **kwargs)
            if tab is not None:
                stats["cmp_tables"] += 1
                stats["cmp_tables_short"] += 0 < tab.most_layers < tab.L
            return tab

        for flags in (True, False):
            with mock.patch.multiple(inflight_module, FIRST_BY_ORDER=flags, SHORT_MULTIPLIERS=flags,
                                     inflight_tables=counted):
                memo = Memo(problem, options)
                for item in items:
                    got[(item.cand.key, flags)] = _inflight_bounded(
                        memo, budget, Bounded(item.cand, 0.0, _terms(memo, item.cand), REFINED))
        for item in items:
            a, b = got[(item.cand.key, True)], got[(item.cand.key, False)]
            stats["cmp_inflight"] += 1
            assert (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)), (
                "inflight", item.cand.key, budget.model_dump(exclude_none=True), a, b)


def _with_deadline_check(check):
    def run(problem, options, seed, stats):
        try:
            check(problem, options, seed, stats)
        finally:
            assert solver_module._SOLVE_DEADLINE.get() is None, "_SOLVE_DEADLINE left set"
    return run


def hyptight_cases(n: int):
    from hypothesis import HealthCheck, given, settings

    from test_solver_memory import tight_instances

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(tight_instances())
    def draw(case):
        problem, options = case[0], case[1]
        out.append((problem, options))

    draw()
    return out


CHECKS = {"bounds": check_bounds, "under": check_under, "inflight": check_inflight, "lazy": check_lazy,
          "solve": _with_deadline_check(audit_round13.check_solve),
          "clock": _with_deadline_check(audit_round13.check_clock),
          "resume": audit_round13.check_resume, "deeper": audit_round13.check_deeper, "cmp": check_cmp}


class Totals(dict):
    def __missing__(self, key):
        return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "tall"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="bounds,under,inflight,lazy")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    totals = Totals(instances=0, failures=0)
    began = real_time.process_time()
    seeds = range(int(lo), int(hi or lo) + 1)
    drawn = None
    if args.kind.startswith("hypinter"):
        drawn = audit_round13.hypinter_cases(seeds[-1] + 1, args.kind == "hypinter-off")
    elif args.kind == "hyptight":
        drawn = hyptight_cases(seeds[-1] + 1)

    def instance(seed):
        if drawn is not None and seed >= len(drawn):
            return None
        if args.kind == "tall":
            return tall_instance(seed)
        return drawn[seed] if drawn is not None else KINDS[args.kind](seed)

    return audit_round13.sweep(CHECKS, args, seeds, instance,
                               (lambda p, o: True) if args.kind == "tall" else small, totals, began)


if __name__ == "__main__":
    sys.exit(main())
