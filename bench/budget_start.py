"""Where a budget row's time before the loop goes (round 20, budgetstart): bench/proof_rows.py with CPU-clock marks
around the solver's pre-loop phases, printed to stderr as a timeline at exit.

    PYTHONPATH=$PWD python bench/budget_start.py --model megatron-39b --cluster mixed-pool-8k --objective time \
        --max-cost-usd 516104.72 --time-limit 8.8 --cpu-clock

Each line: the phase (nesting by indent), its CPU second at entry and exit (from the solve's start, the process's
CPU clock), its CPU seconds, and what it returned (a plan's value where it returns one: the seed search's first
plans, the descents', the climbs'), then each new incumbent the loop reports and the loop's start. Diagnosis only:
the functions are wrapped in solver's namespace (their callers look them up there), nothing else changes.
"""
import atexit
import functools
import importlib
import runpy
import sys
import time

events: list[tuple] = []  # (depth, name, cpu in, cpu out, returned)
state = {"depth": 0, "cpu0": None}


def _shape(plan) -> str:
    layers = [st.num_layers for st in plan.stages]
    return (f"tp {plan.tp} dp {plan.dp} b {plan.micro_batch_size} cp {plan.cp} pp {len(layers)} v {plan.virtual_stages}"
            f" layers {min(layers)}-{max(layers)}")


def _value(out):
    if isinstance(out, tuple) and len(out) >= 3 and isinstance(out[0], float) and hasattr(out[1], "stages"):
        return f"{out[0]:,.2f}  ${out[2].cost_usd:,.0f}  {_shape(out[1])}"
    if isinstance(out, tuple) and out and isinstance(out[0], float):
        return out[0]
    if isinstance(out, tuple) and len(out) == 2 and (out[0] is None or isinstance(out[0], tuple)):
        return None if out[0] is None else _value(out[0])  # _part_then_whole_descent: (priced, at)
    if isinstance(out, list) and out and isinstance(out[0], tuple) and hasattr(out[0][0], "objective_value"):
        return [r.objective_value for r, _ in out]  # _seed_search: the seed objective's values
    if hasattr(out, "objective_value"):
        return out.objective_value
    return None


def wrap(modname: str, attr: str, deep: bool = True) -> None:
    mod = importlib.import_module(modname)
    fn = getattr(mod, attr)

    @functools.wraps(fn)
    def w(*a, **k):
        if not deep and state["depth"] > 3:
            return fn(*a, **k)
        if state["cpu0"] is None:
            state["cpu0"] = time.process_time()
        state["depth"] += 1
        t = time.process_time()
        idx = len(events)
        events.append(None)
        try:
            out = fn(*a, **k)
        finally:
            state["depth"] -= 1
        events[idx] = (state["depth"], attr, t - state["cpu0"], time.process_time() - state["cpu0"], _value(out))
        return out
    setattr(mod, attr, w)


import optsearch.solver as S  # noqa: E402

for name in ("solve", "_seed_search", "_part_then_whole_descent", "_budget_descent", "_candidates", "_with_off",
             "_plain_then_wide", "_neighbour_search", "_deeper_steps", "_split_improved", "_deeper_interleaved",
             "_split_repaired"):
    wrap("optsearch.solver", name)
wrap("optsearch.solver", "_climb", deep=False)
S.LOOP_TIMES = {}
S.CLIMB_TRACE = []


@atexit.register
def report() -> None:
    cpu0 = state["cpu0"] or 0.0
    merged: list[list] = []  # consecutive calls of one function at one depth: one line, with their count and CPU
    for ev in events:
        if ev is None:
            continue
        depth, name, t0, t1, val = ev
        if merged and merged[-1][0] == depth and merged[-1][1] == name and depth > 1:
            last = merged[-1]
            last[3], last[5], last[6] = t1, last[5] + t1 - t0, last[6] + 1
            last[4] = val if val is not None else last[4]
        else:
            merged.append([depth, name, t0, t1, val, t1 - t0, 1])
    for depth, name, t0, t1, val, cpu, n in merged:
        shown = f"{val:,.2f}" if isinstance(val, float) else ("" if val is None else str(val))
        calls = f" x{n}" if n > 1 else ""
        print(f"{'  ' * depth}{name + calls:32s} {t0:6.2f} -> {t1:6.2f}  ({cpu:5.2f} s)  {shown}", file=sys.stderr)
    for t, wide, kind, priced in S.CLIMB_TRACE:
        print(f"  move {t - cpu0:6.2f} s  {'wide ' if wide else 'plain'} {kind:9s} {_value(priced)}", file=sys.stderr)
    if "loop start" in S.LOOP_TIMES:
        print(f"loop start at {S.LOOP_TIMES['loop start'] - cpu0:.2f} s CPU (the last solve's loop)", file=sys.stderr)


sys.argv = ["proof_rows.py"] + sys.argv[1:]
runpy.run_path("bench/proof_rows.py", run_name="__main__")
