"""The pair-cover floor one-sided (round 19) and with both sends (round 20, deep1t) on given candidates of a row:
M_pair, the positional bound under the budget with PAIR_COVER_BOTH off and on, and their CPU (issue 14, item 3).

    python bench/pair_cover_both.py --model megatron-1t --cluster mixed-pool-3k --objective time \
        --max-cost-usd 16514287.107377557 --key 4,4,1,66,1,2,1,0 --key 4,4,1,65,1,2,1,0
    python bench/pair_cover_both.py --model megatron-1t --cluster mixed-pool-3k --objective cost --pp 129 --pp 130

Candidates are the row's candidate list (solver._candidates) at v = 1 whose key is one of --key (tp, dp, b, pp, ep,
cp, v, o), or, with --pp, every one of those depths (the --limit of least cheap bound). Fresh tables per arm.
Diagnosis only.
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
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--key", action="append", default=[])
    ap.add_argument("--pp", type=int, action="append", default=[])
    ap.add_argument("--limit", type=int, default=6)
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation import positional as P
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    memo = S.Memo(problem, options)
    listed, _ = S._candidates(memo, budget)
    keys = {tuple(int(x) for x in k.split(",")) for k in args.key}
    picked = [b for b in listed if b.cand.v == 1 and b.cand.key in keys]
    for pp in args.pp:
        picked += sorted((b for b in listed if b.cand.v == 1 and b.cand.pp == pp),
                         key=lambda b: b.lower_bound)[:args.limit]
    for item in picked:
        cand = item.cand
        row = {"key": cand.key, "cheap": round(item.lower_bound, 1),
               "uses": [(u.node.name, u.node.num_nodes_available // u.nodes_per_block, u.stages_per_block)
                        for u in cand.uses]}
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        for both in (False, True):
            P.PAIR_COVER_BOTH = both
            sk.positional = None
            t0 = time.process_time()
            tab = P.tables(sk)
            floor = (P.pair_cover_both_floor_s if both else P.pair_cover_floor_s)(sk, tab.blocks)
            t1 = time.process_time()
            got = P.positional_bound(sk, budget)
            t2 = time.process_time()
            name = "both" if both else "one"
            row[name] = {"M_pair_ms": None if not math.isfinite(floor) else round(1e3 * floor, 3),
                         "floor_cpu": round(t1 - t0, 3), "bound": round(got.bound, 1),
                         "bound_cpu": round(t2 - t1, 3), "seq": [sum(1 for g in got.sequences[0] if g == x)
                                                                 for x in range(len(cand.uses))]
                         if got.sequences else None}
        print(json.dumps(row))
    P.PAIR_COVER_BOTH = True


if __name__ == "__main__":
    main()
