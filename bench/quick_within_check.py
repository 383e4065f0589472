"""Check solver._quick_within on a time<=B row (issue 14, item 3, round 20, inflightb): the row solved on the CPU
clock with every call of _quick_within also computed the old way (Memo.quick_plans on a copy of the memo's cache, so
the run's own work is unchanged but for the check): the plans it left out, priced, all break the budget, and the
kept list is the whole list less them, in order.

    python bench/quick_within_check.py megatron-39b mixed-pool-8k 516104.72 8.8
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    model, cluster, cap, limit = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.search import budget_violations
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=cap)
    counts = {"calls": 0, "plans": 0, "left_out": 0, "left_out_meeting": 0, "mismatch": 0, "check_cpu": 0.0}
    inner = S._quick_within

    def checked(memo, budget, sk, floor_s):
        got = inner(memo, budget, sk, floor_s)
        t0 = time.process_time()
        counts["calls"] += 1
        fresh = S.Memo(memo.problem, memo.options)
        whole = fresh.quick_plans(sk)
        counts["plans"] += len(whole)
        kept = [(p, e) for p, e in whole if any(p == q for q, _ in got)]
        if [p for p, _ in kept] != [p for p, _ in got]:
            counts["mismatch"] += 1
        for plan, est in whole:
            if not any(plan == q for q, _ in got):
                counts["left_out"] += 1
                counts["left_out_meeting"] += not budget_violations(plan, est, budget)
        counts["check_cpu"] += time.process_time() - t0
        return got

    S._quick_within = checked
    time.perf_counter = time.process_time
    result = S.solve(problem, budget, time_limit_s=limit, options=options)
    print(json.dumps({"model": model, "cluster": cluster, "value": result.objective_value, "gap": result.gap,
                      **counts}))


if __name__ == "__main__":
    main()
