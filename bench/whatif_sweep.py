"""What a sweep saves: time-budget sweeps on FASOP's cluster (GPT-2 XL, fasop-a100-a10, analytic profile, FASOP's
space) solved by whatif.sweep (re-use across points: least time once, looser optima, warm starts, and for cost the
windows above each proven tighter deadline) against the same points solved independently.

    python bench/whatif_sweep.py [--points 20] [--runs 3] [--ranges 20-60,23-36,2-30] [--time-limit S] [--json F]

For every range (in days) and run it prints the sweep's time and solver calls, and the time of the same points
solved one by one with `solve` (each with a fresh memo, as separate runs of `optsearch solve` would be); "+ reasons"
adds what `optsearch solve` also does for an infeasible point: explain_infeasible, which solves for the fastest plan
(the sweep reports the same reason). Times are CPU seconds of this process (one CP-SAT worker runs in it), which
other load on the machine disturbs less than wall time; wall time is printed too. Every point's answer is checked
to be the same both ways.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from optsearch import whatif
from optsearch.candidates import SpaceOptions
from optsearch.problem import build_problem
from optsearch.solver import explain_infeasible, solve
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_DAY

OPTIONS = SpaceOptions(max_stages=8, micro_batch_sizes=(1, 2, 4))  # FASOP's search space


class Clock:
    def __enter__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall


def run(problem, lo_d: float, hi_d: float, points: int, time_limit: float | None) -> dict:
    values = tuple(SECONDS_PER_DAY * (lo_d + (hi_d - lo_d) * i / (points - 1)) for i in range(points))
    spec = whatif.Sweep(limit="max_time_s", values=values)
    with Clock() as sweep_clock:
        got = whatif.sweep(problem, Budget(objective="cost"), spec, time_limit_s=time_limit, options=OPTIONS)
    solves = sum(p.how == "solved" for p in got) + 1  # + the least-time solve
    solo_cpu = solo_wall = reasons_cpu = 0.0
    for v, p in zip(values, got):
        budget = Budget(objective="cost", max_time_s=v)
        with Clock() as c:
            r = solve(problem, budget, time_limit_s=time_limit, options=OPTIONS)
        solo_cpu, solo_wall = solo_cpu + c.cpu, solo_wall + c.wall
        if r.status == "infeasible":
            with Clock() as c:
                explain_infeasible(problem, budget, options=OPTIONS, time_limit_s=time_limit)
            reasons_cpu += c.cpu
        same = (r.objective_value is None) == (p.estimate is None) and (
            r.objective_value is None or abs(r.objective_value - p.estimate.cost_usd) <= 1e-6 * r.objective_value)
        if not same or r.status != p.result.status:
            raise SystemExit(f"different answers at {v / SECONDS_PER_DAY:.2f} d: {r.status} {r.objective_value} "
                             f"against the sweep's {p.result.status} {p.estimate and p.estimate.cost_usd}")
    return {"range_days": [lo_d, hi_d], "points": points, "solver_calls": solves,
            "how": {h: sum(p.how == h for p in got) for h in ("solved", "reused", "implied")},
            "distinct_optima": len({round(p.estimate.cost_usd, 6) for p in got if p.estimate}),
            "sweep_cpu_s": sweep_clock.cpu, "sweep_wall_s": sweep_clock.wall,
            "independent_cpu_s": solo_cpu, "independent_wall_s": solo_wall,
            "independent_with_reasons_cpu_s": solo_cpu + reasons_cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ranges", default="20-60,23-36,2-30", help="comma-separated FROM-TO in days")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per solve (default: none)")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args()
    problem = build_problem("gpt2-xl", "fasop-a100-a10", profile="analytic")
    # Load the solver libraries before any clock starts (OR-Tools imports pandas: about a second on first use).
    import ortools.sat.python.cp_model  # noqa: F401
    import pulp  # noqa: F401

    records = []
    print(f"{'range':>9s} {'calls':>5s} {'optima':>6s} {'sweep':>8s} {'indep.':>8s} {'+reasons':>8s} {'ratio':>6s}"
          f" {'(wall)':>14s}")
    for text in args.ranges.split(","):
        lo, hi = (float(x) for x in text.split("-"))
        for _ in range(args.runs):
            r = run(problem, lo, hi, args.points, args.time_limit)
            records.append(r)
            print(f"{text + ' d':>9s} {r['solver_calls']:5d} {r['distinct_optima']:6d} {r['sweep_cpu_s']:7.2f}s "
                  f"{r['independent_cpu_s']:7.2f}s {r['independent_with_reasons_cpu_s']:7.2f}s "
                  f"{r['sweep_cpu_s'] / r['independent_cpu_s']:6.2f} "
                  f"{r['sweep_wall_s']:5.2f}s/{r['independent_wall_s']:5.2f}s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
