"""The distributed optimizer as a searched knob under --overlap-grad-reduce (issue 15, distopt): solve time and the
plans, on the rows the issue names, priced as `optsearch solve --target megatron` prices them.

    python bench/distopt_knob.py --time-limit 30 --out /tmp/after.json
    PYTHONPATH=/tmp/base python bench/distopt_knob.py --time-limit 30 --out /tmp/before.json   # a checkout of main

One row at a time, in this process: CPU time (time.process_time) and wall clock around solve(), the status, value,
gap and the plan's degrees with its distributed-optimizer setting. Results: docs/benchmarks.md "Distributed optimizer
under the overlap"."""

from __future__ import annotations

import argparse
import json
import time

ROWS = [  # (model, cluster, objective, max_time_s): README's first command, then the four rows
    ("gpt2-xl", "fasop-a100-a10", "cost", 30 * 86400.0),
    ("gpt3-13b", "mixed-pool-8k", "time", None),
    ("gpt3-13b", "mixed-pool-8k", "cost", None),
    ("llama2-70b", "mixed-pool-8k", "time", None),
    ("llama2-70b", "mixed-pool-8k", "cost", None),
]


def run(model: str, cluster: str, objective: str, max_time_s: float | None, limit_s: float,
        param_gather_pipelined: bool = False) -> dict:
    from optsearch.cli.options import problem_from_options, space_from_target
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget

    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron",
                                   param_gather_pipelined=param_gather_pipelined)  # solve --pipelined-param-gather
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
                    overlap_grad_reduce=plan.overlap_grad_reduce,
                    # round 10's fields (bench/paramgather_knob.py runs through here; older checkouts lack them)
                    overlap_param_gather=getattr(plan, "overlap_param_gather", False),
                    ddp_average_in_collective=getattr(plan, "ddp_average_in_collective", False),
                    types=[s.node_type for s in plan.stages], balance=[s.num_layers for s in plan.stages]))


def main(rows: list[tuple] = ROWS, doc: str = __doc__) -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--rows", default=None, help="comma-separated row indexes (default: all)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    picked = rows if args.rows is None else [rows[int(i)] for i in args.rows.split(",")]
    out = []
    for row in picked:
        rec = run(*row, args.time_limit)
        print(json.dumps(rec), flush=True)
        out.append(rec)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
