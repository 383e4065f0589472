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

from optsearch import costmodel  # noqa: E402
from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.costmodel import estimate  # noqa: E402
from optsearch.errors import OptsearchError  # noqa: E402
from optsearch.profile import analytic  # noqa: E402
from optsearch.solver import solve  # noqa: E402

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
    priced = [e for _, _, e in space_plans(problem, options)]
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


CHECKS = {"memo": check_memo, "cache": check_cache, "solve-ab": check_solve_ab,
          "solve": audit_round19.CHECKS["solve"], "clock": audit_round19.CHECKS["clock"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="tight",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "t5"])
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
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    for seed in seeds:
        if real_time.process_time() - began > args.max_seconds:
            break
        drawn = instance(seed)
        if drawn is None:
            totals["skipped"] += 1
            continue
        problem, options = drawn
        if not small(problem, options):
            totals["skipped"] += 1
            continue
        totals["instances"] += 1
        audit_round13.run_checks(CHECKS, args, problem, options, seed, totals)
    audit_round13.print_totals(args, totals, began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
