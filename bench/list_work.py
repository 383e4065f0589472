"""The work before the search loop (round 15, lists): which candidate lists one solve builds, what each costs, and
when the loop starts, on the CPU clock (issue 14, item 3).

    PYTHONPATH=$PWD python bench/list_work.py --model megatron-76b --cluster mixed-pool-8k --objective cost
    PYTHONPATH=$PWD python bench/list_work.py ... --max-cost-usd 1.2e6 --time-limit 10

The instance is bench/objective_grid.py's (`edited_problem`, `engine_problem("megatron")`, `space_from_target`).
The solver's clock (`time.perf_counter`, which the time limit and every share of it read) is `time.process_time`
for the solve, as bench/proof_rows.py --cpu-clock does, so the work done does not depend on the load. Without
--time-limit the solve stops once its loop has started and a plan is known (--stop-at-loop, the default) or runs to
--gap. Prints one JSON record: every list build (`_build_candidates`: which memo, settings, CPU seconds, rows, cut
or not), the lazy neighbours' degrees (`_degree_rows` outside a list build), the CPU seconds of the solve at its
loop's start (the outermost solve's queue built) and at its first plan, the accumulated CPU of `degree_terms`,
`cheap_bounds` and `_gather_rows`, the process's CPU with its children's (resource.getrusage), and the load average.
--lists-only: no solve, the three lists of a cost or time row on a fresh memo, each timed.
Works on any tree since round 14 (only module attributes are wrapped), for A/B runs with PYTHONPATH=<tree>.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time


class _StopAtLoop(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=None, help="the solver's limit, CPU seconds (default: none)")
    ap.add_argument("--run-loop", action="store_true", help="do not stop at the loop's start")
    ap.add_argument("--lists-only", action="store_true",
                    help="no solve: the part's, the default setting's and the off list of the budget on a fresh "
                         "memo, each `_candidates` call's CPU seconds")
    ap.add_argument("--digest", action="store_true",
                    help="no solve: the SHA-256 of every list (the part's, default, off, all) of cost, time and, "
                         "with --max-time-s / --max-cost-usd, cost<=D and time<=B, on one fresh memo; every row's "
                         "key, node uses, bound (hex), level and terms (repr), and the total (round 16, lists2: to "
                         "compare two trees' lists)")
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch import solver as S
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    clock = time.process_time
    if args.digest:
        print(json.dumps(_digests(S, problem, options, args, Budget, clock)))
        return
    if args.lists_only:
        memo = S.Memo(problem, options)
        part = S._narrow_memo(problem, options, memo)
        out = {}
        for name, on, settings in (("part", part, S.DEFAULT), ("default", memo, S.DEFAULT), ("off", memo, S.OFF)):
            if on is None:
                continue
            t = clock()
            got = S._candidates(on, budget, 0.0, settings)
            out[name] = {"rows": len(got[0]), "total": got[1], "cpu_s": round(clock() - t, 3)}
        print(json.dumps({"model": args.model, "cluster": args.cluster, "objective": args.objective,
                          "lists": out, "load": [load_before, os.getloadavg()[0]]}))
        return
    time.perf_counter = clock  # the solver's clock (and its shares) on CPU time
    depth = {"solve": 0, "build": 0}
    builds: list[dict] = []
    acc: dict[str, list[float]] = {}
    at = {"start": None, "loop": None}

    def timed(label, fn):
        def wrapped(*a, **k):
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                c = acc.setdefault(label, [0.0, 0])
                c[0] += clock() - t
                c[1] += 1
        return wrapped

    build = S._build_candidates

    def logged_build(memo, budget_, slower_than_s, settings="all", deadline=None):
        t = clock()
        depth["build"] += 1
        record = {"at_s": round(t - at["start"], 3), "part": memo.options.context_parallel_sizes == (1,)
                  and memo.options.virtual_stages == (1,) and options.context_parallel_sizes != (1,),
                  "settings": settings, "objective": budget_.objective}
        try:
            got = build(memo, budget_, slower_than_s, settings, deadline)
            record.update(rows=len(got[0]), total=got[1])
            return got
        except S.OutOfTime:
            record["cut"] = True
            raise
        finally:
            depth["build"] -= 1
            record["cpu_s"] = round(clock() - t, 3)
            builds.append(record)

    S._build_candidates = logged_build
    rows_fn = S._degree_rows

    def lazy_rows(*a, **k):
        if depth["build"]:
            return rows_fn(*a, **k)
        return timed("lazy _degree_rows", rows_fn)(*a, **k)

    S._degree_rows = lazy_rows
    S.Memo.degree_terms = timed("degree_terms", S.Memo.degree_terms)
    S.Memo.cheap_bounds = timed("cheap_bounds", S.Memo.cheap_bounds)
    S._gather_rows = timed("_gather_rows", S._gather_rows)
    if hasattr(S, "_bounded_row"):
        S._bounded_row = timed("_bounded_row", S._bounded_row)

    import heapq as real_heapq

    class Heapq:  # solver.heapq, with the outermost solve's heapify (its queue: the loop starts) noted
        def __getattr__(self, name):
            return getattr(real_heapq, name)

        @staticmethod
        def heapify(queue):
            if depth["solve"] == 1 and at["loop"] is None:
                at["loop"] = clock() - at["start"]
                if not args.run_loop and args.time_limit is None:
                    real_heapq.heapify(queue)
                    raise _StopAtLoop
            return real_heapq.heapify(queue)

    S.heapq = Heapq()
    solve = S.solve

    def counted(*a, **k):
        depth["solve"] += 1
        try:
            return solve(*a, **k)
        finally:
            depth["solve"] -= 1

    S.solve = counted
    at["start"] = clock()
    out: dict = {}
    try:
        result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
        out.update(status=result.status, value=result.objective_value, gap=result.gap,
                   first_plan_s=result.stats.get("first_plan_s"), solve_cpu_s=result.solve_time_s)
    except _StopAtLoop:
        out["status"] = "stopped at the loop"
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.update(model=args.model, cluster=args.cluster, objective=args.objective, max_time_s=args.max_time_s,
               max_cost_usd=args.max_cost_usd, time_limit=args.time_limit,
               loop_start_cpu_s=None if at["loop"] is None else round(at["loop"], 3),
               cpu_s=round(clock() - at["start"], 3), children_cpu_s=round(usage.ru_utime + usage.ru_stime, 3),
               builds=builds, parts={k: [round(v[0], 3), v[1]] for k, v in acc.items()},
               load=[load_before, os.getloadavg()[0]])
    print(json.dumps(out))


def _digests(S, problem, options, args, Budget, clock) -> dict:
    """--digest: one fresh memo (and its part's), the lists of each budget in turn, each hashed."""
    import hashlib

    budgets = [("cost", Budget(objective="cost")), ("time", Budget(objective="time"))]
    if args.max_time_s is not None:
        budgets.append(("cost<=D", Budget(objective="cost", max_time_s=args.max_time_s)))
    if args.max_cost_usd is not None:
        budgets.append(("time<=B", Budget(objective="time", max_cost_usd=args.max_cost_usd)))
    memo = S.Memo(problem, options)
    part = S._narrow_memo(problem, options, memo)
    terms_repr: dict[int, bytes] = {}
    out: dict = {}
    rows = 0
    t = clock()
    for name, budget in budgets:
        for label, on, settings in (("part", part, S.DEFAULT), ("default", memo, S.DEFAULT), ("off", memo, S.OFF),
                                    ("all", memo, S.ALL)):
            if on is None:
                continue
            got, total = S._candidates(on, budget, 0.0, settings)
            h = hashlib.sha256(repr(total).encode())
            for b in got:
                text = terms_repr.get(id(b.terms))
                if text is None:
                    text = terms_repr[id(b.terms)] = repr(b.terms).encode()
                h.update(repr((b.cand.key, tuple(u.name for u in b.cand.uses), b.cand.uses, b.lower_bound.hex(),
                               b.level)).encode())
                h.update(text)
            out[f"{name} {label}"] = [len(got), h.hexdigest()[:16]]
            rows += len(got)
    return {"model": args.model, "cluster": args.cluster, "rows": rows, "cpu_s": round(clock() - t, 3),
            "all": hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16], "lists": out}


if __name__ == "__main__":
    sys.exit(main())
