"""Post-merge audit of round 21 (audit13): loop39 (costmodel.ESTIMATE_MEMO, profile.analytic.GET_CACHE) and the
branches merged after it. See docs/solver.md, "Round 21 after the merges: the audit (audit13, 2026-11-25)". Not part
of the test suite, e.g.

    nice -n 5 python bench/audit_round21.py --kind tight --seeds 0-9 --checks memo,cache
    nice -n 5 python bench/audit_round21.py --kind moe --seeds 0-9 --checks solve-ab

kinds: bench/audit_round20's, and t5 (tests/test_audit_round15._t5_tight, widened by seed). checks:
  memo     every plan of the space (brute force's list at its least recomputation, and each plan again with every
           stage's recomputation drawn on its own, the overlap flags drawn) priced by estimate on a fresh copy of the
           problem (a fresh profile, so an empty GET_CACHE) under ESTIMATE_MEMO x GET_CACHE in {off, on}^2: every
           Estimate equal (dataclass equality, bit for bit) to the one with both off; then the same plans priced
           again on one problem whose profile's cache is warm, in a shuffled order: equal again;
  cache    the inputs of a kept entry changed: every (gpu, kind, tp, b) the space asks, asked, then a GpuSpec replaced
           in the profile's dict by a changed spec (peak and HBM x 1.5), by an equal but distinct object, and the
           original put back; the profile copied by dataclasses.replace with flash_attention and unfused_kernels
           flipped; each answer equal to the uncached _get's at that moment;
  solve-ab both backends, no time limit, budgets bench/audit_round19's (plans' exact values and 5 % above), with
           ESTIMATE_MEMO and GET_CACHE on and off: the same status and value both ways and brute force's;
  solve, clock  bench/audit_round19's (both backends against brute force; jumping clocks; every plan honest).
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time as real_time
from dataclasses import fields, replace
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
from test_audit_dist_bounds import MAX_PLANS, small, space_plans  # noqa: E402
from test_audit_round11 import KINDS, assert_equals_truth  # noqa: E402
from test_audit_round21 import deep_kind  # noqa: E402

from optsearch import costmodel  # noqa: E402
from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.costmodel import estimate  # noqa: E402
from optsearch.errors import OptsearchError  # noqa: E402
from optsearch.profile import analytic  # noqa: E402
from optsearch.search import budget_violations  # noqa: E402
from optsearch.solver import Memo, solve  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9
SWITCHES = [(False, False), (True, False), (False, True), (True, True)]


def fresh(problem):
    """The problem with a copy of its profile (an empty GET_CACHE): dataclasses.replace drops _got."""
    profile = problem.profile
    if isinstance(profile, analytic.AnalyticProfile):
        return replace(problem, profile=replace(profile))
    return problem


def _switched(memo: bool, cache: bool):
    return mock.patch.multiple(costmodel, ESTIMATE_MEMO=memo), mock.patch.multiple(analytic, GET_CACHE=cache)


def _priced(problem, plan, memo: bool, cache: bool):
    a, b = _switched(memo, cache)
    with a, b:
        try:
            return estimate(problem, plan)
        except OptsearchError as exc:  # a plan the drawn flags make invalid: the same error every way
            return type(exc).__name__


def drawn_variants(problem, plan, rng):
    """The plan with every stage's recomputation drawn on its own and the overlap flags drawn (plans the loop's
    positional sequences and climbs price, not only brute force's least recomputation)."""
    stages = tuple(replace(s, recompute=rng.choice(["none", "selective", "full"])) for s in plan.stages)
    out = [replace(plan, stages=stages)]
    names = {f.name for f in fields(plan)}
    flags = {k: rng.random() < 0.5 for k in ("overlap_grad_reduce", "overlap_param_gather") if k in names}
    if flags:
        out.append(replace(plan, stages=stages, **flags))
    return out


def check_memo(problem, options, seed, stats):
    rng = random.Random(seed)
    plans = [p for _, p, _ in space_plans(problem, options)]
    plans += [q for p in rng.sample(plans, min(len(plans), 60)) for q in drawn_variants(problem, p, rng)]
    ref = fresh(problem)
    want = [_priced(ref, p, False, False) for p in plans]
    for memo, cache in SWITCHES[1:]:
        got_problem = fresh(problem)
        for plan, w in zip(plans, want):
            got = _priced(got_problem, plan, memo, cache)
            stats["memo_asks"] += 1
            stats["memo_errors"] += isinstance(w, str)
            assert got == w, (memo, cache, str(plan), w, got)
    warm = fresh(problem)
    order = list(range(len(plans)))
    for round_ in range(2):
        rng.shuffle(order)
        for i in order:
            got = _priced(warm, plans[i], True, True)
            stats["memo_warm_asks"] += 1
            assert got == want[i], ("warm", round_, str(plans[i]), want[i], got)


def _asked_keys(problem, options):
    """Every (gpu, kind, tp, b) a price of the space's plans asks of the profile."""
    profile = problem.profile
    if not isinstance(profile, analytic.AnalyticProfile):
        return profile, []
    keys = set()
    real_get = analytic.AnalyticProfile._get

    def spy(self, *key):
        keys.add(key)
        return real_get(self, *key)

    probe = fresh(problem)
    with mock.patch.object(analytic.AnalyticProfile, "_get", spy), mock.patch.multiple(analytic, GET_CACHE=True):
        for _, plan, _ in space_plans(probe, options):
            try:
                estimate(probe, plan)
            except OptsearchError:
                pass
    return probe.profile, sorted(keys, key=repr)


def _same(profile, keys, stats, where):
    for key in keys:
        with mock.patch.multiple(analytic, GET_CACHE=True):
            try:
                got = profile.get(*key)
            except OptsearchError as exc:
                got = type(exc).__name__
        try:
            want = profile._get(*key)
        except OptsearchError as exc:
            want = type(exc).__name__
        stats["cache_asks"] += 1
        assert got == want, (where, key, want, got)


def check_cache(problem, options, seed, stats):
    profile, keys = _asked_keys(problem, options)
    if not keys:
        stats["cache_skipped"] += 1
        return
    _same(profile, keys, stats, "warm")
    gpus = sorted({k[0] for k in keys})
    for name in gpus:
        original = profile.gpus[name]
        before = {k: profile._get(*k) for k in keys if k[0] == name}
        changed = original.model_copy(update={"peak_fp16_tflop_per_s": original.peak_fp16_tflop_per_s * 1.5,
                                              "hbm_gbyte_per_s": original.hbm_gbyte_per_s * 1.5})
        profile.gpus[name] = changed
        _same(profile, keys, stats, ("changed", name))
        stats["cache_moved"] += sum(profile.get(*k) != old for k, old in before.items())  # the check bites
        profile.gpus[name] = original.model_copy()  # equal, a distinct object
        _same(profile, keys, stats, ("copy", name))
        profile.gpus[name] = original
        _same(profile, keys, stats, ("back", name))
    for flags in ({"flash_attention": not profile.flash_attention},
                  {"unfused_kernels": not profile.unfused_kernels, "flash_attention": False}):
        other = replace(profile, **flags)
        _same(other, keys, stats, flags)
        _same(profile, keys, stats, ("after", flags))


def check_solve_ab(problem, options, seed, stats):
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    if not priced:
        return
    for budget in audit_round19.round19_budgets(priced, rng):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for name in ("cbc", "cpsat"):
            answers = []
            for memo, cache in (SWITCHES[0], SWITCHES[-1]):
                a, b = _switched(memo, cache)
                with a, b:
                    got = solve(fresh(problem), budget, solver=name, options=options)
                stats["ab_solves"] += 1
                answers.append(got)
                where = (name, memo, budget.model_dump(exclude_none=True), truth.status, truth.objective_value,
                         got.status, got.objective_value, got.message)
                assert_equals_truth(problem, options, budget, got, truth, where)
            off, on = answers
            assert off.status == on.status, (name, off.status, on.status)
            if off.objective_value is not None:
                assert math.isclose(off.objective_value, on.objective_value, rel_tol=REL), (
                    name, off.objective_value, on.objective_value)


def _positional_values(memo, cand, sibling, budgets, asks, flags):
    """{(i, slower): bound} of the candidate (v = 1: positional_bound; v > 1: interleaved_positional_bound) on fresh
    tables built under flags (positional's switches)."""
    from optsearch.bounds import interleaving_factor
    from optsearch.formulation import positional
    from optsearch.solver import interleaved_positional_bound
    factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
    audit_round19._fresh(sibling, **flags)
    out = {}
    with mock.patch.multiple(positional, **flags):
        for i, slower in asks:
            if cand.v == 1:
                out[(i, slower)] = positional.positional_bound(sibling, budgets[i], slower_than_s=slower).bound
            else:
                out[(i, slower)] = interleaved_positional_bound(sibling, budgets[i], factor)
    sibling.positional = None
    return out


def check_prefix(problem, options, seed, stats):
    """timepark: the positional bound with PREFIX_HIDE_ROUNDS 2 (and 4) at least the bound with 0, and at or below
    every plan of the candidate that meets the budget (budgets audit_round19's: none, caps, deadlines, rents at
    plans' exact values and 5 % above; slower_than_s 0 and the median time at v = 1; v > 1 through the v = 1
    sibling's bound / f_v); tables built under 0 and asked under 2 (the switch flipped between asks) give what
    tables built under 2 give (a cache-key gap otherwise: counted, not asserted)."""
    from optsearch.formulation import positional
    if not hasattr(positional, "PREFIX_HIDE_ROUNDS"):
        stats["prefix_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand, budgets, median, memo = audit_round18._walk_setup(problem, options, seed, audit_round19.round19_budgets,
                                                               None, rng)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        asks = [(i, slower) for i in range(len(budgets)) for slower in ((0.0, median) if cand.v == 1 else (0.0,))]
        rng.shuffle(asks)
        off = _positional_values(memo, cand, sibling, budgets, asks, dict(PREFIX_HIDE_ROUNDS=0))
        on = _positional_values(memo, cand, sibling, budgets, asks, dict(PREFIX_HIDE_ROUNDS=2))
        more = _positional_values(memo, cand, sibling, budgets, asks, dict(PREFIX_HIDE_ROUNDS=4))
        audit_round19._fresh(sibling, PREFIX_HIDE_ROUNDS=0)  # each ask under 0, then again under 2: one table
        flipped = {}
        for i, slower in asks:
            if cand.v == 1:
                for rounds in (0, 2):
                    with mock.patch.multiple(positional, PREFIX_HIDE_ROUNDS=rounds):
                        flipped[(i, slower)] = positional.positional_bound(sibling, budgets[i],
                                                                           slower_than_s=slower).bound
        sibling.positional = None
        for i, slower in asks:
            budget = budgets[i]
            a, b, c = off[(i, slower)], on[(i, slower)], more[(i, slower)]
            where = (key, budget.model_dump(exclude_none=True), slower, a, b, c)
            stats["prefix_bounds"] += 1
            if b < a * (1 - 1e-12):  # not a validity defect (both are checked against the plans below): counted
                stats["prefix_lowered"] += 1
                print(json.dumps({"seed": seed, "prefix_lowered": repr(where)}), flush=True)
            stats["prefix_raised"] += b > a * (1 + REL)
            stats["prefix_raised_4"] += c > b * (1 + REL)
            if (i, slower) in flipped:
                stats["prefix_flipped_asks"] += 1
                if flipped[(i, slower)] != b:
                    stats["prefix_flipped_differs"] += 1
                    stats["prefix_flipped_above_plan"] += bool(audit_round19._meeting(plans, budget, slower)) and \
                        flipped[(i, slower)] > min(audit_round19._meeting(plans, budget, slower)) * (1 + REL)
            values = audit_round19._meeting(plans, budget, slower)
            if values:
                stats["prefix_below_plans"] += 1
                assert max(a, b, c) <= min(values) * (1 + REL), ("above a plan", min(values)) + where
                stats["prefix_tight"] += max(b, c) >= min(values) * (1 - 1e-6)


def _deepest_budgets(priced, rng):
    """Time under cost caps at the least cost x 1, 1.01, 1.05 and at a random plan's exact cost; and cost under
    deadlines at the fastest plan's time and a random plan's (counted only: seed530 changes time under B)."""
    cheapest = min(e.cost_usd for e in priced)
    pick = rng.choice(priced)
    out = [Budget(objective="time", max_cost_usd=cheapest * f) for f in (1.0, 1.01, 1.05)]
    out.append(Budget(objective="time", max_cost_usd=pick.cost_usd))
    out += [Budget(objective="cost", max_time_s=min(e.training_time_s for e in priced)),
            Budget(objective="cost", max_time_s=pick.training_time_s)]
    return out


def _loops_cut(problem, options, budget, solver="cpsat", **flags):
    """tests/test_budget_deepest_round21's harness: every search loop stopped at its first in-flight bound (the
    solver's clock MISSED_S ahead after each), the seed search's round-robin seeds off: a plan only from the work
    before the loops."""
    from test_budget_descent import _WorkClock
    from optsearch import solver as solver_module
    clock = _WorkClock()
    inflight = solver_module._inflight_bounded

    def spends_every_deadline(*args, **kwargs):
        clock.ahead_s += _WorkClock.MISSED_S
        return inflight(*args, **kwargs)

    with mock.patch.multiple(solver_module, time=clock, _inflight_bounded=spends_every_deadline, FIRST_PLAN_SEEDS=0,
                             **flags):
        return solve(problem, budget, solver=solver, options=options, time_limit_s=60.0)


def check_deepest(problem, options, seed, stats):
    """seed530: _deepest_lazy's and _deepest_first's plans honest (in the space, re-priced, under B, never below
    brute force's optimum); solve with DEEPEST_EARLY on and off, both backends, no limit: brute force's answer; the
    loops cut at their first in-flight bound (a plan only from the work before them): every answer honest
    (audit_round13.honest), and where brute force has a plan and none is returned, counted by switch."""
    from optsearch import solver as solver_module
    from test_audit_dist_bounds import check_plan_honest
    rng = random.Random(seed)
    priced = [e for _, _, e in space_plans(problem, options)]
    if not priced:
        return
    for budget in _deepest_budgets(priced, rng):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        opt = truth.objective_value if truth.status == "optimal" else None
        tag = "t" if budget.objective == "time" else "c"
        if budget.objective == "time":
            memo = Memo(problem, options)
            part = solver_module._narrow_memo(problem, options, memo)
            got = [solver_module._deepest_first(memo, budget)]
            if part is not None:
                got.append(solver_module._deepest_lazy(memo, part, budget))
            for one in got:
                stats["deepest_asks"] += 1
                if one is not None:
                    stats["deepest_plans"] += 1
                    check_plan_honest(problem, options, budget, one[1], one[0])
                    assert opt is not None and one[0] >= opt * (1 - 1e-9), ("below the optimum", one[0], opt)
                    stats["deepest_at_opt"] += math.isclose(one[0], opt, rel_tol=1e-9)
        for on in (True, False):
            for name in ("cbc", "cpsat"):
                with mock.patch.multiple(solver_module, DEEPEST_EARLY=on):
                    got = solve(problem, budget, solver=name, options=options)
                stats["deepest_solves"] += 1
                assert_equals_truth(problem, options, budget, got, truth,
                                    (on, name, budget.model_dump(exclude_none=True), got.status, got.objective_value))
            cut = _loops_cut(problem, options, budget, DEEPEST_EARLY=on)
            stats[f"cut_solves_{tag}"] += 1
            audit_round13.honest(problem, options, budget, cut, truth, (on, budget.model_dump(exclude_none=True),
                                                                         cut.status, cut.objective_value, cut.bound))
            if opt is not None and cut.plan is None:
                stats[f"cut_no_plan_{tag}_{'on' if on else 'off'}"] += 1
                meeting = sum(not budget_violations(p, e, budget) for _, p, e in space_plans(problem, options))
                print(json.dumps({"seed": seed, "cut_no_plan": budget.model_dump(exclude_none=True), "on": on,
                                  "optimum": opt, "plans_meeting": meeting, "status": cut.status}), flush=True)


def check_floors(problem, options, seed, stats):
    """costflight: bounds.slowest_floors_many(ds, L, pps, v) (the in-flight step's batch, SLOWEST_AT_ONCE) equals
    least_slowest_stage_s(d, L, pps, v=v) computed directly, bit for bit, for every degree of the listed candidates
    at v = 1..4 and pp = 1..P (P past the kept arrays' 64 too), on an empty _FLOORS, then again after slowest_floor
    filled it one d at a time in a shuffled order (kept arrays shorter than asked recomputed)."""
    import inspect

    import numpy as np

    from optsearch import bounds
    if "v" not in inspect.signature(bounds.slowest_floors_many).parameters:
        stats["floors_absent"] += 1
        return
    rng = random.Random(seed)
    memo = Memo(problem, options)
    L = problem.model.num_layers
    ds = {}
    for cand, _, _ in space_plans(problem, options):
        d = audit_round14._terms(memo, cand)
        ds[id(d)] = d
    ds = list(ds.values())
    if not ds:
        return
    for v in (1, 2, 3, 4):
        for pps in (np.arange(1, 9), np.array([rng.randint(1, 80)]), np.arange(1, 71)):
            want = np.array([bounds.least_slowest_stage_s(d, L, pps, v=v) for d in ds]).reshape(len(ds), len(pps))
            saved = dict(bounds._FLOORS)
            try:
                bounds._FLOORS.clear()
                got = bounds.slowest_floors_many(ds, L, pps, v)
                assert np.array_equal(got, want, equal_nan=True), ("many", v, pps.tolist())
                bounds._FLOORS.clear()
                order = list(range(len(ds)))
                rng.shuffle(order)
                for i in order[: len(order) // 2]:
                    bounds.slowest_floor(ds[i], L, pps[:1], v=v)
                got = bounds.slowest_floors_many(ds, L, pps, v)
                assert np.array_equal(got, want, equal_nan=True), ("many after some kept", v, pps.tolist())
                one = np.array([bounds.slowest_floor(d, L, pps, v=v) for d in ds]).reshape(len(ds), len(pps))
                assert np.array_equal(one, want, equal_nan=True), ("one at a time", v, pps.tolist())
            finally:
                bounds._FLOORS.clear()
                bounds._FLOORS.update(saved)
            stats["floors_compared"] += want.size
            stats["floors_finite"] += int(np.isfinite(want).sum())


def check_prefix_cut(problem, options, seed, stats):
    """timepark under the loop's cutoffs: v = 1 candidates' positional_bound with PREFIX_HIDE_ROUNDS = 2 and cutoff at
    1.001 x the candidate's best plan meeting the budget (a plan lies below the cutoff, so the answer may not reach
    it: at or below that plan), budgets audit_round19's, tables asked in a shuffled order (kept marks shared)."""
    from optsearch.formulation import positional
    if not hasattr(positional, "PREFIX_HIDE_ROUNDS"):
        stats["prefix_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = audit_round19.round19_budgets(priced, rng)
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        order = list(range(len(budgets)))
        rng.shuffle(order)
        audit_round19._fresh(sk, PREFIX_HIDE_ROUNDS=2)
        with mock.patch.multiple(positional, PREFIX_HIDE_ROUNDS=2):
            for i in order:
                values = audit_round19._meeting(plans, budgets[i])
                if not values:
                    continue
                best = min(values)
                got = positional.positional_bound(sk, budgets[i], cutoff=best * 1.001).bound
                stats["prefix_cut_asks"] += 1
                stats["prefix_cut_tight"] += got >= best * (1 - 1e-6)
                assert got <= best * (1 + REL), ("above a plan under a cutoff", key,
                                                 budgets[i].model_dump(exclude_none=True), got, best)
        sk.positional = None


def check_switches(problem, options, seed, stats):
    """Each switch this round added, flipped alone (inflight.SLOWEST_AT_ONCE off, solver.SEQUENCE_MOVES_WORK 0,
    DEEPEST_SKIPS_MORE off, DEEPEST_EARLY_DPS 1, positional.PREFIX_HIDE_ROUNDS 0): both backends, no limit, budgets
    audit_round19's (a sample of 6): brute force's answer every way."""
    from optsearch import inflight
    from optsearch import solver as solver_module
    from optsearch.formulation import positional
    flips = [(inflight, {"SLOWEST_AT_ONCE": False}), (solver_module, {"SEQUENCE_MOVES_WORK": 0}),
             (solver_module, {"DEEPEST_SKIPS_MORE": False}), (solver_module, {"DEEPEST_EARLY_DPS": 1}),
             (positional, {"PREFIX_HIDE_ROUNDS": 0})]
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    if not priced:
        return
    budgets = audit_round19.round19_budgets(priced, rng)
    for budget in rng.sample(budgets, min(6, len(budgets))):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for module, flags in flips:
            for name in ("cbc", "cpsat"):
                with mock.patch.multiple(module, **flags):
                    got = solve(problem, budget, solver=name, options=options)
                stats["switch_solves"] += 1
                assert_equals_truth(problem, options, budget, got, truth,
                                    (flags, name, budget.model_dump(exclude_none=True), got.status, got.objective_value))


def t5_kind(seed: int):
    """tests/test_audit_round15._t5_tight, its GPUs' memory and the batch drawn by seed (None past 40)."""
    if seed >= 40:
        return None
    from test_audit_round15 import _t5_tight

    problem, options = _t5_tight()
    rng = random.Random(seed)
    gpus = {n: g.model_copy(update={"memory_gib": rng.choice([16.0, 24.0, 32.0, 40.0])})
            for n, g in problem.gpus.items()}
    cluster = problem.cluster.model_copy(update={"gpus": list(gpus.values())})
    profile = replace(problem.profile, gpus=gpus) if isinstance(problem.profile, analytic.AnalyticProfile) \
        else problem.profile
    return replace(problem, gpus=gpus, cluster=cluster, profile=profile), options


CHECKS = {"floors": check_floors, "deepest": check_deepest, "prefix": check_prefix, "memo": check_memo,
          "cache": check_cache, "solve-ab": check_solve_ab, "prefix-cut": check_prefix_cut,
          "switches": check_switches,
          "solve": audit_round19.CHECKS["solve"], "clock": audit_round19.CHECKS["clock"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="tight",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "t5", "deep"])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="memo,cache")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "t5":
        instance = t5_kind
    elif args.kind == "deep":
        instance = deep_kind
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
