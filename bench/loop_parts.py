"""The main loop's parts timed, on the CPU clock: the machinery bench/budget_loop.py (time under a cost budget) and
bench/cost_loop.py (cost, with or without a deadline) share. run() sets the SWITCH environment's module switches,
wraps the parts the caller names (timed(owner, name, label)), solves the row with solver.LOOP_TIMES on and prints
one JSON line: status, value, gap, CPU, when the main loop started, per level its steps, CPU and ms per step, per
part its calls, CPU and ms per call, and the load average. Only the main loop counts (every counter is taken from
the last "loop start"; the seed search's inner loop runs before it), and --profile keeps a cProfile of it alone."""

from __future__ import annotations

import cProfile
import json
import os
import time
from collections import defaultdict


def run(args, budget, parts, record: dict) -> None:
    """Solve args.model on args.cluster under budget (time limit args.time_limit, gap args.gap) with the parts timed:
    parts(timed, I, S) calls timed(owner, name, label) for each of the row's own parts (the positional bounds, model
    probes and quick plans are timed here for both); record: the row's own fields of the JSON line."""
    import optsearch.inflight as I
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    for item in filter(None, os.environ.get("SWITCH", "").split(",")):  # module.NAME=value
        name, value = item.split("=")
        mod, attr = name.split(".")
        target = {"inflight": I, "solver": S}[mod]
        old = getattr(target, attr)
        setattr(target, attr, type(old)(float(value)) if not isinstance(old, bool) else value not in ("0", "False"))

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
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

    parts(timed, I, S)  # the row's own parts, then those both loops have
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
        "model": args.model, "cluster": args.cluster, **record, "time_limit": args.time_limit,
        "switch": os.environ.get("SWITCH", ""), "status": result.status, "value": result.objective_value,
        "bound": result.bound, "gap": result.gap, "cpu_s": round(cpu, 2),
        "loop_start_cpu_s": round(S.LOOP_TIMES.get("loop start", cpu0) - cpu0, 2), "levels": levels, "parts": parts,
        "stats": result.stats, "load": os.getloadavg()}))
