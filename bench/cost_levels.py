"""How much bound work a row needs before its front reaches a value (issue 14 item 3, round 14, costrows).

    python bench/cost_levels.py --model megatron-76b --cluster mixed-pool-8k --objective cost --target 748623

Builds the row's whole candidate list (bench/proof_rows.py's instance, every optimizer setting), then, in cheap-bound
order as the loop visits them, every candidate whose bound is still below --target gets its next level the way the
loop computes it: cheap -> refined (Memo.refined_bound; with solver.AGGREGATE_FIRST, where the tree has it,
Memo.aggregate_first before it, and a candidate that one lifts to --target is not refined further) -> in-flight (_inflight_bounded, cutoff --target) ->
positional (positional_bound / the interleaved sibling's, cutoff --target). Prints, per level, how many candidates
needed it, their CPU seconds, and how many stay below the target after it: the work a 1 % proof needs when the
optimum is known from the start (target = optimum x 0.99), at today's cost per bound. Diagnosis only.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import time
from collections import Counter
from dataclasses import replace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--objective", choices=("cost", "time"), required=True)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--positional", action="store_true", help="also the positional level")
    ap.add_argument("--refined-only", action="store_true", help="stop after the cheap -> refined step")
    ap.add_argument("--profile", default=None, help="cProfile each level to PREFIX.refined / .inflight / .positional")
    ap.add_argument("--dump", default=None, help="write the keys still below the target after in-flight (JSON)")
    ap.add_argument("--batch", type=int, default=None,
                    help="the in-flight step's candidates this many at a time, as the loop does (solver."
                         "_inflight_ahead, inflight.RENT_BATCH; round 17); 1: one at a time; default: the tree's own")
    ap.add_argument("--digest", action="store_true", help="print the SHA-256 of every in-flight value (hex floats)")
    args = ap.parse_args()

    from optsearch import solver as S
    from optsearch.bounds import interleaving_factor
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.formulation.positional import positional_bound
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(args.model, args.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective=args.objective)
    memo = S.Memo(problem, options)
    T = args.target
    t0 = time.process_time()
    bounded, total = S._candidates(memo, budget, 0.0, S.ALL)
    t_list = time.process_time() - t0
    cheap = [b for b in bounded if b.lower_bound < T]
    out = {"candidates": len(bounded), "list_cpu": round(t_list, 2), "cheap_below": len(cheap)}
    import cProfile

    def profiled(name):
        if not args.profile:
            return None
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        return prof

    def dumped(prof, name):
        if prof is not None:
            prof.disable()
            prof.dump_stats(f"{args.profile}.{name}")

    prof = profiled("refined")
    refined, t_ref = [], 0.0
    by_kind = Counter()
    first = getattr(S, "AGGREGATE_FIRST", False)  # round 15 (aggfirst): the loop's aggregate step, where it exists
    ruled_first = 0
    for b in cheap:
        t = time.process_time()
        lb = b.lower_bound
        if first and (agg := memo.aggregate_first(b.terms, b.cand, budget)) is not None:
            ahead = S._bounded(problem, budget, b.terms, b.cand, True, agg)
            if ahead is None or max(lb, ahead.lower_bound) >= T:
                t_ref += time.process_time() - t
                ruled_first += 1
                continue
            lb = max(lb, ahead.lower_bound)
        sharper = S._bounded(problem, budget, b.terms, b.cand, True,
                             memo.refined_bound(b.terms, b.cand, budget))
        t_ref += time.process_time() - t
        if sharper is not None:
            lb = max(lb, sharper.lower_bound)
            if lb < T:
                refined.append(replace(sharper, lower_bound=lb))
                by_kind["v>1" if b.cand.v > 1 else "v=1"] += 1
    dumped(prof, "refined")
    out.update(refined_cpu=round(t_ref, 2), refined_below=len(refined), refined_below_by_v=dict(by_kind),
               aggregate_first=first, ruled_out_by_aggregate=ruled_first,
               composition_lists=sum(c is not None for c in memo.compositions.values()))
    if args.refined_only:
        print(json.dumps(out))
        return
    prof = profiled("inflight")
    inflight, t_inf = [], 0.0
    batched = hasattr(S, "_inflight_ahead")
    if batched and args.batch is not None:
        S.inflight_module.RENT_BATCH = args.batch
    values = []
    for x, b in enumerate(refined):
        t = time.process_time()
        if batched and b.cand.key not in memo.inflight_ahead:  # the next ones as the loop's heap holds them
            ahead = [(y, c.cand.key, y, c) for y, c in enumerate(refined[x + 1:x + 2 * 64])]
            heapq.heapify(ahead)
            S._inflight_ahead(memo, budget, b, ahead, 0.0, T)
        got = S._inflight_bounded(memo, budget, b, 0.0, T)
        values.append(None if got is None else float(got).hex())
        t_inf += time.process_time() - t
        if got is not None and got < T:
            inflight.append(replace(b, lower_bound=got, inflight=True))
    dumped(prof, "inflight")
    if args.digest:
        out.update(inflight_digest=hashlib.sha256(json.dumps(values).encode()).hexdigest(), inflight_values=len(values))
    out.update(inflight_cpu=round(t_inf, 2), inflight_below=len(inflight),
               inflight_below_by_v=dict(Counter("v>1" if b.cand.v > 1 else "v=1" for b in inflight)))
    if args.dump:
        with open(args.dump, "w") as fh:
            json.dump([[list(b.cand.key), b.lower_bound] for b in inflight], fh)
    if args.positional:
        prof = profiled("positional")
        pos_below, t_pos = 0, 0.0
        for b in inflight:
            t = time.process_time()
            if b.cand.v == 1:
                sk = memo.skeleton(b.cand)
                value = positional_bound(sk, budget, cutoff=T).bound if sk.most is not None else b.lower_bound
            else:
                sib = memo.skeleton(replace(b.cand, v=1))
                factor = interleaving_factor(b.terms.m, b.cand.pp, b.cand.v)
                value = factor * S._sibling_positional(sib, budget, factor, T).bound if sib.most is not None \
                    else b.lower_bound
            t_pos += time.process_time() - t
            pos_below += max(b.lower_bound, value) < T
        dumped(prof, "positional")
        out.update(positional_cpu=round(t_pos, 2), positional_below=pos_below)
    print(json.dumps(out))
    if not math.isfinite(T):
        return


if __name__ == "__main__":
    main()
