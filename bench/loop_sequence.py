"""The proof loop's bounds in the order it asks them, for comparing two trees (issue 14, item 3, round 21, loop39;
docs/solver.md "Round 21: time under a cost budget, the proof loop's work per bound (loop39, 2026-11-25)").

    PYTHONPATH=<tree A> python bench/loop_sequence.py --model M --cluster C --max-cost-usd B --out /tmp/a.pkl
    PYTHONPATH=<tree B> python bench/loop_sequence.py ... --out /tmp/b.pkl
    python bench/loop_sequence.py --compare /tmp/a.pkl /tmp/b.pkl

Solves the row (time under B, the CPU clock, --time-limit, default 60) logging, in order, every in-flight bound of
the loop (candidate, B, cutoff, value), every positional bound (candidate, B, objective, cutoff, bound) and every
model probe (candidate, the incumbent, status). --compare: the identical prefix of two logs, and, over the asks with
the same arguments in both, how many answers differ.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import time


def record(args) -> None:
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    log: list[tuple] = []
    inflight, positional, probe = S._inflight_bounded, S.positional_bound, S._model_probe

    def inflight_logged(memo, budget, item, slower_than_s=0.0, cutoff=float("inf")):
        got = inflight(memo, budget, item, slower_than_s, cutoff)
        log.append(("inflight", item.cand.key, budget.max_cost_usd, cutoff, got))
        return got

    def positional_logged(sk, budget, cutoff=float("inf"), **kw):
        got = positional(sk, budget, cutoff=cutoff, **kw)
        log.append(("positional", sk.cand.key, budget.max_cost_usd, budget.objective, cutoff, got.bound))
        return got

    def probe_logged(problem, engine, budget, options, memo, item, incumbent, limit):
        got = probe(problem, engine, budget, options, memo, item, incumbent, limit)
        log.append(("probe", item.cand.key, incumbent, got[0].status))
        return got
    S._inflight_bounded, S.positional_bound, S._model_probe = inflight_logged, positional_logged, probe_logged
    time.perf_counter = time.process_time
    result = S.solve(problem, Budget(objective="time", max_cost_usd=args.max_cost_usd), time_limit_s=args.time_limit,
                     options=space_from_target("megatron", problem))
    with open(args.out, "wb") as fh:
        pickle.dump((result.objective_value, result.bound, log), fh)
    print(result.status, result.objective_value, result.bound, len(log), collections.Counter(e[0] for e in log))


def compare(a_path: str, b_path: str) -> None:
    with open(a_path, "rb") as fh:
        a = pickle.load(fh)
    with open(b_path, "rb") as fh:
        b = pickle.load(fh)
    prefix = 0
    for x, y in zip(a[2], b[2]):
        if x != y:
            break
        prefix += 1

    def answers(log):
        out: dict = {}
        for entry in log:
            out.setdefault(entry[:-1], set()).add(entry[-1])
        return out
    ka, kb = answers(a[2]), answers(b[2])
    common = set(ka) & set(kb)
    print(f"values {a[0]} / {b[0]}, bounds {a[1]} / {b[1]}; entries {len(a[2])} / {len(b[2])}, identical prefix "
          f"{prefix}; asks with the same arguments in both {len(common)}, answers differ "
          f"{sum(ka[k] != kb[k] for k in common)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--cluster")
    ap.add_argument("--max-cost-usd", type=float)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, default=None)
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        record(args)


if __name__ == "__main__":
    main()
