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
import cProfile
import json
import os
import time
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-time-s", type=float, default=None, help="the deadline D (cost<=D rows)")
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--profile", default=None, help="a cProfile of the main loop alone (CPU timer) to this file")
    args = ap.parse_args()

    import optsearch.inflight as I
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    for item in filter(None, os.environ.get("SWITCH", "").split(",")):  # module.NAME=value
        name, value = item.split("=")
        mod, attr = name.split(".")
        target = {"inflight": I, "solver": S}[mod]
        old = getattr(target, attr)
        setattr(target, attr, type(old)(float(value)) if not isinstance(old, bool) else value not in ("0", "False"))

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="cost", max_time_s=args.max_time_s)
    calls, spent = defaultdict(int), defaultdict(float)
    depth = [0]

    def timed(owner, name: str, label: str) -> None:
        orig = getattr(owner, name)

        def wrapped(*a, **k):
            depth[0] += 1
            t0 = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                depth[0] -= 1
                calls[label] += 1
                spent[label] += time.process_time() - t0
        setattr(owner, name, wrapped)

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
    timed(S, "positional_bound", "positional bound")
    timed(S, "_sibling_positional", "sibling positional")
    timed(S, "_model_probe", "model probe")
    timed(S, "_solve_model", "model solve")
    timed(S.Memo, "quick_plans", "quick plans")
    if hasattr(S, "_quick_within"):  # round 20
        timed(S, "_quick_within", "quick plans within B")
        timed(S, "_sibling_floor", "sibling floor")
    timed(S, "_with_interleaved", "interleaved variants")
    timed(S.Memo, "skeleton", "skeleton")
    timed(S.Memo, "runnable", "runnable (priced)")

    class LoopTimes(dict):
        snap = None

        def __setitem__(self, key, value):
            if key == "loop start":
                LoopTimes.snap = (dict(self), dict(calls), dict(spent))
                if prof:
                    prof[-1].disable()
                    prof.append(cProfile.Profile(time.process_time))
                    prof[-1].enable()  # the main loop's alone (the last one to start)
            super().__setitem__(key, value)

    prof = [cProfile.Profile(time.process_time)] if args.profile else []
    S.LOOP_TIMES = LoopTimes()
    outer_solve, nested = S.solve, [0]

    def solve_wrapped(*a, **k):  # an inner solve's loop (the seed search's) is not profiled
        nested[0] += 1
        try:
            return outer_solve(*a, **k)
        finally:
            nested[0] -= 1
            if nested[0] and prof:
                prof[-1].disable()
    S.solve = solve_wrapped
    time.perf_counter = time.process_time  # the solver's clock (and its shares) on CPU time
    cpu0 = time.process_time()
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options, gap=args.gap)
    cpu = time.process_time() - cpu0
    if prof:
        prof[-1].disable()
        prof[-1].dump_stats(args.profile)
    before, calls0, spent0 = LoopTimes.snap or ({}, {}, {})
    loop = {k: v - before.get(k, 0) for k, v in S.LOOP_TIMES.items() if k != "loop start"}
    levels = {k: {"steps": loop.get("n " + k, 0), "cpu_s": round(v, 3),
                  "ms_per_step": round(1e3 * v / max(1, loop.get("n " + k, 0)), 2)}
              for k, v in loop.items() if not k.startswith("n ")}
    parts = {k: {"calls": calls[k] - calls0.get(k, 0), "cpu_s": round(spent[k] - spent0.get(k, 0.0), 3),
                 "ms_per_call": round(1e3 * (spent[k] - spent0.get(k, 0.0)) / max(1, calls[k] - calls0.get(k, 0)), 2)}
             for k in calls}
    print(json.dumps({
        "model": args.model, "cluster": args.cluster, "max_time_s": args.max_time_s, "time_limit": args.time_limit,
        "switch": os.environ.get("SWITCH", ""), "status": result.status, "value": result.objective_value,
        "bound": result.bound, "gap": result.gap, "cpu_s": round(cpu, 2),
        "loop_start_cpu_s": round(S.LOOP_TIMES.get("loop start", cpu0) - cpu0, 2), "levels": levels, "parts": parts,
        "stats": result.stats, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
