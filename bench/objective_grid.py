"""Every objective on every catalog model and the large pools (issue 14, item 3): how soon a first plan comes, how
close the answer is proven, and whether --time-limit holds for the wall time of the whole process.

    python bench/objective_grid.py --time-limit 10                       # every model x 3 clusters x 4 rows
    python bench/objective_grid.py --models gpt2-xl,gpt3-13b --clusters mixed-pool-8k --dp

Per (model, cluster), four rows: cost; time; cost under a deadline D; time under a cost budget B, where
D = sqrt(T_fast x T_cheap) and B = sqrt(C_cheap x C_fast) come from the plans of the first two rows (so a plan meets
each: the fast plan meets D, the cheap plan meets B). Each row runs in its own process as `optsearch solve` does:
--time-limit less the process's start-up (imports, loading), less 5 % kept for the report. "wall" is the process's
age when the answer is ready, interpreter start included. "first plan" is when the solver first held a plan that
meets the budget, counted from the start of `solve`, plus the start-up before it. With --dp the DP baselines run
beside each row with the same limit, as `optsearch compare --methods dp,dp-amp` does: dp (FASOP-style: the node-count
grid; it refuses grids of more than 100,000 points, as on both mixed pools) and dp-amp (AMP-style: the whole cluster in
a fixed order). Records go to --out (JSON, one record per row, written after every row, so an interrupted run keeps
what it measured); rows already in --out at the same --time-limit are kept, not run again, so `--dp` on a solver-only
record adds the baselines beside its rows; --baselines-from takes an earlier run's DP records where the row's spec and
budget are the same. With --target, the solver rows search that engine target's space (as
`optsearch solve --target` does; the CLI's default is megatron); without it, the library's default space
(SpaceOptions(): per-stage recomputation, none of issue 16's plan-wide knobs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ["fasop-a100-a10", "mixed-pool-8k", "mixed-pool-3k"]
FIRST = ["gpt2-xl", "gpt3-13b", "gpt3-175b", "megatron-1t"]  # the cases first


def _problem_and_space(spec: dict):
    """The row's problem and search space, the same for the solver and the DP baseline: with a target, priced as
    that engine runs attention and searched in its space (as `optsearch solve --target` and `optsearch compare`
    do); without one, the library's default space. Until round 15 the DP row was given the plain problem and the
    default space under --target too, so it searched plans the engine cannot run (T5 with pp > 1 under megatron)."""
    from optsearch.candidates import SpaceOptions
    from optsearch.edits import edited_problem

    problem = edited_problem(spec["model"], spec["cluster"], [])
    target = spec.get("target")
    if not target:
        return problem, SpaceOptions()
    from optsearch.cli.options import space_from_target
    from optsearch.targets import engine_problem

    problem = engine_problem(target, problem)
    return problem, space_from_target(target, problem)


def run_one(spec: dict) -> dict:
    from optsearch.solver import process_age_s

    age_at_import = process_age_s()
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget

    budget = Budget(objective=spec["objective"], max_time_s=spec.get("max_time_s"),
                    max_cost_usd=spec.get("max_cost_usd"))
    problem, options = _problem_and_space(spec)
    # The limit is taken after all of the row's set-up, as `optsearch solve` takes it (cli/solve_cmd.py): until
    # round 14 it was taken before the target's set-up (the CLI's imports, 0.2-0.3 s quiet, up to 1 s loaded),
    # which the wall then counted and the limit did not.
    setup_s = process_age_s()
    limit = max(0.0, 0.95 * spec["time_limit"] - setup_s)
    if spec["method"] in ("dp", "dp-amp"):
        from optsearch.baselines.dp import solve_dp
        order = "rotations" if spec["method"] == "dp" else "fixed"
        result = solve_dp(problem, budget, order=order, time_limit_s=limit, options=options)
    else:
        result = solve(problem, budget, solver=spec["method"], time_limit_s=limit, options=options)
    wall = process_age_s()
    est = result.estimate
    first = result.stats.get("first_plan_s")
    return {
        **spec,
        "status": result.status,
        "message": result.message,
        "objective_value": result.objective_value,
        "gap": result.gap,
        "setup_s": setup_s,
        "python_start_s": age_at_import,
        "solve_s": result.solve_time_s,
        "wall_s": wall,
        "first_plan_s": None if first is None else setup_s + first,
        "models_solved": result.stats.get("models_solved"),
        "training_time_s": est.training_time_s if est else None,
        "cost_usd": est.cost_usd if est else None,
        "balance": result.plan.balance if result.plan else None,
        "gpus": result.plan.num_gpus if result.plan else None,
    }


def _run(spec: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        return {**spec, "status": "error", "error": done.stderr.strip().splitlines()[-3:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _show(row: dict) -> None:
    gap = "-" if row.get("gap") is None else f"{row['gap']:.2%}"
    first = "-" if row.get("first_plan_s") is None else f"{row['first_plan_s']:.2f}"
    print(f"{row['model']:14s} {row['cluster']:15s} {row['row']:10s} {row['method']:5s} {row['status']:9s} "
          f"gap {gap:>8s} wall {row.get('wall_s', 0):6.2f} s first {first:>6s} s  "
          f"value {row.get('objective_value')}", flush=True)


def _value(row: dict) -> str:
    if row.get("objective_value") is None:
        return "-"
    if row["objective"] == "cost":
        return f"${row['objective_value']:,.0f}"
    from optsearch.units import format_duration
    return format_duration(row["objective_value"])


def _baseline_cell(row: dict | None) -> str:
    return "" if row is None else f"{row['status']} {_value(row)}"


def table(rows: list[dict]) -> str:
    """One line per (model, cluster, row): the solver's answer, the DP baselines' where they ran, and how much worse
    the better baseline's plan is than the solver's ("vs dp": its objective over the solver's, less one)."""
    baselines = {(r["model"], r["cluster"], r["row"], r["method"]): r for r in rows if r["method"] in ("dp", "dp-amp")}
    out = ["| model | cluster | row | status | gap | first plan: in solve / in process | wall | objective | goal met "
           "| dp | dp-amp | vs dp |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["method"] in ("dp", "dp-amp"):
            continue
        gap = "-" if r.get("gap") is None else f"{r['gap']:.2%}"
        in_solve = None if r.get("first_plan_s") is None else r["first_plan_s"] - r["setup_s"]
        first = "-" if in_solve is None else f"{in_solve:.2f} s / {r['first_plan_s']:.2f} s"
        wall = f"{r.get('wall_s', 0):.2f} s"
        limit = r["time_limit"]
        goals = []
        if r.get("gap") is not None and r["gap"] <= 0.01 and r.get("wall_s", 0) <= 10.0:
            goals.append("1%")
        if in_solve is not None and in_solve <= 2.0:
            goals.append("first")
        if r.get("wall_s", 0) <= 1.1 * limit:
            goals.append("limit")
        if r["status"] == "infeasible":
            goals = ["limit", "(no plan exists)"] if r.get("wall_s", 0) <= 1.1 * limit else ["(no plan exists)"]
        dp, amp = (baselines.get((r["model"], r["cluster"], r["row"], m)) for m in ("dp", "dp-amp"))
        found = [b["objective_value"] for b in (dp, amp) if b is not None and b.get("objective_value") is not None]
        versus = ("" if not found or r.get("objective_value") is None
                  else f"{min(found) / r['objective_value'] - 1:+.1%}")
        out.append(f"| {r['model']} | {r['cluster']} | {r['row']} | {r['status']} | {gap} | {first} | {wall} | "
                   f"{_value(r)} | {', '.join(goals)} | {_baseline_cell(dp)} | {_baseline_cell(amp)} | {versus} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--models", help="comma-separated (default: every catalog model, the issue's first)")
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--solver", default="cpsat")
    parser.add_argument("--dp", action="store_true", help="the DP baselines (dp, dp-amp) beside every row")
    parser.add_argument("--baselines-from", type=Path,
                        help="with --dp, take the DP records of this earlier --out whose spec and budget equal "
                             "the row's")
    parser.add_argument("--table", action="store_true", help="print the records of --out as a markdown table")
    parser.add_argument("--target", help="search this engine target's space (megatron, fasop), as solve --target")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "objective_grid.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    from optsearch.catalog import model_names

    models = args.models.split(",") if args.models else FIRST + [m for m in model_names() if m not in FIRST]
    rows: list[dict] = json.loads(args.out.read_text()) if args.out.exists() else []
    done = {(r["model"], r["cluster"], r["row"], r["method"]) for r in rows if r.get("time_limit") == args.time_limit}
    methods = [args.solver] + (["dp", "dp-amp"] if args.dp else [])
    # A DP record of an earlier run is kept only where its whole spec (model, cluster, row, limit, target and the
    # budget D or B itself) equals this run's: the baselines' code and the cost model it prices with are the same.
    baselines = [r for r in json.loads(args.baselines_from.read_text()) if r["method"] in ("dp", "dp-amp")
                 ] if args.baselines_from else []

    def record(spec: dict) -> dict | None:
        key = (spec["model"], spec["cluster"], spec["row"], spec["method"])
        if key in done:
            return next(r for r in rows if (r["model"], r["cluster"], r["row"], r["method"]) == key
                        and r.get("time_limit") == args.time_limit)
        earlier = next((r for r in baselines if all(r.get(k) == v for k, v in spec.items())), None)
        row = _run(spec) if earlier is None else {**earlier, "reused_from": str(args.baselines_from)}
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        _show(row)
        return row

    for model in models:
        for cluster in args.clusters.split(","):
            base = dict(model=model, cluster=cluster, time_limit=args.time_limit)
            if args.target:
                base["target"] = args.target
            got = {}
            for row, objective in (("cost", "cost"), ("time", "time")):
                for method in methods:
                    r = record({**base, "row": row, "objective": objective, "method": method})
                    if method == args.solver:
                        got[row] = r
            cheap, fast = got.get("cost"), got.get("time")
            if not (cheap and fast and cheap.get("cost_usd") and fast.get("cost_usd")):
                continue  # no plan to set the budgets from
            deadline = math.sqrt(cheap["training_time_s"] * fast["training_time_s"])
            budget = math.sqrt(cheap["cost_usd"] * fast["cost_usd"])
            for method in methods:
                record({**base, "row": "cost<=D", "objective": "cost", "max_time_s": deadline, "method": method})
                record({**base, "row": "time<=B", "objective": "time", "max_cost_usd": budget, "method": method})


if __name__ == "__main__":
    main()
