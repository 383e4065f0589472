"""Before/after pairs of a recorded grid's rows on a CPU-time clock (issue 14, item 3, round 8).

    git archive <before> | tar -x -C /tmp/before;  git archive <after> | tar -x -C /tmp/after
    python bench/paired_rows.py --before /tmp/before --after /tmp/after --models mixtral-8x7b --out /tmp/pairs.json

Each row of --records for the --models (every row of --clusters) runs twice, once per checkout (PYTHONPATH), the two
one after the other, so that both see about the same load on a shared machine; each run is bench/budget_rows.py's
--one (its own process, every clock of the solver replaced by time.process_time, --cpu-limit CPU seconds set-up
included), with the record's budget (B or D) and --target space. A model not in --records (--as-model) takes the
rows of --models' records without budgets: its cost and time rows only. Records go to --out (JSON, one per run,
with the version, its 1-minute load average when it started, the status, gap, objective, first plan and CPU
seconds, which are the CPU seconds to the proof when the status is optimal).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a checkout (the tree of the version before)")
    parser.add_argument("--after", type=Path, required=True, help="a checkout (the tree of the version after)")
    parser.add_argument("--records", type=Path, default=ROOT / "docs" / "objective_grid_megatron_round7.json")
    parser.add_argument("--models", default="mixtral-8x7b")
    parser.add_argument("--as-model", help="run these rows' cost and time rows on this model instead")
    parser.add_argument("--clusters", default="mixed-pool-8k,mixed-pool-3k")
    parser.add_argument("--cpu-limit", type=float, default=9.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    keep = ("model", "cluster", "row", "objective", "max_cost_usd", "max_time_s", "target")
    specs = []
    for r in json.loads(args.records.read_text()):
        if r["model"] in args.models.split(",") and r["cluster"] in args.clusters.split(",") and r["method"] != "dp":
            spec = {k: r[k] for k in keep if r.get(k) is not None}
            if args.as_model:
                if spec["row"] not in ("cost", "time"):
                    continue
                spec["model"] = args.as_model
            specs.append({**spec, "cpu_limit": args.cpu_limit})
    rows = []
    for spec in specs:
        for version, path in (("before", args.before), ("after", args.after)):
            env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(path)}
            load = float(Path("/proc/loadavg").read_text().split()[0])
            done = subprocess.run([sys.executable, str(path / "bench" / "budget_rows.py"), "--one", json.dumps(spec)],
                                  capture_output=True, text=True, env=env)
            if done.returncode != 0:
                row = {**spec, "status": "error", "error": done.stderr.strip().splitlines()[-3:]}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            row.update(version=version, load1=load)
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
            gap = "-" if row.get("gap") is None else f"{row['gap']:.2%}"
            print(f"{version:6s} {row['model']} {row['cluster']} {row['row']}: {row['status']} {gap} "
                  f"{row.get('objective_value')} first {row.get('first_plan_cpu_s')} cpu {row.get('cpu_s')} "
                  f"models {row.get('models_solved')} load {load}", flush=True)


if __name__ == "__main__":
    main()
