"""Where the loop's CPU goes minimizing time under a cost budget (issue 14, item 3, round 20, inflightb;
docs/solver.md "Round 20: the in-flight step under a cost budget ... (inflightb, 2026-11-25)").

    python bench/budget_loop.py --model megatron-39b --cluster mixed-pool-8k --max-cost-usd 516104.72 \
        --time-limit 8.8
    SWITCH=inflight.BUDGET_CUTOFF=0 python bench/budget_loop.py ...   # a module switch set for this run

Runs the row on the CPU clock (as bench/proof_rows.py --cpu-clock) with solver.LOOP_TIMES on, and times the main
loop's parts by wrapping them: the in-flight step's tables (inflight.inflight_tables), its bucket walk
(inflight._time_under_cost) and whole-reduce levels (inflight._with_whole_levels), the refined step
(Memo.refined_bound), the positional bounds (solver.positional_bound, solver._sibling_positional), the model probes
and solves. Only the main loop counts: every counter is taken from the moment it starts (the last "loop start";
the seed search's inner loop runs before it). One JSON line: status, value, gap, CPU, when the loop started, per
level its steps, CPU and ms per step, per part its calls, CPU and ms per call, and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loop_parts import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--profile", default=None, help="a cProfile of the main loop alone (CPU timer) to this file")
    args = ap.parse_args()

    from optsearch.spec.budget import Budget

    def parts(timed, I, S) -> None:
        timed(I, "inflight_tables", "inflight tables")
        timed(I, "_time_under_cost", "inflight bucket walk")
        timed(I, "_with_whole_levels", "inflight whole levels")
        timed(S, "_inflight_bounded", "inflight step (all)")
        timed(S.Memo, "refined_bound", "refined bound")

    run(args, Budget(objective="time", max_cost_usd=args.max_cost_usd), parts, {"max_cost_usd": args.max_cost_usd})


if __name__ == "__main__":
    main()
