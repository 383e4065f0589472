"""Where the refined step's CPU goes in one grid row (issue 14, item 3, round 17: compbatch).

    python bench/refined_step.py --model megatron-76b --cluster mixed-pool-8k --objective cost --time-limit 10
    python bench/refined_step.py ... --objective time --max-cost-usd 975472.85       # a time<=B row

bench/proof_rows.py's instance and solve on the CPU clock (the solver's clock replaced by `time.process_time`), with
`solver.LOOP_TIMES` (each loop step's CPU seconds and count, by the level it started at) and light timers (CPU
seconds and calls, outermost call only) around the refined step's parts: `Memo.refined_bound`,
`Memo.aggregate_first`, `Memo.refined_tables`, and the composition bounds as the solver calls them
(`composition_bounds`, `bounds_of_compositions`, `bound_over_compositions`, `degree_floors`, ...). The timers are
on the functions the solver module calls, so the same script times both trees. Prints one JSON record. Diagnosis
only.

    python bench/refined_step.py ... --replay        # also: what batching the composition bounds could win

--replay records every budget-free `composition_bounds(problem, d, pp)` the solve asks for (the cost, time and
cost<=D rows' refined step), then computes the same bounds again on the same terms, CPU-timed, five ways: one call
per ask (the solver's path); the pp asked of each degree in one call (`degree_rows_bounds`: the compositions of
several pp of one degree as rows of one array, pp per row; needs perfect foresight); every pp of each degree asked;
and two lookahead policies (from a degree's F-th ask, the pp asked and the next W - 1 listed pp above it, as a
degree-level cache would do). Also how many distinct degrees 64 consecutive asks (with compositions) touch, and
that every batched bound equals the one-call bound bit for bit. Where the tree has bounds.LIVE_GROUPS (round 17),
the asks and the asked degrees' refined tables (`refined_tables`, every pp) again with it off and on, alternated
per chunk of 50 asks (20 degrees), four rounds: CPU seconds per round.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--gap", type=float, default=0.01)
    ap.add_argument("--switch", action="append", default=[], help="NAME=0|1: set solver.NAME or bounds.NAME first")
    ap.add_argument("--replay", action="store_true", help="record the composition asks and replay them batched")
    args = ap.parse_args()

    from optsearch import bounds as B
    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    for item in args.switch:
        name, value = item.split("=")
        mod = S if hasattr(S, name) else B
        setattr(mod, name, bool(int(value)))
    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    spent: dict[str, list] = {}
    depth: dict[str, int] = {}

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if depth.get(name):
                return fn(*a, **k)
            depth[name] = 1
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                depth[name] = 0
                got = spent.setdefault(name, [0.0, 0])
                got[0] += time.process_time() - t
                got[1] += 1
        return wrapper

    for name in ("composition_bounds", "bounds_of_compositions", "bound_over_compositions", "degree_floors",
                 "refined_bound_at", "aggregate_bound_at", "_interleaved_budget", "interleaving_factor",
                 "interleaved_bound", "_bounded"):
        if hasattr(S, name):
            setattr(S, name, timed(name, getattr(S, name)))
    for name in ("refined_bound", "aggregate_first", "refined_tables"):
        if hasattr(S.Memo, name):
            setattr(S.Memo, name, timed("Memo." + name, getattr(S.Memo, name)))
    asks: list = []
    if args.replay:
        ask_one = S.composition_bounds

        def recorded(problem, d, pp, budget=None, slower_than_s=0.0):
            if budget is None:
                asks.append((d, pp))
            return ask_one(problem, d, pp, budget, slower_than_s)
        S.composition_bounds = recorded
    S.LOOP_TIMES = {}
    load_before = os.getloadavg()
    time.perf_counter = time.process_time
    cpu0 = time.process_time()
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options, gap=args.gap)
    cpu = time.process_time() - cpu0
    loop = {k: round(v, 3) for k, v in S.LOOP_TIMES.items()}
    loop["loop start"] = round(S.LOOP_TIMES.get("loop start", cpu0) - cpu0, 3)
    replay = _replay(problem, asks, S.max_stages(problem, options)) if args.replay else None
    print(json.dumps({
        "model": args.model, "cluster": args.cluster, "objective": args.objective, "max_time_s": args.max_time_s,
        "max_cost_usd": args.max_cost_usd, "time_limit": args.time_limit, "switches": args.switch,
        "status": result.status, "objective_value": result.objective_value, "bound": result.bound,
        "gap": result.gap, "cpu_s": round(cpu, 3), "loop": loop,
        "parts": {k: [round(v[0], 3), v[1]] for k, v in sorted(spent.items())},
        "load_before": load_before, "load_after": os.getloadavg(), "replay": replay,
    }))


def degree_rows_bounds(problem, d, pps) -> dict:
    """{pp: bounds.composition_bounds(problem, d, pp)} (budget-free) for every pp in pps, the compositions of all of
    them as rows of one array (pp, P_total and the slowest-stage floor per row): `_composition_bounds_at_once`'s
    operations row by row (`_present_terms` and `_rate_and_cost` take pp per row, as `degree_floors` uses them;
    `_pipelines_at_once` reads pp only as pp > 1, so the pp > 1 rows share one call and pp = 1 rows another). A pp
    with fewer than VECTOR_FROM compositions (the scalar `_composition_bound` there) is in the rows too: the arrays
    equal it bit for bit (tests/test_composition_arrays.py). tests/test_refined_step_bench.py checks the result."""
    import math

    import numpy as np

    from optsearch import bounds as B

    L = problem.model.num_layers
    out: dict = {}
    parts: list = []
    for pp in pps:
        comps = B._compositions(d, pp, B.MAX_COMPOSITIONS)
        if comps is None:
            out[pp] = None
        elif not comps or not B._holds_parameters(problem, d, pp):
            out[pp] = ()
        elif (low := float(B.slowest_floor(d, L, np.array([pp]))[0])) == math.inf:
            out[pp] = ()
        else:
            parts.append((pp, comps, low))
    if not parts:
        return out
    sizes = [len(comps) for _, comps, _ in parts]
    counts = np.array([c for _, comps, _ in parts for c in comps], dtype=np.int64).reshape(-1, len(d.slots))
    pp_rows = np.repeat(np.array([pp for pp, _, _ in parts], dtype=np.int64), sizes)
    params = np.repeat(np.array([d.all_params(pp) for pp, _, _ in parts], dtype=float), sizes)
    low = np.repeat(np.array([lo for _, _, lo in parts], dtype=float), sizes)
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    keep = (counts * nmax[None, :]).sum(axis=1) >= L
    kept = np.cumsum(np.concatenate([[0], keep.astype(np.int64)]))  # kept rows before each row
    counts, pp_rows, params, low = counts[keep], pp_rows[keep], params[keep], low[keep]
    rows: list = []
    if len(counts):
        present = counts > 0
        least, most, send_min, ends, total, small, comm = B._present_terms(d, pp_rows, present, params)
        walk = np.zeros(len(counts))
        for multi in (False, True):
            at = np.flatnonzero((pp_rows > 1) == multi)
            if len(at):
                walk[at] = B._pipelines_at_once(d, 2 if multi else 1, counts[at], send_min[at], L)
        pipeline = np.maximum(np.maximum((d.m - 1) * total / pp_rows + total, walk + ends), (d.m - 1) * low + total)
        iteration = pipeline + comm
        if d.alpha_full:
            whole = (np.maximum(least(d.alpha_full) * params / pp_rows, most(d.alpha_full) * small)
                     + np.maximum(least(d.beta) * params / pp_rows, most(d.beta) * small))
            iteration = np.maximum(iteration, (d.m - 1) * np.maximum(total / pp_rows, low) + whole)
        rate, cost = B._rate_and_cost(d, pp_rows, counts, present, least, send_min, total, iteration, comm)
        rows = list(zip(iteration.tolist(), rate.tolist(), (cost / B.SECONDS_PER_HOUR).tolist()))
    at = 0
    for (pp, _, _), n in zip(parts, sizes):
        out[pp] = tuple(rows[kept[at]:kept[at + n]])
        at += n
    return out


def _replay(problem, asks: list, most: int) -> dict:
    """The recorded asks computed again one call each and batched (see the docstring); CPU seconds."""
    from collections import Counter

    from optsearch import bounds as B

    def exact(got, want) -> bool:
        return got == want and all(x.hex() == y.hex() for a, b in zip(got or (), want or ()) for x, y in zip(a, b))

    t = time.process_time()
    one = [B.composition_bounds(problem, d, pp) for d, pp in asks]
    per_ask = time.process_time() - t
    by: dict = {}
    for d, pp in asks:
        by.setdefault(id(d), (d, []))[1].append(pp)
    t = time.process_time()
    asked = {k: degree_rows_bounds(problem, d, sorted(set(pps))) for k, (d, pps) in by.items()}
    per_degree = time.process_time() - t
    t = time.process_time()
    for d, _ in by.values():
        degree_rows_bounds(problem, d, range(1, most + 1))
    every_pp = time.process_time() - t
    equal = all(exact(asked[id(d)][pp], want) for (d, pp), want in zip(asks, one))

    def policy(first: int, width: int) -> float:
        done: dict = {}
        seen: Counter = Counter()
        t = time.process_time()
        for d, pp in asks:
            seen[id(d)] += 1
            have = done.setdefault(id(d), {})
            if pp in have:
                continue
            if seen[id(d)] < first:
                have[pp] = B.composition_bounds(problem, d, pp)
                continue
            more = [q for q in range(pp + 1, most + 1) if q not in have and B._compositions(d, q, B.MAX_COMPOSITIONS)]
            have.update(degree_rows_bounds(problem, d, [pp] + more[:width - 1]))
        return round(time.process_time() - t, 3)

    real = [id(d) for d, pp in asks if B._compositions(d, pp, B.MAX_COMPOSITIONS)]
    windows = [len(set(real[i:i + 64])) for i in range(0, len(real) - 63, 64)]
    rows_asked = sum(len(B._compositions(d, pp, B.MAX_COMPOSITIONS) or ()) for d, pp in asks)
    rows_every = sum(len(B._compositions(d, pp, B.MAX_COMPOSITIONS) or ()) for d, _ in by.values()
                     for pp in range(1, most + 1))
    live = {}
    if hasattr(B, "LIVE_GROUPS"):  # round 17: the asks and the asked degrees' refined tables, the switch off / on,
        was = B.LIVE_GROUPS  # alternated per chunk of 50 asks (20 degrees), in turn first, 4 rounds (load drifts)
        spent = {False: [0.0, 0.0], True: [0.0, 0.0]}
        degrees = [d for d, _ in by.values()]
        for r in range(4):
            for part, items, size in ((0, asks, 50), (1, degrees, 20)):
                for i in range(0, len(items), size):
                    for flag in ((False, True) if (r + i // size) % 2 == 0 else (True, False)):
                        B.LIVE_GROUPS = flag
                        t = time.process_time()
                        for item in items[i:i + size]:
                            if part == 0:
                                B.composition_bounds(problem, *item)
                            else:
                                B.refined_tables(problem, item, most, every_pp=True)
                        spent[flag][part] += time.process_time() - t
        B.LIVE_GROUPS = was
        live = {f"live_groups_{int(flag)}_asks_tables_s": [round(v / 4, 3) for v in spent[flag]] for flag in spent}
    return {**live, "asks": len(asks), "degrees": len(by), "rows_asked": rows_asked, "rows_every_pp": rows_every,
            "per_ask_s": round(per_ask, 3), "asked_pp_per_degree_s": round(per_degree, 3),
            "every_pp_per_degree_s": round(every_pp, 3), "from_3rd_ask_next_8_s": policy(3, 8),
            "from_2nd_ask_next_16_s": policy(2, 16), "equal": equal,
            "distinct_degrees_per_64_asks": round(sum(windows) / max(len(windows), 1), 1)}


if __name__ == "__main__":
    main()
