"""First plans of chosen grid rows, one row per process, on the CPU clock and on the wall clock (issue 14, item 3:
"a first feasible plan in <= 2 s whenever one exists"; docs/benchmarks.md "Round 10: first plans (lazyoff)").

    python bench/first_plans.py --rows gpt3-175b:mixed-pool-8k:cost,llama2-70b:mixed-pool-3k:cost<=D --out /tmp/a.json
    PYTHONPATH=/path/to/other/checkout python bench/first_plans.py ...   # the same rows on another version
    python bench/first_plans.py --records docs/objective_grid_megatron_round10.json --clock cpu \
        --rows megatron-145b:mixed-pool-3k:time<=B,megatron-39b:mixed-pool-8k:cost --out /tmp/b.json
        # round 11 (docs/benchmarks.md "Round 11: first plans"): the full grid's budgets; record
        # docs/first_plans_round11.json

Each row takes its budget (D or B) from --records (default: docs/objective_grid_megatron_round9_five.json, then
docs/objective_grid_megatron_round8.json for models that file lacks), the megatron target's space, `cpsat`, and runs
`solve` with --time-limit less the start-up as the grid does (0.95 x limit - start-up). --clock cpu replaces the
solver's clock (time.perf_counter) by time.process_time, so its deadlines, shares and first_plan_s are CPU seconds
of the process; --clock cpu-children counts its reaped children's too (CBC's re-checks and models: docs/benchmarks.md
"Round 14: first plans (firstplans)"); --clock wall keeps it. Each record has the start-up (imports and loading, on both clocks), the first
plan counted from the start of `solve` (on the solver's clock) and from the process's start (start-up + that), the
status, gap and value at the limit, and the CPU and wall seconds `solve` took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = [ROOT / "docs" / "objective_grid_megatron_round9_five.json",
           ROOT / "docs" / "objective_grid_megatron_round8.json"]


def run_one(spec: dict) -> dict:
    import time

    wall0 = time.perf_counter()
    if spec["clock"] == "cpu":
        time.perf_counter = time.process_time  # every deadline of the solver in CPU seconds of this process
    elif spec["clock"] == "cpu-children":  # and of its reaped children (CBC runs as one, reaped after each solve)
        def cpu_with_children() -> float:
            t = os.times()
            return t.user + t.system + t.children_user + t.children_system

        time.perf_counter = cpu_with_children
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.solver import process_age_s, solve
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(spec["model"], spec["cluster"], []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=spec["objective"], max_cost_usd=spec.get("max_cost_usd"),
                    max_time_s=spec.get("max_time_s"))
    setup_cpu, setup_wall = time.process_time(), process_age_s()
    setup = setup_cpu if spec["clock"] in ("cpu", "cpu-children") else setup_wall
    cpu0, w0 = time.process_time(), time.monotonic()
    result = solve(problem, budget, time_limit_s=max(0.0, 0.95 * spec["time_limit"] - setup), options=options)
    first = result.stats.get("first_plan_s")
    return {**spec, "status": result.status, "gap": result.gap, "objective_value": result.objective_value,
            "setup_cpu_s": setup_cpu, "setup_wall_s": setup_wall, "first_plan_in_solve_s": first,
            "first_plan_s": None if first is None else setup + first,
            "solve_cpu_s": time.process_time() - cpu0, "solve_wall_s": time.monotonic() - w0,
            "candidates": result.stats.get("candidates_after_bounds"),
            "models_solved": result.stats.get("models_solved"),
            "bench_s": time.perf_counter() - wall0 if spec["clock"] == "wall" else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", required=False, help="comma-separated model:cluster:row (row: cost, time, cost<=D, "
                                                       "time<=B)")
    parser.add_argument("--records", type=Path, action="append", help="grid records with the budgets (repeatable)")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--clock", choices=("cpu", "cpu-children", "wall", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    if args.out is None or not args.rows:
        parser.error("--rows and --out are required")
    found: dict[tuple[str, str, str], dict] = {}
    for path in args.records or RECORDS:
        for r in json.loads(path.read_text()):
            if r.get("method", "cpsat") != "dp":
                found.setdefault((r["model"], r["cluster"], r["row"]), r)
    specs = []
    for row in args.rows.split(","):
        model, cluster, name = row.split(":")
        r = found.get((model, cluster, name))
        if r is None:
            parser.error(f"--rows: {row!r} is in none of the records")
        for clock in ("cpu", "wall") if args.clock == "both" else (args.clock,):
            specs.append({"model": model, "cluster": cluster, "row": name, "objective": r["objective"],
                          **{k: r[k] for k in ("max_cost_usd", "max_time_s") if r.get(k) is not None},
                          "time_limit": args.time_limit, "clock": clock})
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for _ in range(args.repeat):
        for spec in specs:
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True,
                                  env=env)
            if done.returncode != 0:
                row = {**spec, "status": "error", "error": done.stderr.strip().splitlines()[-3:]}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            row["load_1min"] = load
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
            first = ("-" if row.get("first_plan_s") is None
                     else f"{row['first_plan_in_solve_s']:.2f} / {row['first_plan_s']:.2f}")
            gap = "-" if row.get("gap") is None else f"{row['gap']:.2%}"
            print(f"{row['model']} {row['cluster']} {row['row']} [{row['clock']}] {row['status']} {gap} "
                  f"first {first} s, solve cpu {row.get('solve_cpu_s', 0):.2f} wall {row.get('solve_wall_s', 0):.2f}"
                  f" load {load:.1f}", flush=True)


if __name__ == "__main__":
    main()
