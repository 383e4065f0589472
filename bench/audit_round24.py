"""Post-merge audit of round 24 (audit16): loopB's DEPTH_PLANS (solver._depth_plans) and DEADLINE_FILL_SPLIT
(solver._deadline_fill_plans through _split_improved), incumbents for cost under a deadline. See docs/solver.md,
"Round 24 after the merges: the audit (audit16, 2026-11-25)". Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round24.py --kind supply --seeds 0-59 --checks depth,fill
    nice -n 5 python bench/audit_round24.py --kind random --seeds 0-79 --checks solve-ab
    nice -n 5 python bench/audit_round24.py --kind random --seeds 0-79 --checks solve-mut

kinds: supply (tests/test_audit_round23.supply_draw: 1-3 types, up to 6 stages, roomy on even seeds, memory-tight on
odd ones, experts on 3 mod 4, v 1-2 on some), inter (supply_draw(seed, interleaved=True)), boundary / boundary-tight
(test_positional_type_boundary.boundary_instance: NICs 10-3,200 Gbit/s, tight supply; tight: 2.5-8 GiB GPUs), random
(test_audit_dist_bounds.random_instance: 1-3 stages, small GPUs, long sequences, experts, cp, v 2 on some),
offheavy (test_audit_dist_bounds.off_heavy_instance).
checks:
  depth      every listed v = 1 candidate's _depth_plans under cost<=D at 1.00 / 1.01 / 1.02 / 1.05 x three drawn
             candidates' fastest quick plans' times: in the space, priced, within D, another depth within 2 of the
             same degrees; counts the unchecked mutant's plans above D on the same asks;
  fill       _deadline_fill_plans from up to 12 candidates' best quick plans under those deadlines, DEADLINE_FILL_SPLIT
             on and off: in the space, priced, within D, on at or below off;
  solve-ab   both backends, no limit, cost<=D at 1.00 / 1.01 / 1.05 x a drawn plan's time and at 1.5 / 3 x the least
             time (loopB's), cost, time, time<=B: DEPTH_PLANS, DEADLINE_FILL_SPLIT, COST_PAIR_SUM and
             ENDS_CLASS_LIVE_SUMS all on, all off, each off alone: brute force's answer, every plan re-priced;
             _depth_plans' calls counted;
  solve-mut  CBC with _depth_plans replaced by the unchecked mutant at the same cost<=D budgets: counts the mutant's
             calls, its plans above D, and the wrong answers (status, value or a plan above D).
Prints one line per failure and a summary (counts and CPU seconds)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402

import optsearch.solver as solver_module  # noqa: E402
from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402
from test_audit_dist_bounds import MAX_PLANS, random_instance, space_plans  # noqa: E402
from test_audit_round11 import assert_equals_truth  # noqa: E402
from test_audit_round23 import supply_draw  # noqa: E402
from test_audit_round24 import (cost_walk, depth_plans_unchecked, depth_walk, drawn_budgets,  # noqa: E402
                                fill_walk, live_walk, solve_ab)
from test_audit_dist_bounds import off_heavy_instance  # noqa: E402
from test_positional_type_boundary import boundary_instance  # noqa: E402


def loopb_budgets(problem, options, seed):
    """drawn_budgets, and cost under 1.5 and 3 x the least time (test_depth_plans' budgets)."""
    out = drawn_budgets(problem, options, seed)
    times = [e.training_time_s for _, _, e in space_plans(problem, options)]
    if times:
        out += [Budget(objective="cost", max_time_s=f * min(times)) for f in (1.5, 3.0)]
    return out


def check_solve_ab(problem, options, seed, stats):
    solve_ab(problem, options, seed, stats, loopb_budgets(problem, options, seed), alone=True)


def check_solve_mut(problem, options, seed, stats):
    def mutant(memo, budget, bounded, cand):
        out = depth_plans_unchecked(memo, budget, bounded, cand)
        stats["mut_calls"] += 1
        stats["mut_above_d"] += out is not None and out[2].training_time_s > budget.max_time_s
        return out
    for budget in loopb_budgets(problem, options, seed):
        if budget.max_time_s is None:
            continue
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(solver_module, "_depth_plans", mutant)
            try:
                got = solver_module.solve(problem, budget, solver="cbc", options=options)
            except Exception as exc:  # a consistency check raising is a catch too
                stats["mut_raised"] += 1
                print("mut raised", seed, budget.max_time_s, type(exc).__name__, str(exc)[:120], flush=True)
                continue
        stats["mut_solves"] += 1
        try:
            assert_equals_truth(problem, options, budget, got, truth, None)
        except AssertionError:
            stats["mut_wrong"] += 1
            print("mut wrong", seed, budget.max_time_s, truth.status, truth.objective_value, got.status,
                  got.objective_value, flush=True)


CHECKS = {"depth": lambda p, o, s, st: depth_walk(p, o, s, st), "fill": lambda p, o, s, st: fill_walk(p, o, s, st),
          "solve-ab": check_solve_ab, "solve-mut": check_solve_mut, "cost": lambda p, o, s, st: cost_walk(p, o, s, st),
          "live": lambda p, o, s, st: live_walk(p, o, s, st)}
KINDS = {"supply": supply_draw, "random": random_instance, "offheavy": off_heavy_instance,
         "boundary": boundary_instance,
         "boundary-tight": lambda seed: boundary_instance(seed, tight=True),
         "inter": lambda seed: supply_draw(seed, interleaved=True)}


def _seeds(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="supply", choices=sorted(KINDS))
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="depth,fill")
    ap.add_argument("--max-seconds", type=float, default=1e9, help="CPU seconds; stops between seeds")
    args = ap.parse_args()
    stats, failures, start = Counter(), 0, time.process_time()
    for seed in _seeds(args.seeds):
        if time.process_time() - start > args.max_seconds:
            print("stopped at seed", seed, flush=True)
            break
        made = KINDS[args.kind](seed)
        if made is None:
            continue
        stats["instances"] += 1
        for check in args.checks.split(","):
            try:
                CHECKS[check](*made, seed, stats)
            except AssertionError as exc:
                failures += 1
                print("FAIL", check, seed, str(exc)[:400], flush=True)
    print(args.kind, args.checks, "failures", failures, dict(sorted(stats.items())),
          f"cpu {time.process_time() - start:.1f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
