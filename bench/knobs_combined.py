"""What issue 16's knobs are worth together, on the merged code (docs/knobs.md, "All knobs together").

    python bench/knobs_combined.py TIME_LIMIT_S [OUT.json]

For each case, solves `--target megatron`'s full space (block recomputation, interleaving, context parallelism,
expert parallelism, the distributed optimizer) and the same space with all five off (cp = 1, v = 1, ep = 1, no block,
`job.distributed_optimizer = false`), with CP-SAT and the same time limit each, and prints one JSON line per solve:
status, proven gap, objective, the plan's shape and the solve time. With OUT.json, writes the rows there too.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from optsearch.cli.options import problem_from_options, space_from_target
from optsearch.cli.solve_cmd import budget_from_options
from optsearch.solver import solve

CASES = [  # model, cluster, minimize, --set edits
    ("gpt3-175b", "aws-p4d", "cost", []),
    ("llama2-70b", "aws-p4d", "cost", []),
    ("megatron-1t", "mixed-pool-8k", "cost", []),
    ("mixtral-8x7b", "mixed-pool-8k", "time", []),
    ("llama2-7b", "aws-p4d", "cost", ["model.seq_length=32768"]),
]


def _row(model, cluster, minimize, sets, space, limit_s, result, elapsed) -> dict:
    row = {"model": model, "cluster": cluster, "set": sets, "minimize": minimize, "space": space,
           "time_limit_s": limit_s, "status": result.status, "gap": result.gap, "solve_s": round(elapsed, 1)}
    if result.plan is not None:
        p, e = result.plan, result.estimate
        row.update(cost_usd=round(e.cost_usd), days=round(e.training_time_s / 86400, 2), tp=p.tp, dp=p.dp, pp=p.pp,
                   mbs=p.micro_batch_size, cp=p.cp, ep=p.ep, v=p.virtual_stages,
                   distributed_optimizer=p.distributed_optimizer, recompute_num_layers=p.recompute_num_layers,
                   recompute=sorted({s.recompute for s in p.stages if s.num_layers > 0}), nodes=e.nodes)
    return row


def main(limit_s: float, out: str | None) -> None:
    rows = []
    for model, cluster, minimize, sets in CASES:
        budget = budget_from_options(minimize, None, None, None, None)
        full = problem_from_options(model, cluster, "analytic", None, None, None, sets or None, target="megatron")
        plain = problem_from_options(model, cluster, "analytic", None, None, None,
                                     [*sets, "job.distributed_optimizer=false"], target="megatron")
        all_on = space_from_target("megatron", full)
        all_off = replace(space_from_target("megatron", plain), context_parallel_sizes=(1,), virtual_stages=(1,),
                          expert_parallel_sizes=(1,), block_recompute=False)
        for space, problem, options in (("without the issue-16 knobs", plain, all_off), ("all knobs", full, all_on)):
            t0 = time.perf_counter()
            result = solve(problem, budget, solver="cpsat", options=options, time_limit_s=limit_s)
            row = _row(model, cluster, minimize, sets, space, limit_s, result, time.perf_counter() - t0)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(float(sys.argv[1]), sys.argv[2] if len(sys.argv) == 3 else None)
