"""One grid row at a time, timed on both clocks (issue 14, item 3: the large models' proofs).

    python bench/proof_rows.py --model gpt3-175b --cluster mixed-pool-8k --objective cost --time-limit 10
    python bench/proof_rows.py --model gpt3-175b --cluster mixed-pool-8k --objective cost --gap 0.01 --cpu-clock
    python bench/proof_rows.py ... --profile /tmp/p.out          # cProfile of the solve alone
    python bench/proof_rows.py ... --time-limit 90 --save-plan /tmp/best.json    # the best known plan, kept
    python bench/proof_rows.py ... --time-limit 10 --warm-start /tmp/best.json   # the loop with it from the start

The instance is bench/objective_grid.py's (`edited_problem`, `engine_problem("megatron")`, `space_from_target`),
with the row's deadline (--max-time-s) or cost budget (--max-cost-usd) given explicitly (the grid derives them from
the first two rows). The time limit is the solver's own (no start-up is taken off). With --cpu-clock the solver's
clock (`time.perf_counter`, which the time limit and every share of it read) is replaced by `time.process_time`
for the solve, so that the work done does not depend on the load of a shared machine; CP-SAT's own limits stay on
the wall clock. Prints one JSON record: status, value, gap, CPU and wall seconds of the solve, the solver's stats,
and the load average (`os.getloadavg`) before and after.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=None, help="the solver's limit, seconds (default: none)")
    ap.add_argument("--gap", type=float, default=0.0, help="stop once proven within this fraction")
    ap.add_argument("--cpu-clock", action="store_true", help="the solver's clock on CPU time (see the docstring)")
    ap.add_argument("--solver", default="cpsat")
    ap.add_argument("--profile", default=None, help="write a cProfile of the solve (CPU-time timer) to this file")
    ap.add_argument("--trace", action="store_true", help="print to stderr each new incumbent with its CPU second")
    ap.add_argument("--save-plan", default=None, help="write the answer's plan (Plan.to_dict, JSON) to this file")
    ap.add_argument("--warm-start", default=None, help="a plan file (--save-plan's) given to solve as warm_start")
    args = ap.parse_args()

    from optsearch.cli.options import space_from_target
    from optsearch.plan import plan_from_dict
    from optsearch.edits import edited_problem
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    warm = None
    if args.warm_start:
        with open(args.warm_start) as fh:
            warm = plan_from_dict(json.load(fh), args.warm_start)
    if args.cpu_clock:
        time.perf_counter = time.process_time  # the solver's clock (and its shares) on CPU time
    load_before = os.getloadavg()
    prof = cProfile.Profile(time.process_time) if args.profile else None
    seen = []

    def trace(p) -> None:
        if p.incumbent is not None and (not seen or p.incumbent < seen[-1]):
            seen.append(p.incumbent)
            print(f"{time.process_time() - cpu0:7.2f} s CPU  incumbent {p.incumbent:,.2f}  front {p.bound:,.2f}  "
                  f"{p.candidate.key}", file=sys.stderr)
    cpu0, wall0 = time.process_time(), time.monotonic()
    if prof is not None:
        prof.enable()
    result = solve(problem, budget, solver=args.solver, time_limit_s=args.time_limit, options=options, gap=args.gap,
                   progress=trace if args.trace else None, warm_start=warm)
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    if args.save_plan and result.plan is not None:
        with open(args.save_plan, "w") as fh:
            json.dump(result.plan.to_dict(), fh)
    print(json.dumps({
        "model": args.model, "cluster": args.cluster, "objective": args.objective, "max_time_s": args.max_time_s,
        "max_cost_usd": args.max_cost_usd, "time_limit": args.time_limit, "gap_asked": args.gap,
        "warm_start": args.warm_start,
        "cpu_clock": args.cpu_clock, "status": result.status, "objective_value": result.objective_value,
        "bound": result.bound, "gap": result.gap,
        "training_time_s": result.estimate.training_time_s if result.estimate is not None else None,
        "cost_usd": result.estimate.cost_usd if result.estimate is not None else None,
        "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
        "stats": result.stats, "load_before": load_before, "load_after": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
