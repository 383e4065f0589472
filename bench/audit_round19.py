"""Post-merge audit of round 19 (audit11): cheapq (solver.KEEP_REFINED), budgetlow (inflight.BUDGET_FLOOR_STOP,
bounds.budget_work_lift / solver.BUDGET_WORK_LIFT), budgetinc3 (_deeper_steps, RESHAPE_BOTH, DEEPER_OTHER_END),
supply1t (positional.pair_cover_floor_s / PAIR_COVER) and timepark (inflight.JOINT_SUPPLY, SUPPLY_BY_CHUNKS). See
docs/solver.md, "Round 19 after the merges: the audit". Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round19.py --kind boundary-tight --seeds 0-39 --checks pair,joint
    nice -n 5 python bench/audit_round19.py --kind hypinter-off --seeds 0-19 --checks kept
    nice -n 5 python bench/audit_round19.py --kind tight --seeds 0-19 --checks solve,clock

kinds: bench/audit_round18's (random, offheavy, tight, each also -pipelined; hypinter, hypinter-off, hyptight, moe,
moe1; boundary, boundary-tight, boundary-wide) and boundary-deep (boundary_deep: 6-8 layers, one GPU a node, 1-4
nodes of each type, up to six stages). checks:
  kept   every candidate brute force prices (v > 1, dist = False and gather copies included) under edge budgets
         (none; cost caps, deadlines and rents at plans' exact values and 5 % above; both), asked in ONE random order
         over (candidate, budget) on one memo with KEEP_REFINED (a what-if sweep's memo): each bound equals, bit for
         bit, the bound of a fresh memo without the switch asked once (the first ask's path: DEGREE_FLOORS_FROM's and
         REFINED_TABLES_FROM's one-pp path) and that of a memo without the switch asked in the same order; and its
         _bounded value lies at or below every plan of the candidate that meets the budget (None only where none);
  pair   supply1t's M_pair (pair_cover_floor_s, run with PAIR_COVER_ONLY_WIDER as set and off): at or below the slowest
         stage of every v = 1 plan of the candidate; the positional bound (fresh tables) with PAIR_COVER on at least
         the bound with it off and at or below every plan of the candidate that meets the budget (v > 1 through
         interleaved_positional_bound), under edge budgets, slower_than_s 0 and the median plan's time;
  joint  timepark's JOINT_SUPPLY and SUPPLY_BY_CHUNKS: the in-flight bound (solver._inflight_bounded, a fresh memo
         per setting, cutoff inf and at the candidate's best plan's value): SUPPLY_BY_CHUNKS on equals off bit for bit
         (JOINT off); JOINT_SUPPLY on never rules out a candidate with a plan that meets the budget, lies at or below
         its plans, and is counted where it differs from off (raised / lowered);
  stop   budgetlow's BUDGET_FLOOR_STOP: the in-flight bound on equals off bit for bit (time under cost caps at plans'
         exact costs and 5 % above); and BUDGET_WORK_LIFT (off in the solver) turned on: every cheap row of
         _candidates at or below the candidate's plans that meet the budget, none left out;
  steps  budgetinc3's _deeper_steps called from random v = 1 plans that meet cost caps (time minimized): its plan a
         real plan of the space, meeting the cap, priced as the cost model prices it, never worse than its start;
  solve, clock  bench/audit_round18's (both backends against brute force at plans' exact budgets and 5 % above;
         clocks that jump past the limit; every plan offered to solver._best_meeting honest), with round 19's
         incumbent sources counted (_deeper_steps) and run once more with RESHAPE_BOTH on (off in the solver).
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
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import inflight as inflight_module  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.bounds import interleaving_factor  # noqa: E402
from optsearch.formulation import positional  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import REFINED, Bounded, Memo, _bounded, _inflight_bounded, interleaved_positional_bound  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-9


def round19_budgets(priced, rng) -> list[Budget]:
    """audit_round18.boundary_budgets (none; caps, deadlines, rents at plans' exact values; both) and each cap and
    deadline 5 % above."""
    out = audit_round18.boundary_budgets(priced, rng)
    more = []
    for b in out:
        if b.max_cost_usd is not None or b.max_time_s is not None:
            more.append(b.model_copy(update={
                "max_cost_usd": None if b.max_cost_usd is None else b.max_cost_usd * 1.05,
                "max_time_s": None if b.max_time_s is None else b.max_time_s * 1.05}))
    return out + more


def _meeting(plans, budget, slower=0.0):
    return [objective_value(e, budget.objective) for p, e in plans
            if e.training_time_s > slower and not budget_violations(p, e, budget)]


# ---- kept: KEEP_REFINED -----------------------------------------------------------------------------------------
def check_kept(problem, options, seed, stats):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = round19_budgets(priced, rng)
    asks = [(key, i) for key in by_cand for i in range(len(budgets))]
    rng.shuffle(asks)
    kept = Memo(problem, options)
    with mock.patch.object(solver_module, "KEEP_REFINED", True):
        got = {(key, i): kept.refined_bound(audit_round14._terms(kept, by_cand[key][0]), by_cand[key][0], budgets[i])
               for key, i in asks}
    with mock.patch.object(solver_module, "KEEP_REFINED", False):
        ordered = Memo(problem, options)
        same_order = {(key, i): ordered.refined_bound(audit_round14._terms(ordered, by_cand[key][0]),
                                                      by_cand[key][0], budgets[i]) for key, i in asks}
        for key, i in asks:
            cand, plans = by_cand[key]
            fresh = Memo(problem, options)
            terms = audit_round14._terms(fresh, cand)
            first = fresh.refined_bound(terms, cand, budgets[i])
            have = got[(key, i)]
            where = (key, budgets[i].model_dump(exclude_none=True), str(have), str(first), str(same_order[(key, i)]))
            stats["kept_asks"] += 1
            stats["kept_interleaved"] += cand.v > 1
            stats["kept_off_dist"] += cand.dist is not None
            stats["kept_gather"] += cand.gather
            assert have == same_order[(key, i)], ("kept differs from the same order without it",) + where
            stats["kept_first_ask_differs"] += have != first  # the base's own first-ask path (both valid)
            for value, label in ((have, "kept"), (first, "first ask")):
                values = _meeting(plans, budgets[i])
                item = _bounded(problem, budgets[i], terms, cand, True, value, 0.0) if value.feasible else None
                if values:
                    stats["kept_below_plans"] += label == "kept"
                    assert item is not None, (f"{label}: rules out a candidate with a plan", min(values)) + where
                    assert item.lower_bound <= min(values) * (1 + REL), (f"{label}: above a plan", min(values)) + where
    stats["kept_stored"] += len(kept.kept_refined)
    # the solver's own lists (the gather copies, Candidate.gather, with their own terms, are only there): each listed
    # item's bound on the kept memo (its asks shuffled over the budgets) equals a fresh memo's first ask
    # (and on the problem with --overlap-param-gather searched at pp > 1, the optimizer open: the gather copies)
    job = problem.job.model_copy(update={"distributed_optimizer": None})
    for prob in (problem, replace(problem, overlap_grad_reduce=True, overlap_param_gather=True,
                                  param_gather_pipelined=True, job=job)):
        _kept_listed(prob, options, budgets, rng, stats)


def _kept_listed(problem, options, budgets, rng, stats):
    kept = Memo(problem, options)
    listed = []
    for i, budget in enumerate(budgets):
        items, _ = solver_module._candidates(Memo(problem, options), budget, 0.0)
        listed += [(item, i) for item in items]
    rng.shuffle(listed)
    with mock.patch.object(solver_module, "KEEP_REFINED", True):
        got = [kept.refined_bound(item.terms, item.cand, budgets[i]) for item, i in listed]
    with mock.patch.object(solver_module, "KEEP_REFINED", False):
        for (item, i), have in zip(listed, got):
            want = Memo(problem, options).refined_bound(item.terms, item.cand, budgets[i])
            stats["kept_listed"] += 1
            stats["kept_listed_gather"] += item.cand.gather
            stats["kept_listed_off"] += item.cand.dist is not None
            stats["kept_listed_interleaved"] += item.cand.v > 1
            assert have == want, ("a listed item's kept bound differs", item.cand.key,
                                  budgets[i].model_dump(exclude_none=True), str(have), str(want))


# ---- pair: PAIR_COVER -------------------------------------------------------------------------------------------
def _fresh(sk, **flags):
    sk.positional = None
    with mock.patch.multiple(positional, **flags):
        positional.tables(sk)


def check_pair(problem, options, seed, stats, budgets_kept: int | None = None, gate_on: bool | None = None):
    if not hasattr(positional, "PAIR_COVER"):
        stats["pair_absent"] += 1
        return
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    budgets = round19_budgets(priced, rng)[:budgets_kept]
    times = sorted(e.training_time_s for _, _, e in priced)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    memo = Memo(problem, options)
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            stats["pair_kinds_skipped"] += 1
            continue
        if cand.v == 1:  # the floor itself against every plan of the candidate
            for wider, states in ((True, positional.PAIR_COVER_STATES), (False, positional.PAIR_COVER_STATES),
                                  (False, rng.choice([1, 2, 3]))):  # the wide index cut short too
                _fresh(sibling, PAIR_COVER=False)
                with mock.patch.multiple(positional, PAIR_COVER_ONLY_WIDER=wider, PAIR_COVER_STATES=states):
                    floor = positional.pair_cover_floor_s(sibling, sibling.positional.blocks)
                stats["pair_floors"] += 1
                stats["pair_finite"] += math.isfinite(floor)
                stats["pair_inf"] += floor == math.inf
                for plan, est in plans:
                    slowest = max(s.time_s for s in est.stages)
                    stats["pair_below_plans"] += 1
                    assert floor <= slowest * (1 + REL), ("M_pair above a plan's slowest stage", key, wider, floor,
                                                          slowest, str(plan))
                    stats["pair_tight"] += math.isfinite(floor) and slowest <= floor * 1.01
        factor = 1.0 if cand.v == 1 else interleaving_factor(audit_round14._terms(memo, cand).m, cand.pp, cand.v)
        got = {}
        for on in (True, False):
            gate = (rng.random() < 0.5 if gate_on is None else gate_on) if on else True
            _fresh(sibling, PAIR_COVER=on, PAIR_COVER_ONLY_WIDER=gate)
            for i, budget in enumerate(budgets):
                for slower in (0.0, median) if cand.v == 1 else (0.0,):
                    if cand.v == 1:
                        got[(on, i, slower)] = positional.positional_bound(sibling, budget,
                                                                           slower_than_s=slower).bound
                    else:
                        got[(on, i, slower)] = interleaved_positional_bound(sibling, budget, factor)
        sibling.positional = None
        for i, budget in enumerate(budgets):
            for slower in (0.0, median) if cand.v == 1 else (0.0,):
                have, want = got[(True, i, slower)], got[(False, i, slower)]
                values = _meeting(plans, budget, slower)
                where = (key, budget.model_dump(exclude_none=True), slower, have, want, min(values, default=None))
                stats["pair_bounds"] += 1
                assert have >= want * (1 - 1e-12), ("PAIR_COVER lowers the bound",) + where
                stats["pair_raised"] += have > want * (1 + REL)
                if values:
                    stats["pair_bound_below_plans"] += 1
                    assert have <= min(values) * (1 + REL), ("above a plan",) + where
                    stats["pair_raised_at_plans"] += have > want * (1 + REL)


# ---- joint / stop: in-flight switches ---------------------------------------------------------------------------
def _inflight_values(problem, options, by_cand, budget, flags, cutoffs):
    out = {}
    with mock.patch.multiple(inflight_module, **flags):
        memo = Memo(problem, options)
        for key, (cand, plans) in by_cand.items():
            item = Bounded(cand, 0.0, audit_round14._terms(memo, cand), REFINED)
            for c in cutoffs.get(key, (math.inf,)):
                out[(key, c)] = _inflight_bounded(memo, budget, item, 0.0, c)
    return out


def _inflight_check(problem, options, seed, stats, label, budgets_of, same, differ):
    """same: pairs of flag sets that must give the same bits; differ: (on, off) where on must stay valid."""
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in budgets_of(priced, rng):
        cutoffs = {}
        for key, (cand, plans) in by_cand.items():
            values = _meeting(plans, budget)
            cutoffs[key] = (math.inf,) + ((min(values),) if values else ())
        for a, b in same:
            va = _inflight_values(problem, options, by_cand, budget, a, cutoffs)
            vb = _inflight_values(problem, options, by_cand, budget, b, cutoffs)
            for k in va:
                stats[f"{label}_same_compared"] += 1
                assert va[k] == vb[k], ("not the same bits", label, k, budget.model_dump(exclude_none=True),
                                        va[k], vb[k], a, b)
        for on, off in differ:
            von = _inflight_values(problem, options, by_cand, budget, on, cutoffs)
            voff = _inflight_values(problem, options, by_cand, budget, off, cutoffs)
            for (key, c), have in von.items():
                want = voff[(key, c)]
                stats[f"{label}_compared"] += 1
                stats[f"{label}_ruled_out_more"] += have is None and want is not None
                if have is not None and want is not None:
                    stats[f"{label}_raised"] += have > want * (1 + REL)
                    stats[f"{label}_lowered"] += have < want * (1 - REL)
                values = _meeting(by_cand[key][1], budget)
                if values:
                    where = (label, key, c, budget.model_dump(exclude_none=True), have, want, min(values))
                    stats[f"{label}_below_plans"] += 1
                    assert have is not None, ("rules out a candidate with a plan",) + where
                    assert have <= min(values) * (1 + REL), ("above a plan",) + where


def check_joint(problem, options, seed, stats):
    if not hasattr(inflight_module, "JOINT_SUPPLY"):
        stats["joint_absent"] += 1
        return
    _inflight_check(problem, options, seed, stats, "joint", round19_budgets,
                    same=[(dict(JOINT_SUPPLY=False, SUPPLY_BY_CHUNKS=True), dict(JOINT_SUPPLY=False,
                                                                                 SUPPLY_BY_CHUNKS=False))],
                    differ=[(dict(JOINT_SUPPLY=True), dict(JOINT_SUPPLY=False)),
                            (dict(JOINT_SUPPLY=True, JOINT_ROUNDS=1, JOINT_FROM_ZERO=True), dict(JOINT_SUPPLY=False))])


def _cost_caps(priced, rng):
    out = [b for b in round19_budgets(priced, rng) if b.max_cost_usd is not None and b.objective == "time"]
    return out


def check_stop(problem, options, seed, stats):
    if not hasattr(inflight_module, "BUDGET_FLOOR_STOP"):
        stats["stop_absent"] += 1
        return
    _inflight_check(problem, options, seed, stats, "stop", _cost_caps,
                    same=[(dict(BUDGET_FLOOR_STOP=True), dict(BUDGET_FLOOR_STOP=False))], differ=[])
    # BUDGET_WORK_LIFT (off in the solver): the cheap rows it lifts stay below the plans that meet the budget
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    for budget in _cost_caps(priced, rng):
        rows = {}
        for flag in (True, False):
            with mock.patch.object(solver_module, "BUDGET_WORK_LIFT", flag):
                listed, _ = solver_module._candidates(Memo(problem, options), budget, 0.0)
            rows[flag] = {item.cand.key: item.lower_bound for item in listed}
        for key, (cand, plans) in by_cand.items():
            values = _meeting(plans, budget)
            have, want = rows[True].get(key), rows[False].get(key)
            stats["lift_compared"] += 1
            if have is not None and want is not None:
                stats["lift_raised"] += have > want * (1 + REL)
                assert have >= want * (1 - 1e-12), ("the lift lowers a row", key, have, want)
            stats["lift_ruled_out"] += have is None and want is not None
            if values and want is None:  # the list leaves it out with the lift off as well (dominated settings)
                stats["lift_base_absent"] += 1
            elif values:
                where = (key, budget.model_dump(exclude_none=True), have, want, min(values))
                stats["lift_below_plans"] += 1
                assert have is not None, ("the lift rules out a candidate with a plan",) + where
                assert have <= min(values) * (1 + REL), ("the lifted row above a plan",) + where


# ---- steps: budgetinc3's _deeper_steps from random starts ------------------------------------------------------
def check_steps(problem, options, seed, stats, starts: int = 6):
    """Time under cost caps (plans' exact costs and 5 % above): _deeper_steps from random v = 1 plans of the space
    that meet the cap (DEEPER_STEPS_DP and SPLIT_REPAIR as set): its plan is a real plan of the space (in_search_space,
    fits, priced as estimate prices it), meets the cap, its value the objective's, never worse than the start, and
    never below brute force's optimum."""
    rng = random.Random(seed)
    priced = [(c, p, e) for c, p, e in audit_round13.space_plans(problem, options)]
    for budget in _cost_caps(priced, rng):
        memo = Memo(problem, options)
        bounded, _ = solver_module._candidates(memo, budget, 0.0)
        meeting = [(p, e) for _, p, e in priced if p.virtual_stages == 1 and not budget_violations(p, e, budget)]
        if not meeting:
            continue
        best = min(objective_value(e, "time") for _, e in meeting)
        for plan, est in rng.sample(meeting, min(starts, len(meeting))):
            start = (objective_value(est, "time"), plan, est)
            got = solver_module._deeper_steps(memo, budget, bounded, start, None)
            stats["steps_calls"] += 1
            stats["steps_gave"] += got[0] < start[0]
            p, e = got[1], got[2]
            assert solver_module.in_search_space(problem, p, options) and e.fits and e == solver_module.estimate(
                problem, p), ("not a plan of the space", str(p))
            assert not budget_violations(p, e, budget) and got[0] == objective_value(e, "time"), str(p)
            assert got[0] <= start[0] and got[0] >= best * (1 - REL), (got[0], start[0], best)


# ---- solve / clock ----------------------------------------------------------------------------------------------
ROUND19_SOURCES = ("_deeper_steps", "_deeper_interleaved", "_split_repaired")


def _with_round19_counts(check, reshape_both: bool):
    def run(problem, options, seed, stats):
        patches = [mock.patch.object(solver_module, "RESHAPE_BOTH", reshape_both)] if hasattr(
            solver_module, "RESHAPE_BOTH") else []
        for name in ROUND19_SOURCES:
            real = getattr(solver_module, name, None)
            if real is None:
                continue

            def counted(*args, _real=real, _name=name, **kwargs):
                out = _real(*args, **kwargs)
                stats[f"calls_{_name}"] += 1
                if _name in ("_deeper_steps", "_deeper_interleaved"):
                    start = args[3]
                    stats[f"gave_{_name}"] += out[0] < start[0]
                    plan, est = out[1], out[2]
                    assert solver_module.in_search_space(problem, plan, options) and est.fits and \
                        est == solver_module.estimate(problem, plan) and out[0] == objective_value(
                            est, args[1].objective) and not budget_violations(plan, est, args[1]), (_name, str(plan))
                else:
                    stats[f"gave_{_name}"] += out is not None
                return out
            patches.append(mock.patch.object(solver_module, name, counted))
        for patch in patches:
            patch.start()
        try:
            audit_round18.CHECKS[check](problem, options, seed, stats)
        finally:
            for patch in reversed(patches):
                patch.stop()
    return run


def boundary_deep(seed: int):
    """boundary_instance's draw (roomy on even seeds, memory-tight on odd ones) with 6-8 layers, one GPU a node and
    pipelines of up to six stages (more boundaries for pair_cover_floor_s's pairs and the supply of two or three
    types); None when brute force would price more than MAX_PLANS plans."""
    from optsearch.baselines.exhaustive import count_plans
    from optsearch.problem import Problem
    from optsearch.profile import AnalyticProfile
    from test_audit_dist_bounds import MAX_PLANS
    from test_positional_type_boundary import boundary_instance

    made = boundary_instance(seed, seed % 2 == 1)
    if made is None:
        return None
    problem, options = made
    rng = random.Random(9_000 + seed)
    model = problem.model.model_copy(update={"num_layers": rng.randint(6, 8)})
    cluster = problem.cluster.model_copy(update={"node_types": [
        t.model_copy(update={"gpus_per_node": 1, "num_nodes_available": rng.randint(1, 4)})
        for t in problem.cluster.node_types]})
    problem = Problem(model=model, cluster=cluster, job=problem.job, gpus=problem.gpus,
                      profile=AnalyticProfile(model=model, gpus=problem.gpus))
    options = replace(options, max_stages=6, micro_batch_sizes=(1,))
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return None
    return problem, options


CHECKS = {"kept": check_kept, "pair": check_pair, "joint": check_joint, "stop": check_stop, "steps": check_steps,
          "solve": _with_round19_counts("solve", False), "clock": _with_round19_counts("clock", False),
          "solve-both": _with_round19_counts("solve", True)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="boundary",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "boundary-deep"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="kept")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "boundary-deep":
        instance = boundary_deep
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
