"""A candidate's positional bound with and without the type-boundary floor (issue 14, item 3, round 18, costbound;
docs/solver.md "Round 18: the slowest stage beside a boundary between types").

    python bench/boundary_floor.py megatron-1t mixed-pool-3k 2,1,1,129,1,4 2,1,1,130,1,4

Builds the row's candidate list as the solver does (bench/proof_rows.py's instance, minimize cost, no budget), and
for each candidate whose key starts with one given (tp, dp, b, pp, ep, cp[, v, o]) prints its cheap bound, M_mix and
whether a single-type plan may exist (positional.mixed_slowest_floor_s), its positional bound with
positional.TYPE_BOUNDARY_FLOOR off and on (fresh tables, no cutoff, CPU seconds), the node-type counts of the bound's
best sequence, and the cost of each sequence's plan priced by the cost model (Memo.plan_of). Diagnosis only.
"""

from __future__ import annotations

import sys
import time

import numpy as np


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation import positional
    from optsearch.solver import Memo, _candidates
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    model, cluster = sys.argv[1], sys.argv[2]
    wanted = [tuple(int(x) for x in k.split(",")) for k in sys.argv[3:]]
    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    options = space_from_target("megatron", problem)
    memo = Memo(problem, options)
    budget = Budget(objective="cost")
    bounded, _ = _candidates(memo, budget)
    for item in sorted(bounded, key=lambda b: b.cand.key):
        key = item.cand.key
        if not any(key[:len(w)] == w for w in wanted):
            continue
        sk = memo.skeleton(item.cand)
        if sk.most is None:
            continue
        floor, single = positional.mixed_slowest_floor_s(sk)
        got = {}
        for on in (False, True):
            positional.TYPE_BOUNDARY_FLOOR = on
            sk.positional = None  # fresh tables under this setting
            cpu = time.process_time()
            got[on] = (positional.positional_bound(sk, budget), time.process_time() - cpu)
        positional.TYPE_BOUNDARY_FLOOR = True
        off, on = got[False], got[True]
        print(f"{key} cheap {item.lower_bound:,.0f}  M_mix {floor * 1e3:.3f} ms single {single}  positional off "
              f"{off[0].bound:,.0f} ({off[1]:.2f} s)  on {on[0].bound:,.0f} ({on[1]:.2f} s)")
        for seq in on[0].sequences:
            priced = memo.plan_of(sk, seq)
            counts = np.bincount(seq, minlength=len(sk.cand.uses)).tolist()
            print(f"    sequence {counts}: " + (f"plan {priced[1].cost_usd:,.0f}" if priced else "no plan"))


if __name__ == "__main__":
    main()
