"""Re-run the budget rows of a recorded objective grid with the same budgets, on a CPU-time clock (issue 14, item 3).

    python bench/budget_rows.py --records docs/objective_grid_solver.json --row 'time<=B' --out /tmp/after.json
    PYTHONPATH=/path/to/other/checkout python bench/budget_rows.py ...   # the same rows on another version

Each row of --records whose row is --row, whose cluster is not excluded and whose recorded gap exceeds --min-gap runs
in its own process with the recorded budget (B or D) and the record's --target space, for --cpu-limit seconds of
that process's CPU time, set-up included: every clock of the solver (time.perf_counter) is replaced by
time.process_time, so the limit, the time slices and the shares of the seed and neighbour searches are CPU seconds.
On a shared machine wall times of the same run vary 2-3x with the load; CPU times much less (the grid's own
`--time-limit` rows keep the wall clock, which is what a user sees). Records go to --out (JSON, one per row, written
after every row); the last line of each row printed is the status, gap, objective, first plan (CPU s) and models.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_one(spec: dict) -> dict:
    import time

    time.perf_counter = time.process_time  # every deadline in CPU seconds of this process
    from optsearch.candidates import SpaceOptions
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget

    problem = edited_problem(spec["model"], spec["cluster"], [])
    if spec.get("target"):  # priced as the engine runs attention, as `solve --target` prices it
        from optsearch.targets import engine_problem

        problem = engine_problem(spec["target"], problem)
    options = space_from_target(spec["target"], problem) if spec.get("target") else SpaceOptions()
    budget = Budget(objective=spec["objective"], max_cost_usd=spec.get("max_cost_usd"),
                    max_time_s=spec.get("max_time_s"))
    setup = time.process_time()
    result = solve(problem, budget, time_limit_s=max(0.0, spec["cpu_limit"] - setup), options=options)
    first = result.stats.get("first_plan_s")
    return {**spec, "status": result.status, "gap": result.gap, "objective_value": result.objective_value,
            "setup_cpu_s": setup, "first_plan_cpu_s": None if first is None else setup + first,
            "cpu_s": time.process_time(), "models_solved": result.stats.get("models_solved")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, action="append", required=False,
                        help="a grid's JSON records (repeatable; default: docs/objective_grid_megatron.json and "
                             "docs/objective_grid_solver.json)")
    parser.add_argument("--row", default="time<=B", help="time<=B or cost<=D")
    parser.add_argument("--min-gap", type=float, default=0.01, help="only rows recorded with a larger gap")
    parser.add_argument("--exclude-clusters", default="fasop-a100-a10")
    parser.add_argument("--models", help="comma-separated: only these")
    parser.add_argument("--cpu-limit", type=float, default=9.0, help="CPU seconds per row, set-up included")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, required=False)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    if args.out is None:
        parser.error("--out is required")
    records = args.records or [ROOT / "docs" / "objective_grid_megatron.json",
                               ROOT / "docs" / "objective_grid_solver.json"]
    models = set(args.models.split(",")) if args.models else None
    specs = []
    for path in records:
        for r in json.loads(path.read_text()):
            if (r["row"] != args.row or r["cluster"] in args.exclude_clusters.split(",")
                    or (r.get("gap") or 0.0) <= args.min_gap or (models and r["model"] not in models)):
                continue
            keep = ("model", "cluster", "row", "objective", "max_cost_usd", "max_time_s", "target")
            specs.append({**{k: r[k] for k in keep if r.get(k) is not None}, "cpu_limit": args.cpu_limit})
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for spec in specs:
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True,
                              env=env)
        if done.returncode != 0:
            row = {**spec, "status": "error", "error": done.stderr.strip().splitlines()[-3:]}
        else:
            row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        gap = "-" if row.get("gap") is None else f"{row['gap']:.2%}"
        first = "-" if row.get("first_plan_cpu_s") is None else f"{row['first_plan_cpu_s']:.2f}"
        print(f"{row['model']} {row['cluster']} {row.get('target', 'library')} {row['row']}: {row['status']} {gap} "
              f"{row.get('objective_value')} first {first} s models {row.get('models_solved')}", flush=True)


if __name__ == "__main__":
    main()
