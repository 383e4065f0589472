"""Where the loop's CPU goes minimizing cost (with or without a deadline) (issue 14, item 3, round 21, costflight;
bench/budget_loop.py's cost twin).

    python bench/cost_loop.py --model gpt3-175b --cluster mixed-pool-8k --time-limit 8.8
    python bench/cost_loop.py --model megatron-39b --cluster mixed-pool-8k --max-time-s 472432.41 ...  # cost<=D
    SWITCH=solver.MIDDLE_JOINT=0 python bench/cost_loop.py ...   # a module switch set for this run

Runs the row on the CPU clock (as bench/proof_rows.py --cpu-clock) with solver.LOOP_TIMES on, and times the main
loop's parts by wrapping them: the in-flight step (solver._inflight_bounded, solver._inflight_ahead), its tables
(inflight.inflight_tables), its rent programmes (inflight._rents_many, _rent_at, _floor_rent) and the exact rents by
end types (inflight._ends_rent), the middle level (solver._middle_bound), the refined step (Memo.refined_bound),
the positional bounds (solver.positional_bound, solver._sibling_positional), the model probes and solves. Only the
main loop counts: every counter is taken from the moment it starts (the last "loop start";
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
    ap.add_argument("--max-time-s", type=float, default=None, help="the deadline D (cost<=D rows)")
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--profile", default=None, help="a cProfile of the main loop alone (CPU timer) to this file")
    args = ap.parse_args()

    from optsearch.spec.budget import Budget

    def parts(timed, I, S) -> None:
        timed(I, "inflight_tables", "inflight tables")
        timed(I, "_rents_many", "inflight rents (batched)")
        if os.environ.get("PARTS"):  # the in-flight tables' parts (more wrappers: more overhead)
            timed(I, "slowest_floor", "inflight: slowest_floor")
            timed(I, "_degree_part", "inflight tables: _degree_part")
            timed(I._DegreePart, "least_times", "inflight tables: degree least_times")
            timed(I, "_least_times", "inflight tables: _least_times (first asks)")
            timed(I, "whole_levels_terms", "inflight tables: whole_levels_terms")
            timed(I, "_first_holding", "inflight tables: _first_holding")
            timed(I, "_holds_within_supply", "inflight tables: _holds_within_supply")
            timed(I, "ends_extra_s", "inflight: ends_extra_s")
            timed(I, "least_embedding_allreduce_s", "inflight: least_embedding_allreduce_s")
            timed(I, "_plain_cost_walk", "inflight: plain walk (generator made)")
        timed(I, "_rent_at", "inflight rents (one)")
        timed(I, "_floor_rent", "inflight floor rent (one)")
        timed(I, "_ends_rent", "inflight rents by ends")
        timed(S, "_inflight_bounded", "inflight step (own)")
        timed(S, "_inflight_ahead", "inflight step (ahead)")
        timed(S, "_middle_bound", "middle level")
        timed(S.Memo, "aggregate_first", "aggregate first")
        timed(S, "_moved_plans", "moved plans")
        timed(S.Memo, "plan_of", "plan of (priced)")
        timed(S.Memo, "refined_bound", "refined bound")

    run(args, Budget(objective="cost", max_time_s=args.max_time_s), parts, {"max_time_s": args.max_time_s})


if __name__ == "__main__":
    main()
