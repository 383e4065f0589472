"""Before/after rows for the in-flight-aware bound (issue 14, item 3, round 5): GPT-3 175B and Llama-2 70B on the
large pools in the CLI's space (--target megatron), every objective kind, --time-limit 10 as objective_grid.py runs it
(the limit less the start-up, less 5 %) with --wall; by default the search's clock is the process's CPU time
(time.perf_counter replaced by time.process_time in the row's process) and its limit 90 % of --time-limit, since the
machine is shared and the wall time of a row depends on the others' load. Each row in its own process. D and B: from this run's own cost and time rows (sqrt of the two plans' times / costs,
as objective_grid.py), or from --budgets (a JSON of an earlier run) so that before and after solve the same problems.

    python bench/inflight_rows.py --out docs/inflight_rows_after.json
    PYTHONPATH=/path/to/old/checkout python bench/inflight_rows.py --budgets docs/inflight_rows_after.json --out ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

RUNNER = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
if spec["cpu_clock"]:  # the search's clock is the process's CPU time (a shared machine: wall time depends on the others)
    time.perf_counter = time.process_time
from optsearch.solver import process_age_s, solve
from optsearch.edits import edited_problem
from optsearch.spec.budget import Budget
from optsearch.cli.options import space_from_target
from optsearch.targets import engine_problem
spec = json.loads(sys.argv[1])
problem = engine_problem("megatron", edited_problem(spec["model"], spec["cluster"], []))  # as solve prices it
options = space_from_target("megatron", problem)
budget = Budget(objective=spec["objective"], max_time_s=spec.get("max_time_s"), max_cost_usd=spec.get("max_cost_usd"))
last = {}
setup = process_age_s()
cpu0 = time.process_time()
limit = 0.9 * spec["time_limit"] if spec["cpu_clock"] else max(0.0, 0.95 * spec["time_limit"] - setup)
r = solve(problem, budget, time_limit_s=limit, options=options,
          progress=lambda p: last.update(bounded=p.bounded))
est = r.estimate
first = r.stats.get("first_plan_s")
print(json.dumps({**spec, "status": r.status, "gap": r.gap, "objective_value": r.objective_value,
                  "first_plan_s": None if first is None else setup + first, "wall_s": process_age_s(),
                  "cpu_s": time.process_time() - cpu0, "bounded": last.get("bounded", 0),
                  "inflight_bounded": r.stats.get("inflight_bounded"), "candidates_after_bounds": r.stats.get("candidates_after_bounds"),
                  "training_time_s": est.training_time_s if est else None, "cost_usd": est.cost_usd if est else None,
                  "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}))
""".replace("import json, sys, time", "import json, os, sys, time")
CPU_CLOCK = True


def run(spec: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", RUNNER, json.dumps({**spec, "cpu_clock": CPU_CLOCK})], capture_output=True, text=True, env=env)
    if out.returncode:
        return {**spec, "status": "error", "message": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt3-175b,llama2-70b")
    ap.add_argument("--clusters", default="mixed-pool-8k,mixed-pool-3k")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--budgets", default=None, help="take D and B from this earlier output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--wall", action="store_true", help="wall-clock limit (as objective_grid.py) instead of CPU time")
    a = ap.parse_args()
    global CPU_CLOCK
    CPU_CLOCK = not a.wall
    earlier = json.load(open(a.budgets)) if a.budgets else []
    rows = []
    for model in a.models.split(","):
        for cluster in a.clusters.split(","):
            base = dict(model=model, cluster=cluster, time_limit=a.time_limit)
            cost = run({**base, "objective": "cost", "row": "cost"})
            time_ = run({**base, "objective": "time", "row": "time"})
            rows += [cost, time_]
            old = {r["row"]: r for r in earlier if r["model"] == model and r["cluster"] == cluster}
            if "cost<=D" in old:
                D, B = old["cost<=D"]["max_time_s"], old["time<=B"]["max_cost_usd"]
            elif cost.get("training_time_s") and time_.get("training_time_s"):
                D = math.sqrt(cost["training_time_s"] * time_["training_time_s"])
                B = math.sqrt(cost["cost_usd"] * time_["cost_usd"])
            else:
                continue
            rows.append(run({**base, "objective": "cost", "row": "cost<=D", "max_time_s": D}))
            rows.append(run({**base, "objective": "time", "row": "time<=B", "max_cost_usd": B}))
            for r in rows[-4:]:
                print(json.dumps({k: r.get(k) for k in ("model", "cluster", "row", "status", "gap", "first_plan_s",
                                                          "wall_s", "cpu_s", "bounded", "load")}), flush=True)
            json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
