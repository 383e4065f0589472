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
            slower_than_s 0 and the median plan time, BUDGET_PAIR_RENT on and off with ENDS_CLASS_FLOOR off (park530's
            floor often subsumes the lift), and every switch on, on fresh tables: the bound with the lift at least the
            bound without it, and at or below the candidate's least time among its plans that meet
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
import contextlib
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
        ends = {"ENDS_CLASS_FLOOR": False} if hasattr(positional, "ENDS_CLASS_FLOOR") else {}  # (it often subsumes
        for name, flags in (("off", dict(BUDGET_PAIR_RENT=False, **ends)), ("on", {**flags_on, **ends}),  # the lift)
                            ("every", flags_on)):
            audit_round19._fresh(sibling, **flags)
            with mock.patch.multiple(positional, **flags):
                got[name] = [_bound(memo, cand, sibling, b, s) for b, s in asks]
            sibling.positional = None
        for (budget, slower), off, on_alone, every in zip(asks, got["off"], got["on"], got["every"]):
            on = max(on_alone, every)
            stats[f"{tag}_asks"] += 1
            raised = on_alone > off * (1 + REL)
            stats[f"{tag}_raised"] += raised
            stats[f"{tag}_raised_to_inf"] += raised and math.isinf(on_alone)
            assert on_alone >= off * (1 - 1e-12), ("lowered", key, budget.max_cost_usd, slower, off, on_alone)
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


def ends_budgets(by_cand, rng):
    """Minimizing time: no budget, deadlines at two plans' times (and 5 % above), cost caps at 1.00 / 1.05 x two
    plans' costs, a rent cap at a plan's rent."""
    every = [e for _, plans in by_cand.values() for _, e in plans]
    picks = rng.sample(every, min(2, len(every)))
    out = [Budget(objective="time")]
    for e in picks:
        out += [Budget(objective="time", max_time_s=e.training_time_s * s) for s in (1.0, 1.05)]
        out += [Budget(objective="time", max_cost_usd=e.cost_usd * s) for s in (1.0, 1.05)]
    if picks and hasattr(picks[0], "usd_per_hour"):
        out.append(Budget(objective="time", max_usd_per_hour=picks[0].usd_per_hour))
    return out


CUTS = (math.inf, 1.0001, 1.001, 1.02, 1.5)


def check_ends(problem, options, seed, stats):
    """park530's ends-class floor (ENDS_CLASS_FLOOR): every candidate's positional bound minimizing time (v = 1; v > 1
    through its sibling / f_v) under ends_budgets, slower_than_s 0 and the median plan time (v = 1), cutoffs none and
    1.0001 / 1.001 / 1.02 / 1.5 x the candidate's best plan meeting the budget (the floor's reduce levels follow the
    cutoff's gap), on fresh tables with the switch on and off: on at least off (at no cutoff), and on at or below
    that plan (a bound at or above the cutoff is allowed only where no plan lies below it)."""
    if not hasattr(positional, "ENDS_CLASS_FLOOR"):
        stats["ends_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    budgets = ends_budgets(by_cand, rng)
    times = sorted(e.training_time_s for _, plans in by_cand.values() for _, e in plans)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            stats["ends_no_tables"] += 1
            continue
        asks = []
        for budget in budgets:
            for slower in ((0.0, median) if cand.v == 1 else (0.0,)):
                values = audit_round19._meeting(plans, budget, slower)
                best = min(values) if values else None
                for cut in CUTS:
                    if best is None and cut != math.inf:
                        continue
                    asks.append((budget, slower, math.inf if cut == math.inf else best * cut, best))
        rng.shuffle(asks)
        got = {}
        for on in (False, True):
            audit_round19._fresh(sibling, ENDS_CLASS_FLOOR=on)
            with mock.patch.multiple(positional, ENDS_CLASS_FLOOR=on):
                got[on] = [_bound(memo, cand, sibling, b, s, cutoff=c) for b, s, c, _ in asks]
            sibling.positional = None
        for (budget, slower, cut, best), off, on in zip(asks, got[False], got[True]):
            stats["ends_asks"] += 1
            raised = on > off * (1 + REL)
            stats["ends_raised"] += raised
            if cut == math.inf:
                assert on >= off * (1 - 1e-12), ("lowered", key, budget.model_dump(exclude_none=True), off, on)
            if best is None:
                stats["ends_no_plan"] += 1
                continue
            stats["ends_compared"] += 1
            stats["ends_raised_compared"] += raised
            stats["ends_tight"] += on >= best * (1 - 1e-6)
            if on > best * (1 + REL):
                stats["ends_above"] += 1
                raise AssertionError(("above a plan", seed, repr(key), budget.model_dump(exclude_none=True), slower,
                                      cut, off, on, best))


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


def _round22_flips():
    from optsearch import inflight
    from optsearch import solver as solver_module
    flips = [(positional, {"BUDGET_PAIR_RENT": False}), (positional, {"PAIR_COVER_WITHIN_PP": False})]
    for module, name, off in ((positional, "ENDS_CLASS_FLOOR", False), (inflight, "BUDGET_FAST", False),
                              (inflight, "WHOLE_FAST", False), (inflight, "FLOOR_RENT_KEPT", False),
                              (solver_module, "PROBE_PARAMS", {}), (inflight, "BUDGET_PAIR_SENDS", False),
                              (positional, "SUPPLY_REACH", False), (positional, "SEQUENCE_TRACED", False),
                              (solver_module, "HALF_DP_PLANS", False), (solver_module, "REDUCE_SPLITS", False)):
        if hasattr(module, name):
            flips.append((module, {name: off}))
    return flips


def check_switches22(problem, options, seed, stats):
    """Each switch of round 22 flipped alone (BUDGET_PAIR_RENT, PAIR_COVER_WITHIN_PP, ENDS_CLASS_FLOOR off; flight22's
    BUDGET_FAST, WHOLE_FAST, FLOOR_RENT_KEPT off; probe22's PROBE_PARAMS empty; rentflight's BUDGET_PAIR_SENDS,
    quick1t's SUPPLY_REACH, SEQUENCE_TRACED, HALF_DP_PLANS, plan530's REDUCE_SPLITS off), and all on: both backends, no limit,
    time under caps at 1.00 / 1.05 x two plans' costs, time and cost without a budget, time under a plan's time:
    brute force's answer each time, every plan re-priced."""
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    if not priced:
        return
    picks = rng.sample(priced, min(2, len(priced)))
    budgets = [Budget(objective="time", max_cost_usd=e.cost_usd * s) for _, _, e in picks for s in (1.0, 1.05)]
    budgets += [Budget(objective="time"), Budget(objective="cost"),
                Budget(objective="cost", max_time_s=picks[0][2].training_time_s)]
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for module, flags in [(positional, {})] + _round22_flips():
            for name in ("cbc", "cpsat"):
                with mock.patch.multiple(module, **flags) if flags else contextlib.nullcontext():
                    got = solve(problem, budget, solver=name, options=options)
                stats["switch22_solves"] += 1
                assert_equals_truth(problem, options, budget, got, truth,
                                    (flags, name, budget.model_dump(exclude_none=True), truth.status,
                                     truth.objective_value, got.status, got.objective_value))


def coupled_mid(seed: int):
    """coupled_draw's types at medium size (8-16 layers, up to 8 stages, 2-6 fast nodes, 4-16 cheap ones): past brute
    force; candidates are solved one at a time by CP-SAT (check rent-mid)."""
    from test_audit_round22 import coupled_draw
    from optsearch.candidates import SpaceOptions
    from test_solver import make_problem
    rng = random.Random(33_000 + seed)
    base = None
    for k in range(50):
        base = coupled_draw(seed * 50 + k) if base is None else base
    if base is None:
        return None
    problem, _ = base
    nodes = [n.model_dump() for n in problem.cluster.node_types]
    for n in nodes:
        n["num_nodes_available"] = rng.randint(2, 6) if n["name"] == "fast" else rng.randint(4, 16)
    made = make_problem(layers=rng.randint(8, 16), hidden=problem.model.hidden_size, heads=8,
                        gbs=rng.choice([16, 32]), node_types=nodes, gpus=list(problem.gpus.values()),
                        seq=problem.model.seq_length)
    made = replace(made, overlap_grad_reduce=problem.overlap_grad_reduce, job=made.job.model_copy(
        update={"distributed_optimizer": problem.job.distributed_optimizer}))
    return made, SpaceOptions(micro_batch_sizes=(1, 2), max_stages=8)


def check_rent_mid(problem, options, seed, stats, limit_s: float = 20.0, most: int = 12):
    """Medium instances: time under caps at 1.00 / 1.05 / 1.15 x the cheapest plan's cost and at the fastest plan's
    cost x 0.9 / 1.0 (from solve); every v = 1 candidate whose positional bound the lift raised (up to `most` a
    budget, the least raised first), solved alone by CP-SAT (limit_s): an "optimal" value at or above the bound with
    the lift; a plan where the lift says none (inf) is a defect; "infeasible" where the bound without the lift is
    finite counted."""
    from optsearch.formulation.cpsat import CpSat
    from optsearch.formulation.model import build
    from optsearch.solver import _candidates, _solve_model
    cheap = solve(problem, Budget(objective="cost"), options=options, time_limit_s=30)
    fast = solve(problem, Budget(objective="time"), options=options, time_limit_s=30)
    if cheap.estimate is None or fast.estimate is None:
        stats["mid_no_plan"] += 1
        return
    budgets = [Budget(objective="time", max_cost_usd=cheap.estimate.cost_usd * s) for s in (1.0, 1.05, 1.15)]
    budgets += [Budget(objective="time", max_cost_usd=fast.estimate.cost_usd * s) for s in (0.9, 1.0)]
    memo = Memo(problem, options)
    for budget in budgets:
        bounded, _ = _candidates(memo, budget)
        raised = []
        for item in bounded:
            cand = item.cand
            if cand.v != 1:
                continue
            sk = memo.skeleton(cand)
            if sk.most is None:
                continue
            got = {}
            for on in (False, True):
                audit_round19._fresh(sk, BUDGET_PAIR_RENT=on)
                with mock.patch.multiple(positional, BUDGET_PAIR_RENT=on):
                    got[on] = positional.positional_bound(sk, budget).bound
            sk.positional = None
            stats["mid_bounds"] += 1
            if got[True] > got[False] * (1 + REL):
                raised.append((got[False], got[True], cand))
        stats["mid_raised"] += len(raised)
        raised.sort(key=lambda r: r[0])
        for off, on, cand in raised[:most]:
            f = build(problem, budget, cand, options, skel=memo.skeleton(cand))
            sol, found, _ = _solve_model(problem, CpSat(), f, limit_s, None)
            stats[f"mid_{sol.status}"] += 1
            if found is not None:
                value = found[1].training_time_s
                stats["mid_plans"] += 1
                if sol.status == "optimal":
                    stats["mid_compared"] += 1
                    stats["mid_tight"] += on >= value * (1 - 1e-6)
                assert on <= value * (1 + REL) or sol.status != "optimal", (
                    "above the candidate's optimum", seed, repr(cand.key), budget.max_cost_usd, off, on, value)
                assert math.isfinite(on), ("no plan claimed, CP-SAT has one", seed, repr(cand.key),
                                           budget.max_cost_usd, off, value)
                stats["mid_plan_below_bound"] += value < on * (1 - REL)  # a non-optimal plan below: a defect too
                assert value >= on * (1 - REL), ("a plan below the bound", seed, repr(cand.key), budget.max_cost_usd,
                                                 off, on, value)


def _send_budgets(priced, rng):
    """Time under cost caps at SCALES x two plans' costs, one with a rent cap at that plan's rent too."""
    picks = rng.sample(priced, min(2, len(priced)))
    if not picks:  # no plan fits: nothing to compare
        return []
    out = [Budget(objective="time", max_cost_usd=e.cost_usd * s) for _, _, e in picks for s in SCALES]
    out.append(Budget(objective="time", max_cost_usd=picks[0][2].cost_usd * 1.05,
                      max_usd_per_hour=picks[0][2].usd_per_hour))
    return out


def check_sends(problem, options, seed, stats):
    """rentflight (inflight.BUDGET_PAIR_SENDS, a bound change): every candidate's in-flight bound (_inflight_bounded,
    v > 1 too) under _send_budgets, cutoffs none and the candidate's best plan meeting the budget, with the switch on
    and off (fresh Memo each): on never rules out a candidate with a plan, and lies at or below its best plan
    (audit_round19._inflight_check); raised counted."""
    from optsearch import inflight
    if not hasattr(inflight, "BUDGET_PAIR_SENDS"):
        stats["sends_absent"] += 1
        return
    audit_round19._inflight_check(problem, options, seed, stats, "sends", _send_budgets, same=[],
                                  differ=[({"BUDGET_PAIR_SENDS": True}, {"BUDGET_PAIR_SENDS": False})])


def check_reach(problem, options, seed, stats):
    """quick1t's SUPPLY_REACH (claimed exact): every v = 1 candidate's positional bound under audit_round19's budgets
    and time under caps at 1.00 / 1.05 x plans' costs, on fresh tables with the switch on and off: the same bits."""
    if not hasattr(positional, "SUPPLY_REACH"):
        stats["reach_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = audit_round19.round19_budgets(priced, rng) + _send_budgets(priced, rng)
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        got = {}
        for on in (False, True):
            audit_round19._fresh(sk, SUPPLY_REACH=on)
            with mock.patch.multiple(positional, SUPPLY_REACH=on):
                got[on] = [positional.positional_bound(sk, b).bound for b in budgets]
            sk.positional = None
        for b, x, y in zip(budgets, got[False], got[True]):
            stats["reach_compared"] += 1
            assert x == y, ("SUPPLY_REACH changes a bound", key, b.model_dump(exclude_none=True), x, y)


CHECKS = {"sends": check_sends, "reach": check_reach, "ends": check_ends, "rent": check_rent, "rent-cut": check_rent_cut, "rent-mut": check_rent_mut, "rent-mid": check_rent_mid, "within": check_within,
          "solve-ab": check_solve_ab, "switches22": check_switches22, "solve": audit_round21.CHECKS["solve"], "clock": audit_round21.CHECKS["clock"],
          "switches": audit_round21.CHECKS["switches"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="coupled",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "t5", "deep", "coupled", "coupled-mid"])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="rent")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "coupled-mid":
        instance = coupled_mid
    elif args.kind == "coupled":
        instance = coupled_kind
    elif args.kind == "t5":
        instance = audit_round21.t5_kind
    elif args.kind == "deep":
        instance = deep_kind
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    keep = (lambda p, o: True) if args.kind == "coupled-mid" else small
    return audit_round13.sweep(CHECKS, args, seeds, instance, keep, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
