"""Post-merge audit of round 11 (audit3; docs/benchmarks.md "Round 11: post-merge audit (audit3)"). Not part of the
test suite: a seeded sweep, run on one core, e.g.

    nice -n 5 python bench/audit_round11.py --kind random-pipelined --seeds 0-99 --checks gain,copies,positional

kinds: random, offheavy, tight (bench/audit_round10.py's), each also "-pipelined" (paramgather's knobs on and
Problem.param_gather_pipelined: the gather copies at pp > 1); "hyptight" draws test_solver_memory.tight_instances
(memory-tight, half of them with two layer kinds, T5-like) through hypothesis, --seeds giving how many examples.
checks (tests/test_audit_round11.py, test_positional_first_reduce.py, test_positional_walk_floor.py):
  gain        param_gather_chain_gain_s (pp = 2, as the search uses it) >= off - on on every pp > 1 pair;
  copies      every bound of a gather copy below every plan of the copy (cheap, refined, in-flight, positional);
  nocopies    with the opt-in off no copy is built and brute force prices no pp > 1 plan with the flag;
  positional  the positional bound (timepos's walk floor lead_s) below every v = 1 plan (_least_ratio), and where
              the overlap is on, the walk floor below every mark's value and the bound every mark's least (_check);
  solve       test_audit_round10.check_solve (both backends against brute force, edge budgets) on --paths;
  edge        check_edge: both backends at a plan's exact time / cost, / (1 + BUDGET_REL) and x (1 - 1e-6);
  incumbents  check_incumbents: the moved sequences, the climb (dp filled), the part's seeds and descent hand back
              honest plans (priced, in the space, fitting, within the budget where taken), and solve equals brute
              force with no limit, 60 s and 0.5 s. --patch NAME=VALUE sets solver module constants (e.g.
              QUICK_SEEDS=0, to reach the descent).
Prints one JSON line per instance and a summary; a check's exception other than an assertion is a failure too."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round10 import check_solve  # noqa: E402
from test_audit_round11 import (  # noqa: E402
    KINDS, check_copy_bounds, check_default_has_no_copies, check_edge, check_gain, check_incumbents,
)


def check_positional(problem, options, seed):
    from test_positional_first_reduce import _least_ratio

    least, raised = _least_ratio(problem, options)
    assert least >= 1 - 1e-9, least
    out = {"least": least, "raised": raised}
    if problem.overlap_grad_reduce:
        from test_positional_walk_floor import _check

        stopped, walk_raised = _check(problem, options)
        out.update(stopped=stopped, walk_raised=walk_raised)
    return out


def check_nocopies(problem, options, seed):
    return {"pp_above_1_plans": check_default_has_no_copies(problem, options)}


CHECKS = {"gain": lambda p, o, s: check_gain(p, o), "copies": lambda p, o, s: check_copy_bounds(p, o),
          "nocopies": check_nocopies, "positional": check_positional, "edge": check_edge,
          "incumbents": lambda p, o, s: check_incumbents(p, o, s, limits=(None, 60.0, 0.5))}


def hyptight_cases(n: int):
    """n memory-tight instances of test_solver_memory.tight_instances (derandomized), the overlap on and the
    optimizer open, uniform + block recomputation, cp in {1, 2} (as test_positional_first_reduce's)."""
    from hypothesis import HealthCheck, given, settings

    from optsearch.baselines.exhaustive import count_plans
    from optsearch.spec.budget import Budget
    from test_audit_dist_bounds import MAX_PLANS
    from test_solver_memory import tight_instances

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(tight_instances())
    def draw(case):
        problem, options, _, _, _ = case
        job = problem.job.model_copy(update={"distributed_optimizer": None})
        problem = replace(problem, overlap_grad_reduce=True, job=job)
        options = replace(options, uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1, 2))
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            out.append((problem, options))

    draw()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random-pipelined", choices=[*KINDS, "hyptight"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="gain,copies")
    ap.add_argument("--paths", default="default")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    ap.add_argument("--patch", action="append", default=[])
    args = ap.parse_args()
    from optsearch import solver as solver_module

    for item in args.patch:
        name, _, value = item.partition("=")
        setattr(solver_module, name, type(getattr(solver_module, name))(eval(value)))
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    checks = args.checks.split(",")
    paths = tuple(args.paths.split(","))
    if args.kind == "hyptight":
        cases = list(enumerate(hyptight_cases(len(seeds))))
    else:
        cases = ((seed, None) for seed in seeds)
    totals: dict = {}
    failures = []
    start = time.process_time()
    for seed, case in cases:
        if time.process_time() - start > args.max_seconds:
            break
        problem, options = case if case is not None else KINDS[args.kind](seed)
        if not small(problem, options):
            continue
        row = {"seed": seed, "kinds": len(problem.model.kinds)}
        for check in checks:
            try:
                got = (check_solve(problem, options, seed, paths) if check == "solve"
                       else CHECKS[check](problem, options, seed))
                row[check] = got
                for k, val in got.items():
                    if isinstance(val, (int, float)) and not isinstance(val, bool):
                        key = f"{check}.{k}"
                        if k.startswith("least"):
                            totals[key] = min(totals.get(key, math.inf), val)
                        else:
                            totals[key] = totals.get(key, 0) + val
            except Exception as exc:  # an assertion, or the solver's own ConsistencyError
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
