"""Post-merge audit of round 23 (audit15): flight1t (inflight.least_layer_work_pp_s, LAYER_WORK_BY_PP: a bound change
reaching every objective's in-flight bound; solver._supply_steps, SUPPLY_STEPS: incumbents under B) and park145
(solver.interleaved_direct_bound, INTERLEAVED_DIRECT: a bound change for v > 1 candidates under a cost budget). See
docs/solver.md, "Round 23 after the merges: the audit (audit15, 2026-11-25)". Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round23.py --kind supply --seeds 0-59 --checks work,inflight
    nice -n 5 python bench/audit_round23.py --kind inter --seeds 0-59 --checks direct,direct-mut
    nice -n 5 python bench/audit_round23.py --kind supply --seeds 0-19 --checks solve-ab
    nice -n 5 python bench/audit_round23.py --catalog megatron-39b:mixed-pool-8k:time:512369.54 --time-limit 10
    nice -n 5 python bench/audit_round23.py --loop-sequence megatron-1t mixed-pool-3k 16072041.83 /tmp/off.pkl \
        --time-limit 10 --off positional.RENT_SLICED,positional.SUM_RING,positional.PAIR_COVER_RING

kinds: supply (tests/test_audit_round23.supply_draw: 1-3 types, the fastest with 1-2 nodes of 1-2 GPUs, up to 6
stages; roomy on even seeds, memory-tight on odd ones, experts on 3 mod 4, v 1-2 on some, tied embeddings drawn),
inter (supply_draw(seed, interleaved=True): v 1-2, 6-8 layers, 2-4 stages, cp 1-2), coupled (round 22's
coupled_draw), t5 (audit_round21.t5_kind), moe (audit_round15.moe_cases), boundary-tight (audit_round18's).
checks:
  work        every plan's layers' work at or above least_layer_work_pp_s (raised plans counted);
  inflight    every candidate's in-flight bound, LAYER_WORK_BY_PP on and off (fresh memos), minimizing cost, time,
              cost under deadlines and time under caps at 1.00-1.15 x two drawn plans' values, no cutoff and the loop's
              cutoff (1.001 x the plan), and minimizing time with slower_than_s at the median plan time: not None
              where a plan meets the budget, at or below the candidate's best such plan; raised bounds counted by
              objective; the memo kept across the budgets against a fresh memo's value (inflight_cache_differ);
  inflight-mut the same with the over-tight floor (no end stage empty) in the bound: counts bounds above a plan;
  direct      every v = 2 candidate's interleaved_direct_bound under caps at 1.00-1.15 x plans' costs, fresh and on one
              memo asked in a shuffled order with the loop's cutoffs: at or below the candidate's least time under the
              cap;
  direct-mut  the same with the wrap-around charged v - 1 sends per t / v (park145's over-tight variant): counts
              bounds above a plan;
  refined     flat76's UNDER_COST_ENDS: every candidate's refined bound minimizing time under caps at 1.00-1.15 x plans'
              costs (and with a deadline), every pp aggregate, by candidate_bound and by Memo.refined_bound on one memo
              (the degree's tables) asked in a shuffled order: at or below the candidate's least time under the budget,
              the two paths equal, raised bounds counted;
  exact       front1t's RENT_SLICED, SUM_RING, PAIR_COVER_RING (claimed exact) at thresholds 0: every v = 1
              candidate's positional bound under every objective's budgets, no cutoff and the loop's, each switch off
              alone and all off: the same bound bit for bit, and the pair-cover floors too;
  marks       end530's ENDS_CLASS_MARKS: every candidate's positional bound minimizing time (no budget, a deadline,
              a cost cap at a drawn plan's values and 5 % above; slower_than_s 0 and the median; cutoffs none and
              1.0001 / 1.02 / 1.5 x the candidate's best plan) at or below that plan; raised / lowered against 0;
  solve-ab    both backends, no limit, cost, time, cost<=D and time<=B at 1.00 / 1.05 x a drawn plan's values, with the
              round's three switches all on, all off and each off alone: brute force's answer, every plan re-priced;
              _supply_steps' calls and improvements counted.
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time as real_time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import audit_round13  # noqa: E402
import audit_round14  # noqa: E402
import audit_round15  # noqa: E402
import audit_round18  # noqa: E402
import audit_round21  # noqa: E402
import test_audit_round23 as a23  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import inflight  # noqa: E402
from optsearch import solver as solver_module  # noqa: E402
from optsearch.formulation.model import Skeleton  # noqa: E402
from dataclasses import replace  # noqa: E402


def check_work(problem, options, seed, stats):
    a23.work_walk(problem, options, stats)
    assert stats["work_above"] == 0, ("a plan below the work floor", seed)


def check_inflight(problem, options, seed, stats):
    a23.inflight_walk(problem, options, seed, stats, picks=2, slower=True, fresh=True)


def _no_empty_ends(d, L, pp):
    left, work, held = L, 0.0, 0
    for g in sorted(range(len(d.slots)), key=lambda g: d.step_min_s[g]):
        held += d.slots[g]
        take = max(0, min(left - max(0, pp - held), d.slots[g] * d.max_layers_per_stage[g]))
        work += take * d.step_min_s[g]
        left -= take
    return work if left <= 0 else math.inf


def check_inflight_mut(problem, options, seed, stats):
    local = a23.Counter()
    with mock.patch.object(inflight, "least_layer_work_pp_s", _no_empty_ends):
        try:
            a23.inflight_walk(problem, options, seed, local, picks=2, cut=False)
        except AssertionError:
            stats["mut_inflight_caught"] += 1
    stats["mut_inflight_instances"] += 1


def check_direct(problem, options, seed, stats):
    a23.direct_walk(problem, options, seed, stats)


def _dearer(f):
    out = _real_skeleton(f)
    c, v = f.c, f.cand.v
    extra = [(v - 1) * (1 - 1 / v) * min(min(c.send_inter_s[g]), c.send_intra_s[g]) for g in range(len(c.head_s))]
    c_v = replace(out.c, embedding_s=tuple(x + e for x, e in zip(out.c.embedding_s, extra)),
                  head_s=tuple(x + e for x, e in zip(out.c.head_s, extra)))
    return Skeleton(problem=out.problem, cand=out.cand, c=c_v, block_starts=out.block_starts, most=out.most)


_real_skeleton = solver_module.interleaved_skeleton


def check_direct_mut(problem, options, seed, stats):
    local = a23.Counter()
    with mock.patch.object(solver_module, "interleaved_skeleton", _dearer):
        try:
            a23.direct_walk(problem, options, seed, local)
        except AssertionError:
            stats["mut_direct_caught"] += 1
    stats["mut_direct_asked"] += local["direct_compared"] > 0


def check_solve_ab(problem, options, seed, stats):
    real = solver_module._supply_steps

    def counted(memo, budget, bounded, start, deadline):
        got = real(memo, budget, bounded, start, deadline)
        stats["supply_calls"] += 1
        stats["supply_better"] += got is not start
        return got

    with mock.patch.object(solver_module, "_supply_steps", counted):
        a23.solve_ab(problem, options, seed, stats, alone=True)


def catalog_rows(rows: list[str], time_limit: float, gap: float) -> int:
    """Catalog rows (model:cluster:objective[:D or B], budgets23's values) solved on the CPU clock with the round's
    switches (tests/test_audit_round23.FLIPS) all on and all off: each side's bound at or below the other side's plan
    (both are valid lower
    bounds on the same optimum); where both are proven (gap 0), the same value. One JSON line per solve."""
    import time
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem
    real_clock = time.perf_counter
    bad = 0
    for row in rows:
        model, cluster, objective, *limit = row.split(":")
        problem = engine_problem("megatron", edited_problem(model, cluster, []))
        options = space_from_target("megatron", problem)
        cap = float(limit[0]) if limit else None
        budget = Budget(objective=objective, max_time_s=cap if objective == "cost" else None,
                        max_cost_usd=cap if objective == "time" else None)
        got = {}
        for on in (True, False):
            with contextlib.ExitStack() as stack:
                for module, flag in a23.FLIPS:
                    stack.enter_context(mock.patch.object(module, flag, on))
                time.perf_counter = time.process_time
                cpu0 = time.process_time()
                try:
                    r = solver_module.solve(problem, budget, time_limit_s=time_limit, options=options, gap=gap)
                finally:
                    time.perf_counter = real_clock
            got[on] = r
            print(json.dumps({"row": row, "switches": on, "status": r.status, "value": r.objective_value,
                              "bound": r.bound, "gap": r.gap, "cpu_s": round(time.process_time() - cpu0, 2)}),
                  flush=True)
        a, b = got[True], got[False]
        for x, y in ((a, b), (b, a)):
            if x.bound is not None and y.objective_value is not None and x.bound > y.objective_value * (1 + 1e-9):
                bad += 1
                print(json.dumps({"row": row, "error": "a bound above the other side's plan", "bound": x.bound,
                                  "plan": y.objective_value}), flush=True)
        if a.status == b.status == "optimal" and not math.isclose(a.objective_value, b.objective_value,
                                                                   rel_tol=max(gap, 1e-6)):
            bad += 1
            print(json.dumps({"row": row, "error": "two proven values"}), flush=True)
    print(json.dumps({"rows": len(rows), "disagreements": bad}))
    return 0


def check_refined(problem, options, seed, stats):
    a23.refined_walk(problem, options, seed, stats)


def check_exact(problem, options, seed, stats):
    a23.exact_walk(problem, options, seed, stats)


def _progress(check):
    """The check, then the running totals as one JSON line (a sweep stopped early keeps its counts)."""
    def run(problem, options, seed, stats):
        try:
            check(problem, options, seed, stats)
        finally:
            print(json.dumps({"after_seed": seed, **{k: int(v) for k, v in stats.items()}}), flush=True)
    return run


def check_marks(problem, options, seed, stats):
    a23.marks_walk(problem, options, seed, stats)


CHECKS = {name: _progress(check) for name, check in {
    "marks": check_marks,
    "refined": check_refined, "exact": check_exact, "work": check_work, "inflight": check_inflight,
    "inflight-mut": check_inflight_mut, "direct": check_direct, "direct-mut": check_direct_mut,
    "solve-ab": check_solve_ab}.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="supply",
                    choices=["supply", "inter", "coupled", "t5", "moe", *audit_round18.EXTRA_KINDS, *KINDS])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="work,inflight")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    ap.add_argument("--catalog", nargs="*", default=None,
                    help="model:cluster:objective[:D or B] rows (see catalog_rows)")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--loop-sequence", nargs=4, default=None, metavar=("MODEL", "CLUSTER", "B", "OUT"),
                    help="bench/loop_sequence.py's log of a time<=B row (--time-limit) with --off's switches off")
    ap.add_argument("--off", default="", help="module.NAME,... set False for --loop-sequence (e.g. "
                    "positional.RENT_SLICED,positional.SUM_RING,positional.PAIR_COVER_RING)")
    args = ap.parse_args()
    if args.loop_sequence:
        import importlib
        import loop_sequence
        for name in filter(None, args.off.split(",")):
            module, flag = name.rsplit(".", 1)
            module = importlib.import_module({"positional": "optsearch.formulation.positional"}.get(
                module, f"optsearch.{module}"))
            assert hasattr(module, flag), name
            setattr(module, flag, False)
        model, cluster, b, out = args.loop_sequence
        loop_sequence.record(argparse.Namespace(model=model, cluster=cluster, max_cost_usd=float(b),
                                                time_limit=args.time_limit, out=out))
        return 0
    if args.catalog:
        return catalog_rows(args.catalog, args.time_limit, args.gap)
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "supply":
        instance = a23.supply_draw
    elif args.kind == "inter":
        def instance(seed):
            return a23.supply_draw(seed, interleaved=True)
    elif args.kind == "coupled":
        from test_audit_round22 import coupled_draw as instance
    elif args.kind == "t5":
        instance = audit_round21.t5_kind
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
