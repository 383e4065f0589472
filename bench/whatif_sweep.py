"""What a sweep saves: a time-budget sweep on FASOP's cluster (GPT-2 XL, fasop-a100-a10) solved by whatif.sweep
(re-use across points: least time once, looser optima, warm starts) against the same points solved independently.

    python bench/whatif_sweep.py [--points 20] [--time-limit SECONDS_PER_SOLVE] [--solver cpsat] [--independent]

Prints wall time, solver calls and the cost of each point for both; with a time limit the independent solves may
stop with worse plans than the sweep (which starts every solve from the best known plan).
"""

from __future__ import annotations

import argparse
import time

from optsearch import whatif
from optsearch.candidates import SpaceOptions
from optsearch.problem import build_problem
from optsearch.solver import solve
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_DAY, format_usd

OPTIONS = SpaceOptions(max_stages=8, micro_batch_sizes=(1, 2, 4))  # FASOP's search space


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--solver", default="cpsat")
    parser.add_argument("--independent", action="store_true", help="Also solve every point on its own.")
    args = parser.parse_args()
    problem = build_problem("gpt2-xl", "fasop-a100-a10", profile="analytic")
    # Load the solver libraries before any clock starts (OR-Tools imports pandas: about a second on first use), so
    # that neither side pays it.
    import ortools.sat.python.cp_model  # noqa: F401
    import pulp  # noqa: F401

    values = tuple(SECONDS_PER_DAY * (20 + 40 * i / (args.points - 1)) for i in range(args.points))
    spec = whatif.Sweep(limit="max_time_s", values=values)
    kw = dict(solver=args.solver, time_limit_s=args.time_limit, options=OPTIONS)
    start = time.perf_counter()
    points = whatif.sweep(problem, Budget(objective="cost"), spec, **kw)
    sweep_s = time.perf_counter() - start
    solved = sum(p.how == "solved" for p in points) + 1  # + the least-time solve
    print(f"sweep: {args.points} points, {solved} solves, {sweep_s:.1f} s")
    for p in points:
        cost = format_usd(p.estimate.cost_usd) if p.estimate else "-"
        print(f"  {p.budget.max_time_s / SECONDS_PER_DAY:6.2f} d  {p.result.status:10s} {p.how:8s} {cost:>10s} "
              f"{p.result.solve_time_s:7.1f} s")
    if args.independent:
        start = time.perf_counter()
        for v, p in zip(values, points):
            r = solve(problem, Budget(objective="cost", max_time_s=v), **kw)
            same = "same" if (r.objective_value is None) == (p.estimate is None) and (
                r.objective_value is None or abs(r.objective_value - p.estimate.cost_usd) <= 1e-6 * r.objective_value)\
                else "DIFFERENT"
            print(f"  independent {v / SECONDS_PER_DAY:6.2f} d  {r.status:10s} {r.solve_time_s:7.1f} s  {same}")
        print(f"independent: {args.points} solves, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
