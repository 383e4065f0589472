"""The quick plans' CPU and best plan with and without heuristic.END_MATCHED (issue 14 item 3, round 17 timerows).

    python bench/end_matched_cost.py --model gpt3-175b --cluster mixed-pool-8k -n 300

Builds the row's candidate list (time, no budget), takes its first n v = 1 candidates in bound order, and prices
their quick plans (Memo.quick_plans, on a fresh memo each time) with the switch off and on, twice each, interleaved:
CPU seconds, plans priced, and the least training time among them.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("-n", type=int, default=300)
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation import heuristic
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    listed, _ = S._candidates(S.Memo(problem, options), Budget(objective="time"))
    cands = [b.cand for b in listed if b.cand.v == 1][:args.n]
    for _ in range(2):
        for on in (False, True):
            heuristic.END_MATCHED = on
            memo = S.Memo(problem, options)
            skeletons = [memo.skeleton(c) for c in cands]
            t0 = time.process_time()
            plans = [pe for sk in skeletons for pe in memo.quick_plans(sk)]
            cpu = time.process_time() - t0
            best = min((e.training_time_s for _, e in plans), default=None)
            print(f"END_MATCHED={on}: {cpu:.2f} s of CPU, {len(plans)} plans, least time {best}", flush=True)


if __name__ == "__main__":
    main()
