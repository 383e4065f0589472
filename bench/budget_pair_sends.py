"""The in-flight bound under a cost budget with and without each boundary's own send (inflight.BUDGET_PAIR_SENDS;
issue 14, item 3, round 22, rentflight; docs/solver.md "Round 22: ... (rentflight)").

    python bench/budget_pair_sends.py --model megatron-76b --cluster mixed-pool-8k --max-cost-usd 932121.48 \
        --time-limit 8.8 --top 400

Solves the row on the CPU clock (time.perf_counter replaced by time.process_time), dumps its queue and parked list as
the loop ends (solver.QUEUE_DUMP), and for the `top` least entries whose refined bound is finite computes the
in-flight bound under the budget afresh (a fresh memo a side, no cutoff) with the switch off and on: how many it
closes (None: no plan under B), how many it raises, the least value left, and the CPU seconds of each side.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--top", type=int, default=400)
    ap.add_argument("--show", type=int, default=12)
    ap.add_argument("--solve-off", action="store_true", help="the row solved with the switch off (the base's queue)")
    args = ap.parse_args()

    from optsearch import inflight as I
    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=args.max_cost_usd)
    wall = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    I.BUDGET_PAIR_SENDS = not args.solve_off and I.BUDGET_PAIR_SENDS
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
    time.perf_counter = wall
    print("value", result.objective_value, "bound", result.bound, "gap", result.gap)
    queue, parked, inc = S.QUEUE_DUMP[-1]
    entries = sorted([(e[0], e[3]) for e in queue] + [(e[0], e[3]) for e in parked], key=lambda e: e[0])
    switch = True
    got = {}
    for on in (False, True):
        I.BUDGET_PAIR_SENDS = on
        memo = S.Memo(problem, options)
        items = []
        for lower, item in entries[:args.top]:
            rf = S._bounded(problem, budget, item.terms, item.cand, True,
                            memo.refined_bound(item.terms, item.cand, budget))
            if rf is not None:
                items.append((item.cand.key, rf))
        t0 = time.process_time()
        got[on] = {key: S._inflight_bounded(memo, budget, rf) for key, rf in items}
        print(f"switch {on}: {len(items)} in-flight bounds, {time.process_time() - t0:.3f} s of CPU")
    I.BUDGET_PAIR_SENDS = switch
    for lower, item in entries[:args.show]:
        print("front", item.cand.key, round(lower, 1), got[False].get(item.cand.key), got[True].get(item.cand.key))
    off, on = got[False], got[True]
    closed = [k for k in off if off[k] is not None and on[k] is None]
    raised = [k for k in off if off[k] is not None and on[k] is not None and on[k] > off[k] * (1 + 1e-9)]
    lower = [k for k in off if on[k] is not None and (off[k] is None or on[k] < off[k] * (1 - 1e-9))]
    print(f"closed {len(closed)}, raised {len(raised)}, lowered (must be 0) {len(lower)}")
    for side, vals in (("off", off), ("on", on)):
        left = sorted(v for v in vals.values() if v is not None)
        print(f"least left ({side}):", [round(v, 1) for v in left[:5]], "incumbent", inc)
    for k in (closed + raised)[:args.show]:
        print(k, off[k], on[k])


if __name__ == "__main__":
    main()
