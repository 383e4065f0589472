"""Search time and plan quality of every method, from 8 to 8,192 GPUs: `python bench/search_scaling.py`.

Instances: 1-4 node types, 24-128 layers, including FASOP's cluster (fasop-a100-a10) and AMP's (amp-g4dn,
amp-p3-g4dn) with GPT-2 XL and GPT-2 355M, and mixed-pool-8k with GPT-3 175B. Each method runs under a timeout;
its wall time is the median of --runs runs (a method that hits the timeout is not repeated). For each instance the
table gives each method's objective, its gap to the best plan any method found, and the ratio of the exact solver's
time to the DP's, measured in the same run.

Writes search_scaling.png (log-log search time against GPUs, one line per method) and search_scaling.json into
--out-dir, and prints a Markdown table on stdout. --quick: three small instances, one run, a short timeout (under a
minute on 2 cores), writes files only when --out-dir is given.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from optsearch.catalog import load_cluster
from optsearch.compare import run_method
from optsearch.problem import Problem, build_problem
from optsearch.spec import ClusterSpec
from optsearch.spec.budget import Budget
from optsearch.units import format_duration, format_usd

METHODS = ("cbc", "cpsat", "dp", "dp-amp", "exhaustive")


@dataclass(frozen=True)
class Instance:
    name: str
    model: str
    cluster: str
    nodes: dict[str, int] | None = None  # restrict availability per node type (None: the catalog cluster)
    objective: str = "cost"


def subset(cluster: str, nodes: dict[str, int] | None) -> ClusterSpec:
    spec = load_cluster(cluster)
    if nodes is None:
        return spec
    kept = [n.model_copy(update={"num_nodes_available": nodes[n.name]}) for n in spec.node_types if n.name in nodes]
    return spec.model_copy(update={"node_types": kept, "name": f"{spec.name}-subset"})


FULL = [
    Instance("fasop 1+1 nodes", "gpt2-medium", "fasop-a100-a10", {"a100": 1, "a10": 1}),
    Instance("amp-g4dn", "gpt2-medium", "amp-g4dn"),
    Instance("amp-g4dn", "gpt2-xl", "amp-g4dn"),
    Instance("amp-p3-g4dn", "gpt2-medium", "amp-p3-g4dn"),
    Instance("amp-p3-g4dn", "gpt2-xl", "amp-p3-g4dn"),
    Instance("amp-p3-g4dn", "gpt2-xl", "amp-p3-g4dn", objective="time"),
    Instance("fasop-a100-a10", "gpt2-xl", "fasop-a100-a10"),
    Instance("fasop-a100-a10", "gpt2-xl", "fasop-a100-a10", objective="time"),
    Instance("3 types x 4 nodes", "gpt3-13b", "mixed-pool-8k", {"p4d.24xlarge": 4, "g5.48xlarge": 4, "p3.16xlarge": 4}),
    Instance("4 types x 32 nodes", "llama2-70b", "mixed-pool-8k",
             {"p5.48xlarge": 32, "p4d.24xlarge": 32, "g5.48xlarge": 32, "p3.16xlarge": 32}),
    Instance("4 types x 64 nodes", "megatron-1t", "mixed-pool-8k",
             {"p5.48xlarge": 64, "p4d.24xlarge": 64, "g5.48xlarge": 64, "p3.16xlarge": 64}),
    Instance("mixed-pool-8k", "gpt3-175b", "mixed-pool-8k"),
]
QUICK = [
    Instance("fasop 1+1 nodes", "gpt2-medium", "fasop-a100-a10", {"a100": 1, "a10": 1}),
    Instance("amp-g4dn", "gpt2-medium", "amp-g4dn"),
    Instance("amp-p3-g4dn", "gpt2-medium", "amp-p3-g4dn"),
]


def problem_of(inst: Instance) -> Problem:
    return build_problem(inst.model, subset(inst.cluster, inst.nodes))


def gpus_of(problem: Problem) -> int:
    return sum(n.gpus_per_node * n.num_nodes_available for n in problem.cluster.node_types)


def measure(inst: Instance, methods: tuple[str, ...], runs: int, timeout_s: float) -> dict:
    problem = problem_of(inst)
    budget = Budget(objective=inst.objective)  # type: ignore[arg-type]
    row = {"instance": inst.name, "model": inst.model, "cluster": problem.cluster.name, "objective": inst.objective,
           "gpus": gpus_of(problem), "node_types": len(problem.cluster.node_types),
           "layers": problem.model.num_layers, "methods": {}}
    for method in methods:
        times, last = [], None
        for _ in range(runs):
            result = run_method(problem, budget, method, time_limit_s=timeout_s)
            times.append(result.solve_time_s)
            last = result
            stopped = result.status in ("timeout", "refused") or "time limit" in result.message
            if stopped:
                break  # a timeout or a refusal is not repeated
        assert last is not None
        row["methods"][method] = {
            "status": last.status, "time_s": statistics.median(times), "runs": len(times),
            "objective_value": last.objective_value, "message": last.message,
            "plan": None if last.plan is None else {
                "tp": last.plan.tp, "dp": last.plan.dp, "pp": last.plan.pp, "mbs": last.plan.micro_batch_size,
                "balance": last.plan.balance, "nodes": dict(sorted(last.estimate.nodes.items())),
                "recompute": sorted({s.recompute for s in last.plan.stages}),
            },
        }
        print(f"  {inst.name} / {inst.model} / {inst.objective}: {method} {last.status} "
              f"{statistics.median(times):.2f} s {last.objective_value}", file=sys.stderr, flush=True)
    values = [m["objective_value"] for m in row["methods"].values() if m["objective_value"] is not None]
    best = min(values) if values else None
    for m in row["methods"].values():
        m["gap_to_best"] = None if best is None or m["objective_value"] is None else (m["objective_value"] - best) / best
    return row


def _value(v: float | None, objective: str) -> str:
    if v is None:
        return "-"
    return format_usd(v) if objective == "cost" else format_duration(v)


def _cell(m: dict, objective: str) -> str:
    status = {"optimal": "opt", "feasible": "feas", "timeout": "TIMEOUT", "refused": "REFUSED",
              "infeasible": "none"}[m["status"]]
    if m["status"] == "feasible" and "time limit" in m["message"]:
        status = "feas, TIMEOUT"
    gap = "" if m["gap_to_best"] is None else f", +{m['gap_to_best']:.3%}"
    return f"{m['time_s']:.2f} s ({status}{gap})"


def ratio(rows_m: dict, solver: str) -> str:
    dp = rows_m.get("dp")
    tag = ""
    if dp is None or dp["status"] == "refused":
        dp, tag = rows_m.get("dp-amp"), " (vs dp-amp)"
    s = rows_m.get(solver)
    if dp is None or s is None or dp["time_s"] <= 0:
        return "-"
    return f"{s['time_s'] / dp['time_s']:.1f}x{tag}"


def markdown(rows: list[dict], methods: tuple[str, ...]) -> str:
    head = ["instance", "model", "min", "GPUs", "types", "layers", "best objective"] + list(methods) + [
        "cbc / dp time", "cpsat / dp time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        values = [m["objective_value"] for m in r["methods"].values() if m["objective_value"] is not None]
        best = _value(min(values) if values else None, r["objective"])
        cells = [r["instance"], r["model"], r["objective"], f"{r['gpus']:,}", str(r["node_types"]), str(r["layers"]),
                 best] + [_cell(r["methods"][m], r["objective"]) for m in methods] + [
                 ratio(r["methods"], "cbc"), ratio(r["methods"], "cpsat")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], methods: tuple[str, ...], path: Path, timeout_s: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in methods:
        pts = sorted((r["gpus"], r["methods"][method]["time_s"], r["methods"][method]["status"]) for r in rows
                     if method in r["methods"] and r["methods"][method]["status"] != "refused")
        if not pts:
            continue
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method, alpha=0.85)
        stopped = [p for p in pts if p[2] == "timeout" or p[1] >= timeout_s * 0.99]
        if stopped:
            ax.scatter([p[0] for p in stopped], [p[1] for p in stopped], marker="x", s=80, color=line.get_color())
    ax.axhline(timeout_s, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs in the cluster")
    ax.set_ylabel("search time, s (median)")
    ax.set_title(f"Search time against cluster size (x: stopped at the {timeout_s:g} s timeout)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Three small instances, one run, 10 s timeout.")
    parser.add_argument("--runs", type=int, default=None, help="Runs per method (median); default 3, quick 1.")
    parser.add_argument("--timeout", type=float, default=None, help="Seconds per method run; default 30, quick 10.")
    parser.add_argument("--methods", default=",".join(METHODS), help="Comma-separated methods.")
    parser.add_argument("--out-dir", type=Path, default=None, help="Where to write the PNG and JSON (default docs/).")
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    timeout_s = args.timeout or (10.0 if args.quick else 30.0)
    methods = tuple(m.strip() for m in args.methods.split(","))
    out_dir = args.out_dir if args.out_dir is not None else (None if args.quick else Path("docs"))
    instances = QUICK if args.quick else FULL
    start = time.perf_counter()
    rows = [measure(inst, methods, runs, timeout_s) for inst in instances]
    print(markdown(rows, methods))
    print(f"\n{len(rows)} instances, {runs} run(s) per method, timeout {timeout_s:g} s, "
          f"{time.perf_counter() - start:.0f} s in all on {platform.machine()} / Python {platform.python_version()}")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        plot(rows, methods, out_dir / "search_scaling.png", timeout_s)
        (out_dir / "search_scaling.json").write_text(json.dumps(
            {"runs": runs, "timeout_s": timeout_s, "rows": rows}, indent=2, sort_keys=True) + "\n")
        print(f"wrote {out_dir / 'search_scaling.png'} and {out_dir / 'search_scaling.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
