"""What-if on FASOP's cluster (1 x 4 A100 + 7 x 4 A10G, fasop-a100-a10) for GPT-2 XL: the cheapest plan for each
training-time budget from 15 to 60 days, drawn as cost against training time into whatif_fasop.png (the README's
figure, docs/whatif_fasop.png, is the README's own `optsearch whatif` command's plot, not this script's).

    python examples/whatif_fasop.py [--time-limit SECONDS_PER_SOLVE] [--points N] [--out PNG]

The search space is FASOP's (at most 8 pipeline stages, micro-batches 1, 2, 4). With --time-limit a point whose solve
stopped early is 'feasible' (the best plan found, not proven optimal). The script checks its answer: every plan meets
its budget, cost never rises as the budget loosens, and budgets below the fastest plan are infeasible.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from optsearch import whatif
from optsearch.candidates import SpaceOptions
from optsearch.cli.whatif_cmd import plot_points, points_table
from optsearch.problem import build_problem
from optsearch.report import stdout
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_DAY

OPTIONS = SpaceOptions(max_stages=8, micro_batch_sizes=(1, 2, 4))


def run(time_limit_s: float | None, points: int, out: Path, solver: str = "cpsat") -> list[whatif.Point]:
    problem = build_problem("gpt2-xl", "fasop-a100-a10", profile="analytic")
    spec = whatif.Sweep(limit="max_time_s", values=tuple(
        SECONDS_PER_DAY * (15 + 45 * i / (points - 1)) for i in range(points)))
    result = whatif.sweep(problem, Budget(objective="cost"), spec, solver=solver, time_limit_s=time_limit_s,
                          options=OPTIONS)
    check(result)
    plot_points(result, out, "GPT-2 XL on FASOP's cluster (4 A100 + 28 A10G): cheapest plan per time budget")
    return result


class CheckFailed(RuntimeError):
    """The script's answer broke one of its own checks (raised, not asserted: `python -O` strips asserts)."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


def check(points: list[whatif.Point]) -> None:
    costs = []
    for p in points:
        if p.plan is None:
            require(p.result.status in ("infeasible", "timeout") and bool(p.reason), f"no plan and no reason: {p}")
            require(not costs, "a looser budget than a feasible one cannot be infeasible")
            continue
        require(p.estimate.training_time_s <= p.budget.max_time_s, "plan breaks its time budget")
        costs.append(p.estimate.cost_usd)
    require(bool(costs), "no point has a plan")
    require(all(b <= a * (1 + 1e-9) for a, b in zip(costs, costs[1:])), f"cost rose as the budget loosened: {costs}")


def print_points(points: list[whatif.Point]) -> None:
    """The table and its footnotes, as `optsearch whatif` prints them."""
    table, footnotes = points_table(points, "GPT-2 XL on fasop-a100-a10: cheapest plan per time budget", "max_time_s",
                                    None)
    stdout.print(table)
    for line in footnotes:
        stdout.print(line, highlight=False, markup=False)


def main(argv: list[str] | None = None) -> list[whatif.Point]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=None, help="Seconds per solve (default: none, exact).")
    parser.add_argument("--points", type=int, default=10, help="Time budgets from 15 to 60 days.")
    parser.add_argument("--out", type=Path, default=Path("whatif_fasop.png"), help="PNG to write.")
    parser.add_argument("--solver", default="cpsat", help="cbc or cpsat.")
    args = parser.parse_args(argv)
    points = run(args.time_limit, args.points, args.out, args.solver)
    print_points(points)
    print(f"wrote {args.out}")
    return points


if __name__ == "__main__":
    main()
