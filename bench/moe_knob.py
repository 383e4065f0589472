"""What expert parallelism is worth (docs/knobs.md, "Mixture of experts"): `optsearch solve` on mixtral-8x7b with
ep = 1 only (--expert-parallel 1) and with ep chosen by the search, minimizing cost and time, on each cluster.

    python bench/moe_knob.py [--time-limit 120] [--out docs/moe_knob.json]

Each run is one `optsearch solve --json` process (CP-SAT, analytic profile, target megatron); the record keeps its
status, proven gap, solve time and plan.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CLUSTERS = ("aws-p4d", "mixed-pool-8k", "fasop-a100-a10")
# Cost under a deadline the cheapest plan misses (its time: aws-p4d 210d, mixed-pool-8k 210d with ep = 1).
DEADLINES = (("aws-p4d", "70d"), ("mixed-pool-8k", "4d"))


def run(model: str, cluster: str, minimize: str, ep: str | None, time_limit: float, max_time: str | None = None) -> dict:
    cmd = [sys.executable, "-m", "optsearch", "solve", "--model", model, "--cluster", cluster, "--minimize", minimize,
           "--time-limit", str(time_limit), "--json", "--quiet"]
    if max_time is not None:
        cmd += ["--max-time", max_time]
    if ep is not None:
        cmd += ["--expert-parallel", ep]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    record = {"model": model, "cluster": cluster, "minimize": minimize, "max_time": max_time, "ep_sizes": ep or "any",
              "time_limit_s": time_limit, "wall_s": round(time.perf_counter() - start, 1), "exit": proc.returncode}
    if proc.returncode != 0:
        record["error"] = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        return record
    out = json.loads(proc.stdout)
    plan, est = out["plan"], out["estimate"]
    record.update(status=out["status"], gap=out["gap"], solve_time_s=out["solve_time_s"],
                  cost_usd=est["cost_usd"], training_time_s=est["training_time_s"], nodes=plan["nodes"],
                  tp=plan["tp"], dp=plan["dp"], pp=plan["pp"], ep=plan.get("ep", 1),
                  micro_batch_size=plan["micro_batch_size"],
                  recompute=sorted({s["recompute"] for s in plan["stages"] if s["num_layers"] > 0}))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mixtral-8x7b")
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("docs/moe_knob.json"))
    args = parser.parse_args()
    records = []
    for cluster in args.clusters.split(","):
        for minimize in ("cost", "time"):
            for ep in ("1", None):
                records.append(run(args.model, cluster, minimize, ep, args.time_limit))
                print(json.dumps(records[-1]), file=sys.stderr, flush=True)
    for cluster, max_time in DEADLINES:
        if cluster in args.clusters.split(","):
            for ep in ("1", None):
                records.append(run(args.model, cluster, "cost", ep, args.time_limit, max_time))
                print(json.dumps(records[-1]), file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
