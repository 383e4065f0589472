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
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_audit_dist_bounds import check_bounds, off_heavy_instance, random_instance, small  # noqa: E402
from test_audit_round10 import PATHS, check_solve, solve_budgets, tight_instance, with_knobs  # noqa: E402,F401

KINDS = {"random": random_instance, "offheavy": off_heavy_instance, "tight": tight_instance}
KINDS.update({f"{name}-knobs": with_knobs(made) for name, made in list(KINDS.items())})  # paramgather's knobs on


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
