"""The in-flight bounds of a time row's first candidates, timed (round 12, timerows: the time walk's speed).

    PYTHONPATH=<tree> python bench/inflight_time_rows.py --model gpt2-large --cluster mixed-pool-8k -n 400
    PYTHONPATH=<tree> python bench/inflight_time_rows.py ... --cutoff 5757.664450319301   # the incumbent, seconds

The grid's instance (megatron target), minimizing time with no budget: the first n candidates of the solver's list
(every optimizer setting, bound order), each refined (`Memo.refined_bound`), then `solver._inflight_bounded` on each
with the cutoff (default: none), timed on the CPU clock. Prints the CPU seconds, how many the bound prunes at the
cutoff, and a hash of the values (the same hash: the same bounds) so that two trees can be compared.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time


def refined_front(model: str, cluster: str, n: int):
    """The grid's instance (megatron target), minimizing time with no budget: (its Memo, the budget, the first n
    candidates of the solver's list, each refined; those the refined bound drops are left out). Shared with
    bench/inflight_time_ends.py."""
    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time")
    memo = S.Memo(problem, options)
    bounded, _ = S._candidates(memo, budget, 0.0, S.ALL)
    refined = []
    for item in bounded[:n]:
        got = S._bounded(problem, budget, item.terms, item.cand, True,
                         memo.refined_bound(item.terms, item.cand, budget))
        if got is not None:
            refined.append(got)
    return memo, budget, refined


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("-n", type=int, default=400)
    ap.add_argument("--cutoff", type=float, default=math.inf, help="the incumbent's training time, seconds")
    args = ap.parse_args()

    from optsearch import solver as S

    memo, budget, refined = refined_front(args.model, args.cluster, args.n)
    cpu0 = time.process_time()
    values = [S._inflight_bounded(memo, budget, item, 0.0, args.cutoff) for item in refined]
    cpu = time.process_time() - cpu0
    pruned = sum(v is None or v >= args.cutoff * (1 - S.INCUMBENT_REL) for v in values)
    digest = hashlib.sha1(repr(values).encode()).hexdigest()[:12]
    print(f"{args.model} {args.cluster}: {len(refined)} in-flight bounds, {cpu:.3f} s of CPU, "
          f"{pruned} at or above the cutoff {args.cutoff}, values {digest}")


if __name__ == "__main__":
    main()
