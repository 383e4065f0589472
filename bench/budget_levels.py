"""Which level of the loop rules out the entries that hold a time<=B row's bound, and at what CPU (issue 14, item 3,
round 19, budgetlow; docs/solver.md "Round 19: time under a cost budget at the cheap level (budgetlow, 2026-11-24)").

    python bench/budget_levels.py --model megatron-39b --cluster mixed-pool-8k --max-cost-usd 516104.72289168957 \
        --time-limit 8.8 --top 150

Runs the row minimizing time under the cost budget on the CPU clock (as bench/proof_rows.py --cpu-clock), with
solver.QUEUE_DUMP set; then, for the `top` queue entries with the least bounds below the incumbent, on a fresh memo:
the refined bound under B (Memo.refined_bound), the in-flight bound under B (solver._inflight_bounded) where the
refined one leaves a plan, the positional bound under B and the positional least cost without a budget (v > 1:
through the v = 1 sibling, solver.interleaved_positional_bound), each with its CPU seconds; one JSON line per entry,
then a summary: how many entries each level rules out (no plan meets B), and how many have a least cost above B.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from dataclasses import replace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--top", type=int, default=150)
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.bounds import interleaving_factor
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation.positional import positional_bound
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=args.max_cost_usd)
    free = Budget(objective="cost")
    wall_clock = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    cpu0 = time.process_time()
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
    cpu = time.process_time() - cpu0
    time.perf_counter = wall_clock
    queue, parked, inc = S.QUEUE_DUMP[-1]
    names = {S.CHEAP: "cheap", S.REFINED: "refined", S.POSITIONAL: "positional"}
    entries = sorted([(e[0], e[3]) for e in queue] + [(e[0], e[3]) for e in parked], key=lambda e: e[0])
    below = [e for e in entries if inc is not None and e[0] < inc * (1 - 1e-9)]
    print(json.dumps({"status": result.status, "value": result.objective_value, "gap": result.gap,
                      "cpu": round(cpu, 2), "stats": result.stats, "below_incumbent": len(below),
                      "by_level": dict(Counter(names[i.level] + ("+inflight" if i.inflight else "")
                                               for _, i in below))}))
    memo = S.Memo(problem, options)
    out = Counter()
    spent = Counter()
    for lower, item in below[:args.top]:
        cand, terms = item.cand, item.terms
        row = {"key": cand.key, "level": names[item.level] + ("+inflight" if item.inflight else ""),
               "lower": round(lower, 1)}
        t0 = time.process_time()
        refined = S._bounded(problem, budget, terms, cand, True, memo.refined_bound(terms, cand, budget))
        spent["refined"] += (dt := time.process_time() - t0)
        row["refined"], row["refined_cpu"] = None if refined is None else round(refined.lower_bound, 1), round(dt, 4)
        inflight = None
        if refined is not None:
            t0 = time.process_time()
            inflight = S._inflight_bounded(memo, budget, refined)
            spent["inflight"] += (dt := time.process_time() - t0)
            row["inflight"], row["inflight_cpu"] = None if inflight is None else round(inflight, 1), round(dt, 4)
        t0 = time.process_time()
        pos = least_cost = None
        if cand.v == 1 and memo.skeleton(cand).most is not None:
            sk = memo.skeleton(cand)
            pos, least_cost = positional_bound(sk, budget).bound, positional_bound(sk, free).bound
        elif cand.v > 1 and (sib := memo.skeleton(replace(cand, v=1))).most is not None:
            factor = interleaving_factor(terms.m, cand.pp, cand.v)
            pos = S.interleaved_positional_bound(sib, budget, factor)
            least_cost = S.interleaved_positional_bound(sib, free, factor)
        spent["positional (both)"] += (dt := time.process_time() - t0)
        row["positional"], row["least_cost"], row["positional_cpu"] = pos, least_cost, round(dt, 3)
        print(json.dumps(row), flush=True)
        out["ruled out by refined" if refined is None else "ruled out by in-flight" if inflight is None
            else "left to positional"] += 1
        out["positional: no plan under B"] += pos is not None and math.isinf(pos)
        out["least cost above B"] += least_cost is not None and least_cost > args.max_cost_usd
    print(json.dumps({"entries": min(args.top, len(below)), **out, "cpu": {k: round(v, 3) for k, v in spent.items()}}))


if __name__ == "__main__":
    main()
