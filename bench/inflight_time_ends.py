"""How often the in-flight time walk's end-pair excess raises a time row's in-flight bounds (round 18, timerows2).

    PYTHONPATH=<tree> python bench/inflight_time_ends.py --model megatron-39b --cluster mixed-pool-3k -n 600

The grid's instance (megatron target), minimizing time with no budget: the first n candidates of the solver's list
(bound order), each refined, then `solver._inflight_bounded` on each with inflight.INFLIGHT_ENDS_TIME on and off
(fresh memos, no cutoff), both timed on the CPU clock. Prints how many bounds the switch raised, by how much at most
and in the median of those raised, and the CPU of each side.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("-n", type=int, default=600)
    args = ap.parse_args()

    from optsearch import inflight
    from optsearch import solver as S
    from inflight_time_rows import refined_front

    memo, budget, refined = refined_front(args.model, args.cluster, args.n)
    problem, options = memo.problem, memo.options
    out, cpu = {}, {}
    for on in (False, True):
        inflight.INFLIGHT_ENDS_TIME = on
        fresh = S.Memo(problem, options)
        cpu0 = time.process_time()
        out[on] = [S._inflight_bounded(fresh, budget, item) for item in refined]
        cpu[on] = time.process_time() - cpu0
    gains = sorted(b / a - 1 for a, b in zip(out[False], out[True]) if a and b and b > a * (1 + 1e-9))
    print(f"{args.model} {args.cluster}: {len(refined)} in-flight bounds, {len(gains)} raised"
          + (f" (median {100 * gains[len(gains) // 2]:.2f} %, max {100 * gains[-1]:.2f} %)" if gains else "")
          + f"; CPU off {cpu[False]:.2f} s, on {cpu[True]:.2f} s")


if __name__ == "__main__":
    main()
