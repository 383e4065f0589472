"""The loop's cheap -> refined step on a budget row's front, alone and repeatable (round 13, budgetbound).

    python bench/budget_refine.py --model llama2-13b --cluster mixed-pool-3k --objective time \
        --max-cost-usd 976995.1026918781 --below 4416584.684919798 --count 2500

The candidates of the row's list (solver._candidates, ALL settings) whose cheap bound lies below --below (the
optimum: the ones the loop must refine before its bound reaches it), the least --count of them, refined as the
loop's CHEAP step does (Memo.refined_bound and _bounded) on a fresh memo: CPU seconds of that step alone, and how
many of them the refined bound prunes (no plan meets the budget) or leaves below --below.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--below", type=float, required=True)
    ap.add_argument("--count", type=int, default=2500)
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    memo = S.Memo(problem, options)
    t0 = time.process_time()
    bounded, total = S._candidates(memo, budget)
    list_s = time.process_time() - t0
    front = sorted((b for b in bounded if b.lower_bound < args.below), key=lambda b: (b.lower_bound, b.cand.key))
    front = front[:args.count]
    fresh = S.Memo(problem, options, terms=memo.terms, cheap=memo.cheap, cheap_by_pp=memo.cheap_by_pp,
                   calls=memo.calls)
    t0 = time.process_time()
    out = [S._bounded(problem, budget, b.terms, b.cand, True, fresh.refined_bound(b.terms, b.cand, budget))
           for b in front]
    refine_s = time.process_time() - t0
    print(json.dumps({"candidates": total, "listed": len(bounded), "list_cpu_s": round(list_s, 3),
                      "front": len(front), "refine_cpu_s": round(refine_s, 3),
                      "pruned": sum(o is None for o in out),
                      "still_below": sum(1 for o in out if o is not None and o.lower_bound < args.below),
                      "bounds_sum": sum(o.lower_bound for o in out if o is not None)}))


if __name__ == "__main__":
    main()
