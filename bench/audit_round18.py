"""Post-merge audit of round 18 (audit10): costbound (positional.mixed_slowest_floor_s, TYPE_BOUNDARY_FLOOR: the
slowest stage of a plan that mixes node types, added to the positional bound's marks, the marks below it dropped where
no type alone runs the pipeline) and the later merges of the round (see docs/solver.md, "Round 18 after the merges:
the audit"). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round18.py --kind boundary --seeds 0-199 --checks boundary --max-seconds 300
    nice -n 5 python bench/audit_round18.py --kind tight --seeds 0-39 --checks boundary
    nice -n 5 python bench/audit_round18.py --kind hypinter --seeds 0-19 --checks solve,clock

kinds: bench/audit_round17's (random, offheavy, tight, each also -pipelined; hypinter, hypinter-off, hyptight, moe,
moe1) and boundary / boundary-tight (tests/test_positional_type_boundary.boundary_instance: two or three types with
NICs 10-3,200 Gbit/s and 1-3 nodes each, so the supply binds; draws over its plan limit are skipped), boundary-wide
(the same widened: v = 2, cp = 2, a mixture of experts, block recomputation, the overlap on; boundary_wide). checks:
  boundary  every candidate of the brute-forced space whose v = 1 sibling is in pattern mode: M_mix at or below the
            slowest stage of every plan of the candidate on two or more types (v > 1 plans too: their stages pay v
            sends); where `single` is False, no plan of the candidate runs on one type; and under edge budgets
            (none; cost caps, deadlines and rents at plans' exact values; both), with slower_than_s 0 and at the
            median plan's time (v = 1), and for v > 1 through the solver's interleaved_positional_bound: the
            positional bound on fresh tables with the floor at least the bound without it (fresh tables too), at
            or below every plan of the candidate that meets the budget, and the sequences it returns real plans of
            the space (in_search_space, fit, priced as estimate prices them);
  lift      budgetbound's budget_time_lift (BUDGET_LAGRANGE) beside the floor: check_lift;
  ends      timerows2's in-flight time walk by end pairs (INFLIGHT_ENDS_TIME): check_ends;
  split     budgetb2's _split_descent, _end_retyped and _split_repaired on random plans of the space: check_split;
  resume    bench/audit_round13's (climbs cut and resumed from a shared record end where lone climbs end), run with
            round 18's RESHAPE_UNDER_B and SPLIT_REPAIR on (test_budgetgap's pin now runs with RESHAPE_UNDER_B off);
  solve, clock  bench/audit_round17's (both backends against brute force at plans' exact budgets and 5 % above;
            clocks that jump past the limit; every plan offered to solver._best_meeting honest).
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
import audit_round17  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch.bounds import interleaving_factor  # noqa: E402
from optsearch.candidates import in_search_space  # noqa: E402
from optsearch.costmodel import estimate  # noqa: E402
from optsearch.formulation import positional  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import Memo, interleaved_positional_bound  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9


def boundary_budgets(priced, rng) -> list[Budget]:
    """audit_round14.edge_budgets, and a rent limit at a random plan's rent (each objective; the floor's caps and
    marks matter under a rent limit too)."""
    out = audit_round14.edge_budgets(priced, rng)
    if priced:
        est = rng.choice(priced)[2]
        out += [Budget(objective=o, max_usd_per_hour=est.usd_per_hour) for o in ("time", "cost")]
    return out


def fresh_tables(sk, on: bool) -> None:
    """The skeleton's positional tables built again with TYPE_BOUNDARY_FLOOR on or off (the switch is read when the
    tables are built: kept tables keep the setting they were built under)."""
    sk.positional = None
    with mock.patch.object(positional, "TYPE_BOUNDARY_FLOOR", on):
        positional.tables(sk)


def _meeting(plans, budget, slower):
    return [objective_value(e, budget.objective) for p, e in plans
            if e.training_time_s > slower and not budget_violations(p, e, budget)]


def _sequence_plans(problem, options, memo, sk, pos, stats) -> None:
    for seq in pos.sequences:
        found = memo.plan_of(sk, seq)
        stats["boundary_sequences"] += 1
        if found is not None:
            plan, est = found
            stats["boundary_sequence_plans"] += 1
            assert in_search_space(problem, plan, options) and est.fits and est == estimate(problem, plan), plan


def _walk_setup(problem, options, seed, budgets_of, budgets_kept: int | None, rng: random.Random | None = None):
    """check_boundary's and check_lift's start (and rounds 20-21's pair / prefix checks'): (every plan by candidate,
    the budgets budgets_of draws from the priced plans (the first budgets_kept), just below the median plan's time
    (a slower_than_s), a fresh Memo). rng: the caller's, drawn on after (default random.Random(seed))."""
    rng = random.Random(seed) if rng is None else rng
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = budgets_of(priced, rng)[:budgets_kept]
    times = sorted(e.training_time_s for _, _, e in priced)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    return by_cand, budgets, median, Memo(problem, options)


def check_boundary(problem, options, seed, stats, budgets_kept: int | None = None):
    by_cand, budgets, median, memo = _walk_setup(problem, options, seed, boundary_budgets, budgets_kept)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            stats["boundary_kinds_skipped"] += 1  # several layer kinds (T5): kinds_bound, no positional tables
            continue
        floor, single = positional.mixed_slowest_floor_s(sibling)
        stats["boundary_candidates"] += 1
        stats["boundary_finite"] += math.isfinite(floor)
        stats["boundary_not_single"] += not single
        for plan, est in plans:
            mixed = len({s.node_type for s in plan.stages}) > 1
            if mixed:
                stats["boundary_mixed_plans"] += 1
                slowest = max(s.time_s for s in est.stages)
                assert slowest >= floor * (1 - REL), ("a mixed plan's slowest stage below M_mix", key, slowest,
                                                      floor, str(plan))
                stats["boundary_tight"] += slowest <= floor * 1.01
            else:
                assert single, ("single False, but a plan on one type exists", key, str(plan))
        factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
        got: dict = {}
        for on in (True, False):
            fresh_tables(sibling, on)  # one table per setting, kept across the budgets as the solver keeps it
            for budget in budgets:
                for slower in (0.0, median) if cand.v == 1 else (0.0,):
                    if cand.v == 1:
                        pos = positional.positional_bound(sibling, budget, slower_than_s=slower)
                        got[(on, id(budget), slower)] = pos.bound
                        if on:
                            _sequence_plans(problem, options, memo, sibling, pos, stats)
                    else:
                        got[(on, id(budget), slower)] = interleaved_positional_bound(sibling, budget, factor)
        sibling.positional = None
        for budget in budgets:
            for slower in (0.0, median) if cand.v == 1 else (0.0,):
                have, want = got[(True, id(budget), slower)], got[(False, id(budget), slower)]
                values = _meeting(plans, budget, slower)
                where = (key, budget.model_dump(exclude_none=True), slower, have, want, min(values, default=None))
                stats["boundary_bounds"] += 1
                stats["boundary_interleaved"] += cand.v > 1
                assert have >= want * (1 - 1e-12), ("the floor lowers the bound",) + where
                stats["boundary_raised"] += have > want * (1 + REL)
                if values:
                    stats["boundary_below_plans"] += 1
                    assert have <= min(values) * (1 + REL), ("above a plan",) + where
                    stats["boundary_raised_at_plans"] += have > want * (1 + REL)


def lift_budgets(priced, rng) -> list[Budget]:
    """Time under a cost cap (budgetbound's case): caps at the exact costs of the cheapest, the fastest and two random
    plans and 5 % above, one with a deadline too, one with a rent limit too."""
    ests = [e for _, _, e in priced]
    if not ests:
        return []
    picks = [min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s)]
    picks += rng.sample(ests, min(2, len(ests)))
    out = [Budget(objective="time", max_cost_usd=e.cost_usd * scale) for e in picks for scale in (1.0, 1.05)]
    e = picks[-1]
    out += [Budget(objective="time", max_cost_usd=e.cost_usd, max_time_s=e.training_time_s),
            Budget(objective="time", max_cost_usd=e.cost_usd * 1.05, max_usd_per_hour=e.usd_per_hour)]
    return out


SWITCHES = ((True, True), (True, False), (False, True), (False, False))  # (TYPE_BOUNDARY_FLOOR, BUDGET_LAGRANGE)


def check_lift(problem, options, seed, stats, budgets_kept: int | None = None):
    """budgetbound (positional.budget_time_lift, BUDGET_LAGRANGE) and its seam with costbound's floor: minimizing time
    under a cost cap, the positional bound with each of the four settings of (TYPE_BOUNDARY_FLOOR, BUDGET_LAGRANGE)
    (fresh tables for each setting, kept across the budgets) at or below every plan of the candidate that meets the
    budget (v = 1 with slower_than_s 0 and at the median plan's time; v > 1 through interleaved_positional_bound);
    both on at least each of the others (neither lowers the bound, nor the lift the floor's, nor the floor the
    lift's); the sequences with both on real plans of the space."""
    by_cand, budgets, median, memo = _walk_setup(problem, options, seed, lift_budgets, budgets_kept)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
        slowers = (0.0, median) if cand.v == 1 else (0.0,)
        got: dict = {}
        for floor_on, lift_on in SWITCHES:
            fresh_tables(sibling, floor_on)
            with mock.patch.object(positional, "TYPE_BOUNDARY_FLOOR", floor_on), \
                    mock.patch.object(positional, "BUDGET_LAGRANGE", lift_on):
                for i, budget in enumerate(budgets):
                    for slower in slowers:
                        if cand.v == 1:
                            pos = positional.positional_bound(sibling, budget, slower_than_s=slower)
                            got[(floor_on, lift_on, i, slower)] = pos.bound
                            if floor_on and lift_on:
                                _sequence_plans(problem, options, memo, sibling, pos, stats)
                        else:
                            got[(floor_on, lift_on, i, slower)] = interleaved_positional_bound(sibling, budget, factor)
        sibling.positional = None
        for i, budget in enumerate(budgets):
            for slower in slowers:
                both = got[(True, True, i, slower)]
                values = _meeting(plans, budget, slower)
                where = (key, budget.model_dump(exclude_none=True), slower,
                         {k[:2]: v for k, v in got.items() if k[2:] == (i, slower)}, min(values, default=None))
                stats["lift_bounds"] += 1
                stats["lift_interleaved"] += cand.v > 1
                for setting in SWITCHES[1:]:
                    assert both >= got[setting + (i, slower)] * (1 - 1e-12), ("both on below", setting) + where
                stats["lift_raised"] += both > got[(True, False, i, slower)] * (1 + REL)
                stats["lift_raised_alone"] += got[(False, True, i, slower)] > got[(False, False, i, slower)] * (1 + REL)
                if values:
                    stats["lift_below_plans"] += 1
                    for setting in SWITCHES:
                        assert got[setting + (i, slower)] <= min(values) * (1 + REL), ("above a plan", setting) + where


def check_ends(problem, options, seed, stats, budgets_kept: int | None = None, cutoffs: tuple[float, ...] = (1.0, 0.5),
               caps: bool = True):
    """timerows2 (inflight INFLIGHT_ENDS_TIME: the time walk by end pairs): solver._inflight_bounded minimizing time,
    with no budget, deadlines, cost caps and rent limits (boundary_budgets' time-objective ones), cutoffs none, at the
    least plan's time and at half of it (cutoffs: those shares), with the switch on (a fresh memo), off (a fresh memo), and flipped at random
    before every call on one memo (the tables kept in Memo.inflight / Memo.calls under keys without the switch):
    the mixed memo's answer equals the fresh one's of the setting it was asked under (==, None alike); on at least
    off where both exist (None only where off is None or on proves no plan); with no cutoff, at or below every plan of
    the candidate that meets the budget (never None there)."""
    from optsearch import inflight as inflight_module
    from optsearch.solver import REFINED, Bounded, _inflight_bounded

    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = [b for b in boundary_budgets(priced, rng) if b.objective == "time"
               and (caps or b.max_cost_usd is None)][:budgets_kept]  # (a cost cap: _time_under_cost, unchanged)
    keys = list(by_cand)
    for budget in budgets:
        values = [min(v) for _, plans in by_cand.values() if (v := _meeting(plans, budget, 0.0))]
        least = min(values, default=math.inf)
        for cutoff in (math.inf, *(share * least for share in cutoffs)):
            rng.shuffle(keys)
            got, flags = {}, {}
            for mode in (True, False, None):
                memo = Memo(problem, options)
                for key in keys:
                    flag = rng.random() < 0.5 if mode is None else mode
                    flags[(key, mode)] = flag
                    with mock.patch.object(inflight_module, "INFLIGHT_ENDS_TIME", flag):
                        cand = by_cand[key][0]
                        item = Bounded(cand, 0.0, audit_round14._terms(memo, cand), REFINED)
                        got[(key, mode)] = _inflight_bounded(memo, budget, item, cutoff=cutoff)
            for key in keys:
                on, off, mixed = got[(key, True)], got[(key, False)], got[(key, None)]
                where = (key, budget.model_dump(exclude_none=True), cutoff, on, off, mixed, flags[(key, None)])
                stats["ends_compared"] += 1
                assert mixed == got[(key, flags[(key, None)])], ("a kept table answers for the other setting",) + where
                if on is not None and off is not None:
                    assert on >= off * (1 - 1e-12), ("the excess lowers the bound",) + where
                    stats["ends_raised"] += on > off * (1 + REL)
                else:
                    stats["ends_none"] += 1
                if cutoff == math.inf and (v := _meeting(by_cand[key][1], budget, 0.0)):
                    stats["ends_below_plans"] += 1
                    assert on is not None and on <= min(v) * (1 + REL), ("above a plan", min(v)) + where


def check_split(problem, options, seed, stats, starts: int = 25):
    """budgetb2's incumbent sources on plans of the space: _split_descent from random v = 1 plans gives a plan of the
    space that fits, priced as estimate prices it, on the same node types stage by stage (so the same rent: the claim
    that a faster plan is a cheaper one), no slower (cheaper in proportion); _split_repaired over a plan's candidate's
    plans under a cost cap a hair (0-1 %) below that plan's cost gives None or a plan that meets the cap and beats
    `beat`; every _end_retyped variant keeps all but the last stage and puts it on a cheaper GPU-hour."""
    from optsearch import solver as solver_module
    from optsearch.candidates import in_search_space as in_space

    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    plans = [(c, p, e) for c, ps in by_cand.values() for p, e in ps if p.virtual_stages == 1 and len(p.stages) > 1]
    if not plans:
        return
    memo = Memo(problem, options)
    for cand, plan, est in rng.sample(plans, min(starts, len(plans))):
        got, got_est = solver_module._split_descent(memo, plan, est)
        stats["split_descents"] += 1
        stats["split_moved"] += got != plan
        assert in_space(problem, got, options) and got_est.fits and got_est == estimate(problem, got), str(got)
        assert [s.node_type for s in got.stages] == [s.node_type for s in plan.stages], (str(plan), str(got))
        assert got_est.usd_per_hour == est.usd_per_hour, (str(plan), str(got))
        assert got_est.training_time_s <= est.training_time_s, (str(plan), str(got))
        assert got_est.cost_usd <= est.cost_usd * (1 + 1e-12), (str(plan), str(got))
        for variant in solver_module._end_retyped(problem, plan):
            stats["split_retyped"] += 1
            assert variant.stages[:-1] == plan.stages[:-1] and variant.stages[-1].node_type != plan.stages[-1].node_type
            old, new = problem.node(plan.stages[-1].node_type), problem.node(variant.stages[-1].node_type)
            assert new.price_usd_per_node_hour / new.gpus_per_node < old.price_usd_per_node_hour / old.gpus_per_node
        budget = Budget(objective="time", max_cost_usd=est.cost_usd * (1 - rng.uniform(0.0, 0.01)))
        beat = est.training_time_s * rng.choice([1.0, 1.5, 3.0])
        cand_plans = [(p, e) for p, e in by_cand[cand.key][1]]
        repaired = solver_module._split_repaired(memo, budget, cand_plans, beat)
        stats["split_repairs"] += 1
        if repaired is not None:
            stats["split_repaired"] += 1
            value, rplan, rest = repaired
            assert not budget_violations(rplan, rest, budget) and value < beat, (str(rplan), value, beat)
            assert in_space(problem, rplan, options) and rest.fits and rest == estimate(problem, rplan), str(rplan)
            assert value == objective_value(rest, "time")


def boundary_kind(tight: bool):
    from test_positional_type_boundary import boundary_instance

    def draw(seed):
        return boundary_instance(seed + (100 if tight else 0), tight)
    return draw


def boundary_wide(seed: int):
    """boundary_instance (roomy on even seeds, memory-tight on odd ones) widened where the floor's argument has
    corners: interleaving (v = 2), cp = 2, a mixture of experts (one kind, every other draw), block recomputation,
    --overlap-grad-reduce (stage 0's reduce floor and the hidden-reduce floor beside the new mark), up to four stages.
    None when brute force would price more than MAX_PLANS plans."""
    from optsearch.baselines.exhaustive import count_plans
    from optsearch.profile import AnalyticProfile
    from optsearch.problem import Problem
    from optsearch.spec import LayerKindSpec
    from test_audit_dist_bounds import MAX_PLANS
    from test_positional_type_boundary import boundary_instance

    made = boundary_instance(seed, seed % 2 == 1)
    if made is None:
        return None
    problem, options = made
    rng = random.Random(7_000 + seed)
    model = problem.model
    if rng.random() < 0.5:
        model = model.model_copy(update={"layer_kinds": [LayerKindSpec(name="layer", num_layers=model.num_layers,
                                                                       num_experts=4, moe_router_topk=2)]})
    job = model.default_job.model_copy(update={"distributed_optimizer": None})
    problem = Problem(model=model, cluster=problem.cluster, job=job, gpus=problem.gpus,
                      profile=AnalyticProfile(model=model, gpus=problem.gpus), overlap_grad_reduce=rng.random() < 0.5)
    options = replace(options, virtual_stages=(1, 2), context_parallel_sizes=(1, 2), micro_batch_sizes=(1,),
                      block_recompute=options.uniform_recompute and rng.random() < 0.5)
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return None
    return problem, options


ROUND18_SOURCES = ("_split_descent", "_split_improved", "_split_repaired", "_end_retyped", "budget_time_lift",
                   "_time_by_ends")


def _with_round18_counts(check):
    """bench/audit_round17's solve / clock check (every plan offered to solver._best_meeting honest; its counters)
    with budgetb2's incumbent sources, budgetbound's lift and timerows2's walk counted where they run and give
    something (a plan that differs from the one it started from, a lift above T0, a finite walk)."""
    from optsearch import inflight as inflight_module
    from optsearch import solver as solver_module

    def run(problem, options, seed, stats):
        patches = []
        for name in ROUND18_SOURCES:
            module = (positional if name == "budget_time_lift" else inflight_module if name == "_time_by_ends"
                      else solver_module)
            real = getattr(module, name)

            def counted(*args, _real=real, _name=name, **kwargs):
                out = _real(*args, **kwargs)
                stats[f"calls_{_name}"] += 1
                if _name == "_split_descent":
                    gave = out[0] != args[1]
                elif _name == "_split_improved":
                    gave = out[1] != args[2][1]
                elif _name == "budget_time_lift":
                    gave = bool((out > args[3] * (1 + 1e-9)).any())
                elif _name == "_time_by_ends":
                    gave = math.isfinite(out)
                else:
                    gave = bool(out)
                stats[f"gave_{_name}"] += gave
                return out
            patches.append(mock.patch.object(module, name, counted))
        for patch in patches:
            patch.start()
        try:
            audit_round17.CHECKS[check](problem, options, seed, stats)
        finally:
            for patch in reversed(patches):
                patch.stop()
    return run


CHECKS = {"boundary": check_boundary, "lift": check_lift, "ends": check_ends, "split": check_split,
          "solve": _with_round18_counts("solve"), "clock": _with_round18_counts("clock"),
          "resume": audit_round13.check_resume}
EXTRA_KINDS = {"boundary": boundary_kind(False), "boundary-tight": boundary_kind(True), "boundary-wide": boundary_wide}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="boundary",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *EXTRA_KINDS])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="boundary")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind in EXTRA_KINDS:
        instance = EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
