"""The cheap-level entries that hold a cost row's proof at its time limit (issue 14 item 3, round 19, cheapq).

    python bench/cheap_front.py --model gpt3-175b --cluster mixed-pool-8k --objective cost --time-limit 8.8
    python bench/cheap_front.py ... --max-time-s 1076507.1376705712 --sample 600

Runs the row as bench/proof_rows.py --cpu-clock does, with solver.QUEUE_DUMP and solver.LOOP_TIMES set; prints the
loop's CPU per level (ms per candidate), how many queue entries lie below the incumbent (and below 0.99 x it) at
each level, how many distinct degrees (tp, dp, b, ep, cp, o) and families (the degree without dp and b) the
cheap-level ones span, and, for a sample of the cheap-level ones below 0.99 x the incumbent, their refined bound as
the loop computes it (Memo.aggregate_first, then Memo.refined_bound, on a fresh memo that has seen every degree
twice): CPU per candidate, its lift over the cheap bound, and how many one refinement lifts past 0.99 x the
incumbent and past the incumbent. Diagnosis only.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter


PROFILE = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), default="cost")
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--max-cost-usd", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--sample", type=int, default=400)
    ap.add_argument("--replay", type=int, default=0,
                    help="also: the cheap -> refined step of the list's first N entries (bound order), on fresh "
                         "memos, with the round-19 switches of each arm (ARMS), alternated, seven rounds (CPU s)")
    ap.add_argument("--target", type=float, default=None, help="the replay's target (default: the incumbent)")
    ap.add_argument("--switch", action="append", default=[], help="NAME=0|1: set solver.NAME first")
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.bounds import composition_count
    S.composition_count = composition_count
    from optsearch.targets import engine_problem

    for sw in args.switch:
        name, value = sw.split("=")
        setattr(S, name, bool(int(value)))
    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective, max_time_s=args.max_time_s, max_cost_usd=args.max_cost_usd)
    wall_clock = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    S.LOOP_TIMES = {}
    cpu0 = time.process_time()
    result = S.solve(problem, budget, time_limit_s=args.time_limit, options=options)
    cpu = time.process_time() - cpu0
    time.perf_counter = wall_clock
    queue, parked, inc = S.QUEUE_DUMP[-1]
    out = {"status": result.status, "value": result.objective_value, "bound": result.bound, "gap": result.gap,
           "cpu": round(cpu, 2), "stats": result.stats}
    lt = dict(S.LOOP_TIMES)
    out["loop_start"] = round(lt.pop("loop start", cpu0) - cpu0, 2)
    out["ms_per"] = {k: round(1e3 * v / lt["n " + k], 3) for k, v in lt.items() if not k.startswith("n ")}
    out["n"] = {k[2:]: v for k, v in lt.items() if k.startswith("n ")}
    names = {S.CHEAP: "cheap", S.REFINED: "refined", S.POSITIONAL: "positional"}
    entries = [e[3] for e in queue] + [e[3] for e in parked]
    below = [e for e in entries if e.lower_bound < inc * (1 - 1e-9)]
    below99 = [e for e in below if e.lower_bound < inc * 0.99]
    level = lambda e: names[e.level] + ("+aggregate" if e.aggregate else "") + ("+inflight" if e.inflight else "")
    out["below"] = len(below)
    out["below_by_level"] = dict(Counter(level(e) for e in below))
    out["below99_by_level"] = dict(Counter(level(e) for e in below99))
    cheap = [e for e in below99 if e.level == S.CHEAP]
    out["cheap99_degrees"] = len({S._degree_key(e.cand) for e in cheap})
    out["cheap99_families"] = len({(e.cand.key[0],) + e.cand.key[3:] + (e.cand.uses,) for e in cheap})
    out["cheap99_pp_v"] = dict(Counter((e.cand.v > 1) for e in cheap))
    print(json.dumps(out))
    if args.replay:
        _replay(S, problem, options, budget, args.target or inc, args.replay)
    random.seed(1)
    sample = random.sample(cheap, min(args.sample, len(cheap)))
    memo = S.Memo(problem, options)
    t0 = time.process_time()
    degrees = {}
    for e in sample:  # every degree's tables built (its second ask), as in a loop that has run a while
        degrees.setdefault(S._degree_key(e.cand), e)
    for e in degrees.values():
        for _ in range(2):
            memo.refined_tables(e.terms, e.cand)
    tables_cpu = time.process_time() - t0
    lifts, agg_cpu, comp_cpu, cats = [], 0.0, 0.0, Counter()
    import cProfile
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    for e in sample:
        t0 = time.process_time()
        first = memo.aggregate_first(e.terms, e.cand, budget)
        lb = e.lower_bound
        if first is not None:
            a = S._bounded(problem, budget, e.terms, e.cand, True, first)
            lb = float("inf") if a is None else max(lb, a.lower_bound)
        t1 = time.process_time()
        agg_cpu += t1 - t0
        how = "aggregate" if first is not None else (
            "no aggregate (v>1)" if e.cand.v > 1 else "no aggregate (pp 1)" if e.cand.pp == 1 else
            f"no aggregate ({min(S.composition_count(e.terms, e.cand.pp), 300) // 50 * 50}+ compositions)")
        if lb < inc * 0.99:
            r = S._bounded(problem, budget, e.terms, e.cand, True, memo.refined_bound(e.terms, e.cand, budget))
            lb = float("inf") if r is None else max(lb, r.lower_bound)
            comp_cpu += time.process_time() - t1
            how += " + refined"
        lifts.append(lb / e.lower_bound - 1)
        cats[how + (" past inc" if lb >= inc else " past 0.99" if lb >= inc * 0.99 else " below 0.99")] += 1
    prof.disable()
    if PROFILE:
        prof.dump_stats(PROFILE)
    lifts.sort()
    n = len(sample)
    if n:
        print(json.dumps({"sample": n, "degrees": len(degrees), "tables_ms_per_degree": round(
            1e3 * tables_cpu / len(degrees), 3), "aggregate_ms_each": round(1e3 * agg_cpu / n, 3),
            "refined_ms_each": round(1e3 * comp_cpu / n, 3), "outcomes": dict(cats),
            "lift_quartiles": [round(lifts[int(q * (n - 1))], 4) for q in (0, 0.25, 0.5, 0.75, 1)]}))

ARMS = {  # the round-19 switch of each replay arm (solver.*)
    "base": dict(KEEP_REFINED=False),
    "kept": dict(KEEP_REFINED=True),
}


def _replay(S, problem, options, budget, target, n, rounds=7):
    """The loop's cheap -> refined step (Memo.aggregate_first, then Memo.refined_bound where that one leaves the
    candidate below target) over the list's first n entries in bound order, on a fresh memo and empty composition
    listings (bounds._LISTED) per pass, with the round-19 switches of each arm (ARMS), the arms alternated:
    CPU seconds per pass and the SHA-256 of the bounds (hex floats) per arm."""
    import hashlib

    from optsearch import bounds as B

    memo0 = S.Memo(problem, options)
    bounded, _ = S._candidates(memo0, budget, 0.0, S.ALL)
    entries = sorted(bounded, key=lambda b: (b.lower_bound, b.cand.key))[:n]
    arms = ARMS if hasattr(S, "KEEP_REFINED") else {"base": {}}
    cpu: dict = {}
    digests: dict = {}
    for _ in range(rounds):
        for arm, switches in arms.items():
            for name, value in switches.items():
                setattr(S, name, value)
            memo = S.Memo(problem, options)
            B._LISTED.clear()
            digest = hashlib.sha256()
            t0 = time.process_time()
            for e in entries:
                lb = e.lower_bound
                first = memo.aggregate_first(e.terms, e.cand, budget)
                if first is not None:
                    a = S._bounded(problem, budget, e.terms, e.cand, True, first)
                    lb = float("inf") if a is None else max(lb, a.lower_bound)
                if lb < target:
                    r = S._bounded(problem, budget, e.terms, e.cand, True, memo.refined_bound(e.terms, e.cand, budget))
                    lb = float("inf") if r is None else max(lb, r.lower_bound)
                digest.update(float(lb).hex().encode())
            cpu.setdefault(arm, []).append(round(time.process_time() - t0, 3))
            digests.setdefault(arm, set()).add(digest.hexdigest()[:16])
    paired = sorted(k - b for k, b in zip(cpu.get("kept", []), cpu["base"]))
    print(json.dumps({"replay": n, "target": target, "cpu_s": cpu, "median": {
        k: sorted(v)[len(v) // 2] for k, v in cpu.items()}, "median kept - base": paired[len(paired) // 2] if paired
        else None, "digests": {k: sorted(v) for k, v in digests.items()}}))


if __name__ == "__main__":
    main()
