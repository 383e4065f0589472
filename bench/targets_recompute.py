"""What the engine target's one-recompute-mode rule costs (docs/targets.md, "What it changes on the catalog").

    python bench/targets_recompute.py MODEL CLUSTER cost|time [TIME_LIMIT_S]

Solves with CP-SAT, each within TIME_LIMIT_S (default: none):
  * per-stage: the cost model's per-stage space of the library (SpaceOptions(): recomputation chosen per stage, no cp,
    no interleaving, no block recomputation; what this table measured before issue 16's knobs);
  * per-stage + knobs: `--target megatron`'s space with recomputation chosen per stage instead of one setting for all
    stages (cp, v, ep and the distributed optimizer as the target searches them; no block recomputation, which is a
    plan-wide setting): the one-mode rule's own cost is the target against this;
  * target megatron: `--target megatron`'s space (one mode on every stage, or block recomputation).
Each per-stage optimum is also re-priced as `launch --recompute-superset` would run it when that superset is one mode
on every stage (none + selective -> selective; a mix with selective and full -> full uniform), and a none + full mix
as the block recomputation it is launched with (N = the most layers on a full stage; not with v > 1, which Megatron-LM
applies per chunk: then full uniform).
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


def main(model: str, cluster: str, minimize: str, time_limit_s: float | None = None) -> None:
    # priced as `solve --target megatron` prices it (flash attention where it runs, targets.engine_problem), all
    # three spaces alike
    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron")
    budget = budget_from_options(minimize, None, None, None, None)
    target_space = space_from_target("megatron", problem)
    spaces = {
        "per-stage": SpaceOptions(),
        "per-stage + knobs": replace(target_space, uniform_recompute=False, block_recompute=False),
        "target megatron": target_space,
    }

    def objective(e) -> float:
        return e.cost_usd if minimize == "cost" else e.training_time_s / 86400

    results = {}
    for name, options in spaces.items():
        t0 = time.perf_counter()
        results[name] = (solve(problem, budget, solver="cpsat", options=options, time_limit_s=time_limit_s),
                         time.perf_counter() - t0)
    target = results["target megatron"][0]
    e_t = estimate(problem, target.plan) if target.plan else None
    parts = [f"{model} {cluster} {minimize}"]
    for name, (r, seconds) in results.items():
        if r.plan is None:
            parts.append(f"{name}: no plan ({r.status}, {seconds:.1f} s)")
            continue
        plan, e = r.plan, estimate(problem, r.plan)
        modes = sorted({s.recompute for s in plan.stages if s.num_layers > 0}, key=ORDER.index)
        knobs = " ".join(f"{k} {v}" for k, v in (("tp", plan.tp), ("dp", plan.dp), ("pp", plan.pp), ("cp", plan.cp),
                                                  ("ep", plan.ep), ("v", plan.virtual_stages)) if v != 1 or k == "pp")
        if plan.recompute_num_layers is not None:
            modes = [f"block {plan.recompute_num_layers}"]
        gap = "optimal" if r.status == "optimal" else f"{r.status}, gap {r.gap:.1%}" if r.gap is not None else r.status
        text = f"{name}: {objective(e):,.2f} {modes} [{knobs}] ({gap}, {seconds:.1f} s)"
        if e_t is not None and name != "target megatron":
            text += f", target {objective(e_t) / objective(e) - 1:+.2%}"
        real_modes = {s.recompute for s in plan.stages if s.num_layers > 0}
        if name != "target megatron" and len(real_modes) > 1:
            mode = sorted(real_modes, key=ORDER.index)[-1]
            covered = replace(plan, stages=tuple(replace(s, recompute=mode) if s.num_layers > 0 else s
                                                 for s in plan.stages))
            if real_modes == {"none", "full"} and plan.virtual_stages == 1:  # launched as block: N the most on a full one
                n = max(s.num_layers for s in plan.stages if s.recompute == "full")
                covered = replace(covered, recompute_num_layers=n)
            text += f", superset {objective(estimate(problem, covered)) / objective(e) - 1:+.2%}"
        parts.append(text)
    print("; ".join(parts), flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5) or sys.argv[3] not in ("cost", "time"):
        sys.exit(__doc__)
    main(*sys.argv[1:4], float(sys.argv[4]) if len(sys.argv) == 5 else None)
