"""How long `solve` takes to prove its answer, and how that grows with nodes, node types and layers.

    python bench/solver_scale.py            # the full set (several minutes on 2 cores)
    python bench/solver_scale.py --quick    # FASOP's cluster only (under a minute)

Each instance runs in its own process (so peak memory is that solve's own) with a time limit; the table goes to
stdout and a JSON record to docs/solver_scale.json. The numbers in docs/solver.md come from this script.
"within 1 %" is the first moment the solver's progress showed a proven gap of at most 1 % (its incumbent against
the bound of the candidate it was examining, which is a lower bound on the optimum because candidates are examined
in bound order); for a solve that proves optimality it is at most the wall time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (label, model, cluster, objective, max_time, cluster edits)
FASOP = [
    ("fasop cost", "gpt2-xl", "fasop-a100-a10", "cost", None, []),
    ("fasop cost <= 30d", "gpt2-xl", "fasop-a100-a10", "cost", "30d", []),
    ("fasop time", "gpt2-xl", "fasop-a100-a10", "time", None, []),
]
GROWTH = [
    # nodes: FASOP's cluster with more A10 nodes
    ("a10 x3 + a100", "gpt2-xl", "fasop-a100-a10", "cost", "60d", ["node_types.a10.count=3"]),
    ("a10 x15 + a100", "gpt2-xl", "fasop-a100-a10", "cost", "60d", ["node_types.a10.count=15"]),
    ("a10 x31 + a100", "gpt2-xl", "fasop-a100-a10", "cost", "60d", ["node_types.a10.count=31"]),
    # layers: same cluster, 24 / 36 / 48 layers
    ("24 layers", "gpt2-medium", "fasop-a100-a10", "cost", "30d", []),
    ("36 layers", "gpt2-large", "fasop-a100-a10", "cost", "30d", []),
    # node types: 1, 2, 4
    ("1 type (fasop-a10)", "gpt2-xl", "fasop-a10", "cost", "60d", []),
    ("4 types x 256 nodes, 175B", "gpt3-175b", "mixed-pool-8k", "cost", None, []),
]


def run_one(spec: dict) -> dict:
    from optsearch.edits import edited_problem
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget
    from optsearch.units import parse_duration_s

    problem = edited_problem(spec["model"], spec["cluster"], spec["edits"])
    budget = Budget(objective=spec["objective"],
                    max_time_s=parse_duration_s(spec["max_time"]) if spec["max_time"] else None)
    start = time.perf_counter()
    within: dict[str, float] = {}  # first moment the proven gap was within 1 % (progress: incumbent vs bound)

    def watch(p) -> None:
        if "1%" not in within and p.incumbent and p.bound is not None and p.incumbent - p.bound <= 0.01 * p.incumbent:
            within["1%"] = time.perf_counter() - start

    result = solve(problem, budget, solver=spec["solver"], time_limit_s=spec["time_limit"], progress=watch)
    wall = time.perf_counter() - start
    if result.status == "optimal":
        within.setdefault("1%", wall)
    return {
        **spec,
        "status": result.status,
        "gap": result.gap,
        "objective_value": result.objective_value,
        "wall_s": wall,
        "within_1pct_s": within.get("1%"),
        "models_solved": result.stats.get("models_solved"),
        "candidates": result.stats.get("candidates_total"),
        "balance": result.plan.balance if result.plan else None,
        "gpus": result.plan.num_gpus if result.plan else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="FASOP's cluster only")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve (default 60)")
    parser.add_argument("--solvers", default="cpsat,cbc", help="comma-separated: cpsat,cbc")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "solver_scale.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    rows = []
    instances = FASOP if args.quick else FASOP + GROWTH
    for label, model, cluster, objective, max_time, edits in instances:
        for solver in args.solvers.split(","):
            spec = dict(label=label, model=model, cluster=cluster, objective=objective, max_time=max_time,
                        edits=edits, solver=solver, time_limit=args.time_limit)
            done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True)
            if done.returncode != 0:
                row = {**spec, "status": "error", "error": done.stderr.strip().splitlines()[-1:]}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            gap = "-" if row.get("gap") is None else f"{row['gap']:.2%}"
            first = "-" if row.get("within_1pct_s") is None else f"{row['within_1pct_s']:.2f} s"
            print(f"{label:28s} {solver:6s} {row['status']:10s} gap {gap:>7s}  {row.get('wall_s', 0):7.2f} s  "
                  f"(within 1 % at {first})  "
                  f"models {row.get('models_solved')}  peak {row.get('peak_rss_mib', 0):6.0f} MiB  "
                  f"{row.get('balance')}", flush=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
