"""What block recomputation is worth (docs/knobs.md, "Block recomputation").

    python bench/knobs_block.py MODEL CLUSTER cost|time TIME_LIMIT_S [--set KEY=VALUE ...]

Solves `--target megatron`'s space (one recomputation mode on every stage, or block recomputation with one N) and the
same space without block recomputation, with CP-SAT and the same time limit each, and prints one JSON line per solve:
status, proven gap, objective, the plan's shape and the solve time. --set edits the job as `solve --set` does.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from optsearch.cli.options import problem_from_options, space_from_target
from optsearch.cli.solve_cmd import budget_from_options
from optsearch.solver import solve


def main(model: str, cluster: str, minimize: str, limit_s: float, sets: list[str]) -> None:
    problem = problem_from_options(model, cluster, "analytic", None, None, None, sets or None, target="megatron")
    budget = budget_from_options(minimize, None, None, None, None)
    with_block = space_from_target("megatron", problem)
    for name, options in (("without block", replace(with_block, block_recompute=False)), ("with block", with_block)):
        t0 = time.perf_counter()
        r = solve(problem, budget, solver="cpsat", options=options, time_limit_s=limit_s)
        elapsed = time.perf_counter() - t0
        row = {"model": model, "cluster": cluster, "set": sets, "minimize": minimize, "space": name,
               "time_limit_s": limit_s, "status": r.status, "gap": r.gap, "solve_s": round(elapsed, 1)}
        if r.plan is not None:
            p, e = r.plan, r.estimate
            modes = sorted({s.recompute for s in p.stages if s.num_layers > 0})
            row.update(cost_usd=round(e.cost_usd), days=round(e.training_time_s / 86400, 2), tp=p.tp, dp=p.dp,
                       pp=p.pp, mbs=p.micro_batch_size, recompute=modes, recompute_num_layers=p.recompute_num_layers,
                       nodes=e.nodes, balance=p.balance)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set" and i + 1 < len(args)]
    rest = [a for i, a in enumerate(args) if a != "--set" and (i == 0 or args[i - 1] != "--set")]
    if len(rest) != 4 or rest[2] not in ("cost", "time"):
        sys.exit(__doc__)
    main(rest[0], rest[1], rest[2], float(rest[3]), sets)
