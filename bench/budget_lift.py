"""Which candidates hold a time<=B row's bound, and their positional bound under B with the Lagrangian lift off and
on (issue 14, item 3, round 18, budgetbound; docs/solver.md "Round 18: time under a cost budget").

    python bench/budget_lift.py --model megatron-1t --cluster mixed-pool-3k --max-cost-usd 16514287.107377557 \
        --time-limit 8.8 --top 6

Solves the row on the CPU clock (time.perf_counter replaced by time.process_time, as bench/proof_rows.py
--cpu-clock), dumps its queue and parked list as the loop ends (solver.QUEUE_DUMP), and for the `top` least entries
prints the key, where it sits (queue or parked), its level, its bound in the loop, and its positional bound under B
recomputed afresh with no cutoff, with positional.BUDGET_LAGRANGE off (pos0) and on (pos1), and their CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.bounds import interleaving_factor
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation import positional as P
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=args.max_cost_usd)
    wall = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
    time.perf_counter = wall
    print("value", result.objective_value, "bound", result.bound, "gap", result.gap)
    queue, parked, _ = S.QUEUE_DUMP[-1]
    names = {S.CHEAP: "cheap", S.REFINED: "refined", S.POSITIONAL: "positional"}
    entries = sorted([(e[0], "queue", e[3]) for e in queue] + [(e[0], "parked", e[3]) for e in parked],
                     key=lambda e: e[0])
    memo = S.Memo(problem, options)
    switch = P.BUDGET_LAGRANGE
    for lower, where, item in entries[:args.top]:
        cand = item.cand
        row = {"key": cand.key, "where": where, "level": names[item.level] + ("+inflight" if item.inflight else ""),
               "lower": round(lower)}
        for on in (False, True):
            P.BUDGET_LAGRANGE = on
            t0 = time.process_time()
            if cand.v == 1:
                sk = memo.skeleton(cand)
                sk.positional = None
                got = P.positional_bound(sk, budget).bound if sk.most is not None else math.nan
            else:
                sib = memo.skeleton(replace(cand, v=1))
                sib.positional = None
                got = (S.interleaved_positional_bound(sib, budget, interleaving_factor(item.terms.m, cand.pp, cand.v))
                       if sib.most is not None else math.nan)
            row[f"pos{int(on)}"] = round(got) if math.isfinite(got) else got
            row[f"cpu{int(on)}"] = round(time.process_time() - t0, 3)
        P.BUDGET_LAGRANGE = switch
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
