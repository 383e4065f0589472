"""Post-merge audit of round 10's seams (timeb, lazyoff, costside; docs/solver.md "Round 10 after the merge: the
seams, audited"). Not part of the test suite: a seeded sweep, run on one core, e.g.

    nice -n 10 python bench/audit_round10.py --kind random --seeds 0-99 --checks solve,bounds,skip,positional

kinds: random (tests/test_audit_dist_bounds.random_instance), offheavy (off_heavy_instance), tight (random_instance
with 2.5-6 GiB GPUs and 4-8k sequences: memory-tight, most plans need recomputation or do not fit).
checks:
  solve       both backends against brute force (both optimizer settings in the space) on edge budgets, each on the
              solver's paths: default (no limit), a time limit (seed search, descent, early seeds, climb shares),
              lazy off joining in the loop at once (no seeds, OFF_WAIT_S 0), and with the climb's skip off
              (CLIMB_REFINED False: the same value);
  bounds      check_bounds (every bound the loop and the climb's skip read, at the candidate's own setting);
  skip        tests/test_climb_refined.check_skip (the climb's refined / in-flight skip against brute force);
  positional  tests/test_positional_first_reduce._least_ratio (timeb's floors against every v = 1 plan).
Prints one JSON line per instance and a summary."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optsearch import solver as solver_module  # noqa: E402
from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402

from test_audit_dist_bounds import (  # noqa: E402
    MAX_PLANS, check_bounds, check_plan_honest, off_heavy_instance, random_instance, small, space_plans,
)


def tight_instance(seed: int):
    """random_instance with small GPUs and long sequences (memory-tight: recomputation and off/on memory matter)."""
    problem, options = random_instance(seed)
    rng = random.Random(20_000 + seed)
    gpus = [g.model_copy(update={"memory_gib": rng.choice([2.5, 3.0, 4.0, 6.0])}) for g in problem.cluster.gpus]
    model = problem.model.model_copy(update={"seq_length": rng.choice([4096, 8192])})
    from optsearch.problem import Problem, with_flash_attention
    from optsearch.profile import AnalyticProfile

    cluster = problem.cluster.model_copy(update={"gpus": gpus})
    by_name = {g.name: g for g in gpus}
    out = Problem(model=model, cluster=cluster, job=problem.job, gpus=by_name,
                  profile=AnalyticProfile(model=model, gpus=by_name), overlap_grad_reduce=True)
    if problem.flash_attention:
        out = with_flash_attention(out, True)
    return out, options


KINDS = {"random": random_instance, "offheavy": off_heavy_instance, "tight": tight_instance}


def solve_budgets(priced: list, rng: random.Random) -> list[Budget]:
    """Edge budgets: none; B at the fastest plan's cost, at the cheapest's cost and just below it (infeasible); D at
    the cheapest plan's time, at the fastest's and just below it; an off plan's exact time and cost (where one
    exists); a random plan's rent and GPU count."""
    out = [Budget(objective="cost"), Budget(objective="time")]
    if not priced:
        return out
    ests = [e for _, _, e in priced]
    fastest = min(ests, key=lambda e: e.training_time_s)
    cheapest = min(ests, key=lambda e: e.cost_usd)
    out += [Budget(objective="time", max_cost_usd=fastest.cost_usd),
            Budget(objective="time", max_cost_usd=cheapest.cost_usd),
            Budget(objective="time", max_cost_usd=cheapest.cost_usd * (1 - 1e-4)),
            Budget(objective="cost", max_time_s=cheapest.training_time_s),
            Budget(objective="cost", max_time_s=fastest.training_time_s),
            Budget(objective="cost", max_time_s=fastest.training_time_s * (1 - 1e-4)),
            # within BUDGET_REL (1e-6) below a plan's value: brute force counts the plan as meeting it
            Budget(objective="time", max_cost_usd=cheapest.cost_usd * (1 - 5e-7)),
            Budget(objective="cost", max_time_s=fastest.training_time_s * (1 - 5e-7))]
    off = [e for _, p, e in priced if not p.distributed_optimizer]
    if off:
        pick = rng.choice(off)
        out += [Budget(objective="time", max_cost_usd=pick.cost_usd),
                Budget(objective="cost", max_time_s=pick.training_time_s)]
    pick = rng.choice(priced)
    out += [Budget(objective=rng.choice(["cost", "time"]), max_usd_per_hour=pick[2].usd_per_hour),
            Budget(objective=rng.choice(["cost", "time"]), max_gpus=pick[1].num_gpus)]
    return out


PATHS = {
    "default": ({}, None),
    "limit": ({}, 60.0),
    "join-at-once": ({"OFF_WAIT_S": 0.0, "QUICK_SEEDS": 0}, None),
    "no-skip": ({"CLIMB_REFINED": False}, 60.0),
}


def check_solve(problem, options, seed: int, paths=tuple(PATHS), solvers=("cbc", "cpsat")) -> dict:
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    stats = {"plans": len(priced), "budgets": 0, "solves": 0, "infeasible": 0, "off_optima": 0, "cpu_s": 0.0}
    began = time.process_time()
    for budget in solve_budgets(priced, rng):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        stats["budgets"] += 1
        stats["infeasible"] += truth.status == "infeasible"
        stats["off_optima"] += truth.status == "optimal" and truth.plan.distributed_optimizer is False
        for path in paths:
            patches, limit = PATHS[path]
            for name in solvers:
                with mock.patch.multiple(solver_module, **patches) if patches else _null():
                    got = solve(problem, budget, solver=name, options=options, time_limit_s=limit)
                stats["solves"] += 1
                where = (path, name, budget, truth.status, truth.objective_value, got.status, got.message)
                if truth.status == "infeasible":
                    assert got.status == "infeasible", where
                    continue
                assert truth.status == "optimal" and got.status == "optimal", where
                check_plan_honest(problem, options, budget, got.plan, got.objective_value)
                assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6), where
    stats["cpu_s"] = round(time.process_time() - began, 2)
    return stats


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def solve(*args, **kwargs):
    return solver_module.solve(*args, **kwargs)


def check_skip_all(problem, options, seed):
    from test_climb_refined import check_skip

    return check_skip(problem, options, seed)


def check_positional(problem, options, seed):
    from test_positional_first_reduce import _least_ratio

    least, raised = _least_ratio(problem, options)
    assert least >= 1 - 1e-9, least
    return {"least": least, "raised": raised}


CHECKS = {"solve": check_solve, "bounds": check_bounds, "skip": check_skip_all, "positional": check_positional}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=list(KINDS))
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="solve")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    checks = args.checks.split(",")
    paths = tuple(args.paths.split(","))
    totals: dict = {}
    failures = []
    start = time.process_time()
    for seed in seeds:
        if time.process_time() - start > args.max_seconds:
            break
        problem, options = KINDS[args.kind](seed)
        if not small(problem, options):
            continue
        row = {"seed": seed}
        for check in checks:
            try:
                if check == "solve":
                    got = check_solve(problem, options, seed, paths)
                else:
                    got = CHECKS[check](problem, options, seed)
                row[check] = got if isinstance(got, (dict, int)) else str(got)
                if isinstance(got, dict):
                    for k, val in got.items():
                        if isinstance(val, (int, float)) and not isinstance(val, bool):
                            key = f"{check}.{k}"
                            if k.startswith("least"):
                                totals[key] = min(totals.get(key, math.inf), val)
                            else:
                                totals[key] = totals.get(key, 0) + val
            except AssertionError as exc:
                row[check] = "FAIL"
                failures.append((seed, check, repr(exc)[:2000]))
                traceback.print_exc()
        totals["instances"] = totals.get("instances", 0) + 1
        print(json.dumps(row, default=str), flush=True)
    print(json.dumps({"kind": args.kind, "seeds": args.seeds, "checks": checks, "paths": paths, "totals": totals,
                      "failures": failures, "cpu_s": time.process_time() - start}, default=str), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
