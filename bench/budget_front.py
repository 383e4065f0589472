"""Which candidates hold the loop's front (the reported bound) when a budget row's solve ends, and how sharp their
bounds are (issue 14 item 3, round 13 budgetbound).

    python bench/budget_front.py --model llama2-13b --cluster mixed-pool-3k --objective time \
        --max-cost-usd 976995.1026918781 --time-limit 8.8 --warm-start /tmp/p.json --top 12 --solve-s 20

Runs the row as bench/proof_rows.py does (the solver's clock on CPU time), with solver.QUEUE_DUMP set, then for the
`top` entries of the loop's queue and parked with the least bounds prints the level each carries (cheap, refined,
in-flight, positional, or parked after a model slice) and, computed afresh without a cutoff: its cheap, refined,
in-flight and positional bounds under the budget and, with --solve-s, its own best plan under the budget (its
model solved alone for that long: value and the backend's bound). Also: how many entries lie below the incumbent.
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
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--warm-start", default=None)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--solve-s", type=float, default=0.0, help="solve each front candidate's model alone this long")
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation.model import build
    from optsearch.formulation.positional import positional_bound
    from optsearch.bounds import interleaving_factor
    from optsearch.plan import plan_from_dict
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    warm = None
    if args.warm_start:
        with open(args.warm_start) as fh:
            warm = plan_from_dict(json.load(fh), args.warm_start)
    wall_clock = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    S.LOOP_TIMES = {}
    cpu0 = time.process_time()
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options, warm_start=warm)
    cpu = time.process_time() - cpu0
    time.perf_counter = wall_clock
    queue, parked, inc = S.QUEUE_DUMP[-1]
    print(f"status {result.status} value {result.objective_value} bound {result.bound} gap {result.gap} cpu {cpu:.2f}")
    print("stats", json.dumps(result.stats))
    loop_start = S.LOOP_TIMES.pop("loop start", cpu0) - cpu0
    print(f"loop from {loop_start:.2f} s of CPU;", {k: round(v, 3) for k, v in S.LOOP_TIMES.items()})
    names = {S.CHEAP: "cheap", S.REFINED: "refined", S.POSITIONAL: "positional"}
    entries = [(e[0], "queue", e[3]) for e in queue] + [(e[0], "parked", e[3]) for e in parked]
    entries.sort(key=lambda e: e[0])
    below = [e for e in entries if inc is not None and e[0] < inc * (1 - 1e-9)]
    print(f"incumbent {inc}; entries {len(entries)}, below the incumbent {len(below)}")
    levels = Counter((where, names[e.level] + ("+inflight" if e.inflight else "")) for _, where, e in below)
    print("below the incumbent by level:", dict(levels))
    for frac in (0.5, 0.75, 0.9, 0.99):
        n = sum(1 for e in below if e[0] < inc * frac)
        print(f"  below {frac:.2f} x incumbent: {n}")
    memo = S.Memo(problem, options)
    for lower, where, item in entries[:args.top]:
        cand, terms = item.cand, item.terms
        level = names[item.level] + ("+inflight" if item.inflight else "") + (f" tries={item.tries}" if item.tries else "")
        row = {"key": cand.key, "where": where, "level": level, "lower": round(lower, 1),
               "gpus": cand.gpus_per_stage * cand.pp}
        ch = S._bounded(problem, budget, terms, cand, False, memo.cheap_bound(terms, cand))
        row["cheap"] = None if ch is None else round(ch.lower_bound, 1)
        rf = S._bounded(problem, budget, terms, cand, True, memo.refined_bound(terms, cand, budget))
        row["refined"] = None if rf is None else round(rf.lower_bound, 1)
        if rf is not None:
            inf = S._inflight_bounded(memo, budget, rf)
            row["inflight"] = None if inf is None else round(inf, 1)
        t0 = time.process_time()
        try:
            if cand.v == 1:
                sk = memo.skeleton(cand)
                if sk.most is not None:
                    row["positional"] = round(positional_bound(sk, budget).bound, 1)
            else:
                sib = memo.skeleton(replace(cand, v=1))
                if sib.most is not None:
                    factor = interleaving_factor(terms.m, cand.pp, cand.v)
                    row["positional"] = round(S.interleaved_positional_bound(sib, budget, factor), 1)
                if S._interleaved_direct_applies(memo, cand, budget, 0.0):  # round 23 (park145): its own bound
                    row["direct"] = round(S.interleaved_direct_bound(memo, cand, budget), 1)
        except Exception as exc:  # noqa: BLE001 (diagnosis)
            row["positional"] = repr(exc)
        row["positional_cpu"] = round(time.process_time() - t0, 3)
        if args.solve_s > 0:
            sk = memo.skeleton(cand)
            f = build(problem, budget, cand, options, None, S.INCUMBENT_REL, skel=sk)
            t0 = time.process_time()
            sol, found, _ = S._solve_model(problem, S.backend("cpsat"), f, args.solve_s, None)
            from optsearch.formulation.model import objective_to_user
            row["own"] = {"status": sol.status, "value": None if found is None else round(
                found[1].training_time_s if args.objective == "time" else found[1].cost_usd, 1),
                "bound": None if sol.bound is None else round(objective_to_user(f, sol.bound), 1),
                "cpu": round(time.process_time() - t0, 2)}
        print(json.dumps(row))
    if not math.isfinite(inc or math.inf):
        return


if __name__ == "__main__":
    main()
