"""Where a cost row's incumbents come from (issue 14, item 3, round 17, costbig): one grid row on the CPU clock, as
bench/proof_rows.py --cpu-clock, with every priced plan tagged by what gave it and when.

    python bench/cost_sources.py megatron-1t mixed-pool-8k cost 8.8            # no budget
    python bench/cost_sources.py megatron-1t mixed-pool-3k cost 8.8 4085804.65 # cost under a deadline D (seconds)
    SEED_SHARE=0.2 python bench/cost_sources.py ...                            # solver.SEED_SHARE for this run

Tags: "quick" (Memo.quick_plans), "posseq" (Memo.plan_of: a positional sequence's plan), "moved" (_moved_plans),
"model" (a model solve), each with the step it ran in (_neighbour_search, _seed_search, ...; "loop" for the seeds
and the loop) and the CPU second it was first priced. Plans priced through Memo.runnable alone (_rescaled,
_reshaped) carry no tag (src null). stderr: each step's CPU interval and result, each incumbent the loop reports
(with the source of its value), each model solve; stdout: one JSON record (value, bound, gap, CPU, the source of
the answer's value, solve's stats, the loop's CPU by level (solver.LOOP_TIMES), the load average).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    model, cluster, objective, limit = args[0], args[1], args[2], float(args[3])
    max_time = float(args[4]) if len(args) > 4 and args[4] != "-" else None
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.search import objective_value
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem
    import optsearch.solver as S

    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=objective, max_time_s=max_time)
    time.perf_counter = time.process_time  # the solver's clock on CPU time (bench/proof_rows.py --cpu-clock)
    cpu0 = time.process_time()
    src: dict[float, tuple] = {}
    phase = ["loop"]

    def tag(value: float, what: str, key) -> None:
        src.setdefault(round(value, 2), (what, phase[-1], round(time.process_time() - cpu0, 2), key))

    def wrap_memo(name: str, what: str) -> None:
        orig = getattr(S.Memo, name)

        def wrapped(self, sk, *a, **k):
            out = orig(self, sk, *a, **k)
            for _, est in (out if isinstance(out, list) else [out] if out else []):
                tag(objective_value(est, objective), what, sk.cand.key)
            return out
        setattr(S.Memo, name, wrapped)

    wrap_memo("quick_plans", "quick")
    wrap_memo("plan_of", "posseq")
    moved = S._moved_plans

    def moved_tagged(memo, sk, seq, deadline=None):
        out = moved(memo, sk, seq, deadline)
        for _, est in out:
            tag(objective_value(est, objective), "moved", sk.cand.key)
        return out
    S._moved_plans = moved_tagged
    solve_model = S._solve_model

    def model_tagged(problem, engine, f, limit_s, hint_values):
        sol, found, n = solve_model(problem, engine, f, limit_s, hint_values)
        value = None if found is None else objective_value(found[1], objective)
        print(f"{time.process_time() - cpu0:7.2f} model {f.cand.key} {sol.status} slice {limit_s} found {value}",
              file=sys.stderr)
        if value is not None:
            tag(value, "model", f.cand.key)
        return sol, found, n
    S._solve_model = model_tagged
    for name in ("_neighbour_search", "_part_seeds", "_deeper_interleaved", "_seed_search", "_deepest_plans",
                 "_part_then_whole_descent", "_budget_descent", "_candidates", "_with_off"):
        if not hasattr(S, name):
            continue

        def stepped(*a, _orig=getattr(S, name), _name=name, **k):
            phase.append(_name)
            began, out = time.process_time(), None
            try:
                out = _orig(*a, **k)
                return out
            finally:
                phase.pop()
                got = out[0] if isinstance(out, tuple) and out and isinstance(out[0], float) else ""
                print(f"{began - cpu0:7.2f}..{time.process_time() - cpu0:7.2f} {_name} -> {got}", file=sys.stderr)
        setattr(S, name, stepped)
    seen: list[float] = []

    def trace(p) -> None:
        if p.incumbent is not None and (not seen or p.incumbent < seen[-1]):
            seen.append(p.incumbent)
            print(f"{time.process_time() - cpu0:7.2f} incumbent {p.incumbent:,.2f} front {p.bound:,.2f} "
                  f"source {src.get(round(p.incumbent, 2))} at {p.candidate.key}", file=sys.stderr)
    S.LOOP_TIMES = {}
    if os.environ.get("SEED_SHARE"):
        S.SEED_SHARE = float(os.environ["SEED_SHARE"])
    result = S.solve(problem, budget, time_limit_s=limit, options=options, progress=trace)
    cpu = time.process_time() - cpu0
    print(json.dumps({
        "model": model, "cluster": cluster, "objective": objective, "max_time_s": max_time, "time_limit": limit,
        "seed_share": S.SEED_SHARE, "status": result.status, "value": result.objective_value, "bound": result.bound,
        "gap": result.gap, "cpu_s": round(cpu, 2), "source": src.get(round(result.objective_value or 0.0, 2)),
        "stats": result.stats, "loop": {k: round(v, 2) for k, v in S.LOOP_TIMES.items()},
        "load": os.getloadavg()}))
    if result.plan is not None:
        print(json.dumps(result.plan.to_dict()), file=sys.stderr)


if __name__ == "__main__":
    main()
