"""Run bench/proof_rows.py with CPU-clock accumulators around chosen solver and in-flight functions (no cProfile
    overhead); prints one line per function to stderr at exit: total CPU seconds and calls (round 13, inflight).

    PYTHONPATH=$PWD python bench/timed_parts.py --model gpt3-175b --cluster mixed-pool-8k --objective cost --gap 0.01 --cpu-clock
"""
import sys, time, atexit, functools, importlib, runpy
acc = {}
def wrap(modname, attr, label=None):
    mod = importlib.import_module(modname)
    fn = getattr(mod, attr)
    label = label or f"{modname.split('.')[-1]}.{attr}"
    depth = {"d": 0}
    @functools.wraps(fn)
    def w(*a, **k):
        if depth["d"]:
            return fn(*a, **k)
        depth["d"] += 1
        t = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            depth["d"] -= 1
            c = acc.setdefault(label, [0.0, 0]); c[0] += time.process_time() - t; c[1] += 1
    setattr(mod, attr, w)
    return w
import optsearch.inflight  # noqa: F401  (loaded before wrapping)
# wrap in the modules where they are looked up
for m, a in [("optsearch.inflight", "inflight_tables"), ("optsearch.inflight", "inflight_bound"),
             ("optsearch.inflight", "ends_extra_s"), ("optsearch.inflight", "whole_reduce_floor_s"),
             ("optsearch.inflight", "least_embedding_allreduce_s"), ("optsearch.inflight", "_plain_cost"),
             ("optsearch.inflight", "_ends_rent"), ("optsearch.inflight", "_least_rent"),
             ("optsearch.inflight", "whole_levels_terms"), ("optsearch.inflight", "hiding_terms"),
             ("optsearch.inflight", "whole_levels_iteration"), ("optsearch.inflight", "_least_times"),
             ("optsearch.solver", "sharpened"), ("optsearch.solver", "_inflight_bounded"),
             ("optsearch.solver", "_moved_plans"), ("optsearch.solver", "_candidates"),
             ("optsearch.solver", "positional_bound"), ("optsearch.solver", "_neighbour_search"),
             ("optsearch.solver", "_climb"), ("optsearch.solver", "_seed_search")]:
    try:
        wrap(m, a)
    except AttributeError as e:
        print("skip", m, a, e, file=sys.stderr)
import optsearch.solver as S2
for name in ("refined_bound", "plan_of", "quick_plans", "skeleton", "runnable", "priced"):
    if hasattr(S2.Memo, name):
        orig = getattr(S2.Memo, name)
        def mk(orig, name):
            depth = {"d": 0}
            def w(self, *a, **k):
                if depth["d"]:
                    return orig(self, *a, **k)
                depth["d"] += 1
                t = time.process_time()
                try:
                    return orig(self, *a, **k)
                finally:
                    depth["d"] -= 1
                    c = acc.setdefault("Memo." + name, [0.0, 0]); c[0] += time.process_time() - t; c[1] += 1
            return w
        setattr(S2.Memo, name, mk(orig, name))
@atexit.register
def report():
    for k, (t, n) in sorted(acc.items(), key=lambda x: -x[1][0]):
        print(f"{k:40s} {t:8.2f} s {n:8d}", file=sys.stderr)
sys.argv = ["proof_rows.py"] + sys.argv[1:]
runpy.run_path("bench/proof_rows.py", run_name="__main__")
