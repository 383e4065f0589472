"""The gather floor by pp (issue 15, gatherfloor): how many candidates' cheap bounds lie at or below a reference
plan's value, i.e. what the search must still look at once it holds that plan, and the least bound, for pp = 1 and
pp > 1 candidates, as `optsearch solve --target megatron` builds them (solver._candidates, no budget); and of the
FRONT candidates with the least cheap bounds, how many stay at or below it after the refined and in-flight bounds
(solver.Memo.refined_bound, solver._inflight_bounded), as the search's queue refines them.
Deterministic (no time limit, no load effect): run it on two checkouts and compare.

    python bench/gather_floor_bounds.py
    PYTHONPATH=/tmp/before python bench/gather_floor_bounds.py     # from outside the worktree: a checkout first

Results: docs/benchmarks.md "The gather floor by pp"."""

from __future__ import annotations

import json
import time

ROWS = [  # (model, cluster, objective, reference value: the best plan the 10 s CLI runs found, docs/benchmarks.md)
    ("gpt3-175b", "mixed-pool-8k", "cost", 1_795_081.6166561812),
    ("gpt3-175b", "mixed-pool-8k", "time", 306_410.9673860066),
    ("llama2-70b", "mixed-pool-8k", "time", 742_665.1401087089),
]


def row(model: str, cluster: str, objective: str, reference: float) -> dict:
    from optsearch.cli.options import problem_from_options, space_from_target
    from optsearch.solver import Bounded, Memo, _candidates, _inflight_bounded
    from optsearch.spec.budget import Budget

    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron")
    options = space_from_target("megatron", problem)
    cpu = time.process_time()
    memo, budget = Memo(problem, options), Budget(objective=objective)
    cands, total = _candidates(memo, budget)
    cpu = time.process_time() - cpu
    out = dict(model=model, cluster=cluster, objective=objective, reference=reference, candidates=len(cands),
               build_cpu_s=round(cpu, 2))
    for name, pick in (("pp1", lambda b: b.cand.pp == 1), ("pp>1", lambda b: b.cand.pp > 1)):
        lbs = [b.lower_bound for b in cands if pick(b)]
        out[name] = dict(candidates=len(lbs), at_or_below_reference=sum(lb <= reference for lb in lbs),
                         least_bound=min(lbs) if lbs else None)
    front = sorted(cands, key=lambda b: b.lower_bound)[:FRONT]
    cpu = time.process_time()
    kept = 0
    for b in front:
        refined = memo.refined_bound(b.terms, b.cand, budget)
        if not refined.feasible:
            continue
        value = refined.cost_per_iteration_usd if objective == "cost" else refined.iteration_s
        lb = max(b.lower_bound, problem.iterations * value)
        if lb > reference:
            continue
        got = _inflight_bounded(memo, budget, Bounded(b.cand, lb, b.terms), 0.0, reference)
        kept += got is not None and got <= reference
    out["front"] = dict(candidates=len(front), at_or_below_reference=kept, cpu_s=round(time.process_time() - cpu, 2))
    return out


FRONT = 300

if __name__ == "__main__":
    for r in ROWS:
        print(json.dumps(row(*r)), flush=True)
