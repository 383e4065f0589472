"""The in-flight step under a cost budget with and without a switch, on a time<=B row's front (issue 14, item 3,
round 20, inflightb; docs/solver.md "Round 20: the in-flight step under a cost budget below the incumbent").

    python bench/budget_inflight_ab.py --model megatron-39b --cluster mixed-pool-8k --max-cost-usd 516104.72 \
        --switch inflight.BUDGET_CUTOFF --top 400 --passes 2

Runs the row on the CPU clock (8.8 s, as bench/proof_rows.py --cpu-clock) with solver.QUEUE_DUMP set; takes the
`top` queue entries with the least bounds below the incumbent whose refined bound under B leaves a plan; then, in
passes with the switch off and on (interleaved, a fresh memo each pass), their in-flight bounds
(solver._inflight_bounded) with the incumbent times each --scale as the cutoff. Prints the CPU of each pass and
the comparison: values below the cutoff must be equal bit for bit, and where the switch-off value rules the
candidate out (None, or at least the cutoff x (1 - INCUMBENT_REL)) the switch-on value must too, and vice versa.
"""

from __future__ import annotations

import argparse
import json
import math
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--switch", default="inflight.BUDGET_CUTOFF")
    ap.add_argument("--top", type=int, default=400)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--scale", type=float, nargs="*", default=[1.0, 0.8])
    args = ap.parse_args()

    import optsearch.inflight as I
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    mod, name = args.switch.split(".")
    owner = {"inflight": I, "solver": S}[mod]
    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=args.max_cost_usd)
    wall_clock = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
    time.perf_counter = wall_clock
    queue, parked, inc = S.QUEUE_DUMP[-1]
    entries = sorted([(e[0], e[3]) for e in queue + parked], key=lambda e: e[0])
    below = [e for e in entries if e[0] < inc * (1 - S.INCUMBENT_REL)]
    memo = S.Memo(problem, options)
    items = []
    for _, item in below:
        if len(items) >= args.top:
            break
        refined = S._bounded(problem, budget, item.terms, item.cand, True,
                             memo.refined_bound(item.terms, item.cand, budget))
        if refined is not None:
            items.append(refined)
    asks = [(item, inc * s) for s in args.scale for item in items]
    values, spent = {}, {False: [], True: []}
    for p in range(args.passes):
        for flag in (False, True):
            setattr(owner, name, flag)
            fresh = S.Memo(problem, options)
            t0 = time.process_time()
            got = [S._inflight_bounded(fresh, budget, item, 0.0, cut) for item, cut in asks]
            spent[flag].append(round(time.process_time() - t0, 3))
            if flag in values and values[flag] != got:
                raise SystemExit("not deterministic")
            values[flag] = got
    same = below_cut = out_both = disagree = 0
    for (item, cut), a, b in zip(asks, values[False], values[True]):
        test = cut * (1 - S.INCUMBENT_REL)
        off_out, on_out = a is None or a >= test, b is None or b >= test
        if a == b:
            same += 1
        if off_out and on_out:
            out_both += 1
        elif not off_out and not on_out and a == b:
            below_cut += 1
        else:
            disagree += 1
    print(json.dumps({"model": args.model, "cluster": args.cluster, "switch": args.switch, "incumbent": inc,
                      "asks": len(asks), "candidates": len(items), "cpu_off": spent[False], "cpu_on": spent[True],
                      "equal_values": same, "below_cut_equal": below_cut, "ruled_out_both": out_both,
                      "disagree": disagree, "nan": sum(1 for v in values[True] if v is not None and math.isnan(v))}))


if __name__ == "__main__":
    main()
