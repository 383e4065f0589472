"""What the interleaved pipeline is worth (docs/knobs.md, "Interleaved pipeline").

    python bench/knobs_interleaved.py MODEL CLUSTER cost|time TIME_LIMIT_S [with|without|both [GLOBAL_BATCH]]

Solves `--target megatron`'s search space (space_from_target, what `solve --target megatron` searches: v in
targets.VIRTUAL_STAGES) and the same space with v = 1 only, with CP-SAT and the time limit given, and prints one line
per run: status, proven gap, the plan (tp, dp, pp, v, recomputation, nodes), training time, cost, solve time.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from optsearch.cli.options import problem_from_options, space_from_target
from optsearch.cli.solve_cmd import budget_from_options
from optsearch.solver import solve
from optsearch.units import format_duration, format_usd


def main(model: str, cluster: str, minimize: str, limit_s: float, which: str = "both", gbs: str | None = None) -> None:
    problem = problem_from_options(model, cluster, "analytic", int(gbs) if gbs else None, None, None,
                                   target="megatron")
    budget = budget_from_options(minimize, None, None, None, None)
    target = space_from_target("megatron", problem)
    runs = {"with": target, "without": replace(target, virtual_stages=(1,))}
    for name, options in runs.items():
        if which not in ("both", name):
            continue
        t0 = time.perf_counter()
        result = solve(problem, budget, solver="cpsat", options=options, time_limit_s=limit_s)
        elapsed = time.perf_counter() - t0
        if result.plan is None:
            print(f"{model} {cluster} {minimize} {name}: {result.status} after {elapsed:.1f} s", flush=True)
            continue
        plan, est = result.plan, result.estimate
        gap = result.gap
        modes = ",".join(sorted({s.recompute for s in plan.stages if s.num_layers > 0}))
        nodes = " + ".join(f"{n} x {t}" for t, n in sorted(est.nodes.items()))
        print(f"{model} {cluster} {minimize} {name}: {result.status}, gap {'-' if gap is None else f'{gap:.2%}'}, "
              f"{format_usd(est.cost_usd)}, {format_duration(est.training_time_s)} "
              f"(tp {plan.tp}, dp {plan.dp}, pp {plan.pp}, v {plan.virtual_stages}, mb {plan.micro_batch_size}, "
              f"m {est.num_micro_batches}, {modes}, {nodes}; balance {plan.balance}), {elapsed:.1f} s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6, 7) or sys.argv[3] not in ("cost", "time"):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), *sys.argv[5:])
