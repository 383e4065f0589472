"""--overlap-param-gather and --ddp-average-in-collective in the search (issue 15, paramgather): solve time and the
plans, priced as `optsearch solve --target megatron` prices them.

    python bench/paramgather_knob.py --time-limit 60 --out /tmp/after.json
    PYTHONPATH=/tmp/base python bench/paramgather_knob.py --time-limit 60 --out /tmp/before.json   # a checkout of main

One row at a time, in this process: CPU time (time.process_time) and wall clock around solve(), the status, value,
gap and the plan's degrees with its distributed-optimizer, param-gather and averaging settings. Results:
docs/benchmarks.md "--overlap-param-gather and --ddp-average-in-collective in the search"."""

from __future__ import annotations

import argparse
import json
import time

ROWS = [  # (model, cluster, objective, max_time_s): docs/benchmarks.md's rows and two one-stage rows
    ("gpt3-13b", "mixed-pool-8k", "time", None),
    ("gpt3-13b", "mixed-pool-8k", "cost", None),
    ("gpt2-medium", "aws-g4dn", "time", None),
    ("gpt2-xl", "fasop-a100-a10", "cost", 30 * 86400.0),
    ("llama2-70b", "mixed-pool-8k", "time", None),
    ("llama2-70b", "mixed-pool-8k", "cost", None),
]


def run(model: str, cluster: str, objective: str, max_time_s: float | None, limit_s: float) -> dict:
    from optsearch.cli.options import problem_from_options, space_from_target
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget

    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron")
    options = space_from_target("megatron", problem)
    budget = Budget(objective=objective, max_time_s=max_time_s)
    cpu, wall = time.process_time(), time.perf_counter()
    result = solve(problem, budget, solver="cpsat", time_limit_s=limit_s, options=options)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    plan = result.plan
    return dict(model=model, cluster=cluster, objective=objective, max_time_s=max_time_s, time_limit_s=limit_s,
                status=result.status, objective_value=result.objective_value, gap=result.gap,
                cpu_s=round(cpu, 2), wall_s=round(wall, 2),
                plan=None if plan is None else dict(
                    tp=plan.tp, dp=plan.dp, micro_batch_size=plan.micro_batch_size, pp=plan.pp, cp=plan.cp,
                    v=plan.virtual_stages, distributed_optimizer=plan.distributed_optimizer,
                    overlap_grad_reduce=plan.overlap_grad_reduce, overlap_param_gather=plan.overlap_param_gather,
                    ddp_average_in_collective=getattr(plan, "ddp_average_in_collective", False),
                    types=[s.node_type for s in plan.stages],
                    balance=[s.num_layers for s in plan.stages]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--rows", default=None, help="comma-separated row indexes (default: all)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    picked = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    out = []
    for row in picked:
        rec = run(*row, args.time_limit)
        print(json.dumps(rec), flush=True)
        out.append(rec)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
