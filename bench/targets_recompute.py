"""What the engine target's one-recompute-mode rule costs (docs/targets.md, "What it changes on the catalog").

    python bench/targets_recompute.py MODEL CLUSTER cost|time

Solves the cost model's per-stage space (SpaceOptions(): recomputation chosen per stage) and `--target megatron`'s space
with CP-SAT, and re-prices the per-stage optimum as `launch --recompute-superset` would run it when that superset is one
mode on every stage (none + selective -> selective; a mix with selective and full -> full uniform), and a none + full
mix as the block recomputation it is launched with (N = the most layers on a full stage).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from optsearch.candidates import SpaceOptions
from optsearch.cli.options import problem_from_options, space_from_target
from optsearch.cli.solve_cmd import budget_from_options
from optsearch.costmodel import estimate
from optsearch.solver import solve

ORDER = ["none", "selective", "full"]


def main(model: str, cluster: str, minimize: str) -> None:
    problem = problem_from_options(model, cluster, "analytic", None, None, None)
    budget = budget_from_options(minimize, None, None, None, None)

    def objective(e) -> float:
        return e.cost_usd if minimize == "cost" else e.training_time_s / 86400

    t0 = time.perf_counter()
    per_stage = solve(problem, budget, solver="cpsat", options=SpaceOptions())
    t1 = time.perf_counter()
    target = solve(problem, budget, solver="cpsat", options=space_from_target("megatron", problem))
    t2 = time.perf_counter()
    plan = per_stage.plan
    modes = sorted({s.recompute for s in plan.stages if s.num_layers > 0}, key=ORDER.index)
    e_p, e_t = estimate(problem, plan), estimate(problem, target.plan)
    superset = "-"
    if len(modes) > 1:
        mode = modes[-1]
        covered = replace(plan, stages=tuple(replace(s, recompute=mode) if s.num_layers > 0 else s
                                             for s in plan.stages))
        if set(modes) == {"none", "full"}:  # launched as block: the first N of every stage, N the most on a full one
            n = max(s.num_layers for s in plan.stages if s.recompute == "full")
            covered = replace(covered, recompute_num_layers=n)
        superset = f"{objective(estimate(problem, covered)) / objective(e_p) - 1:+.2%}"
    print(f"{model} {cluster} {minimize}: per-stage {objective(e_p):,.2f} {modes} ({t1 - t0:.1f} s); "
          f"target megatron {objective(e_t):,.2f} ({objective(e_t) / objective(e_p) - 1:+.2%}, {t2 - t1:.1f} s); "
          f"superset {superset}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("cost", "time"):
        sys.exit(__doc__)
    main(*sys.argv[1:4])
