"""The ends-class floor's base at the first marks (positional.ENDS_CLASS_MARKS; round 23, end530): brute force on
small instances. Not part of the test suite, e.g.

    python bench/ends_marks.py --kind boundary-tight --seeds 100-129 --checks marks
    python bench/ends_marks.py --kind offheavy --seeds 0-16 --checks marks,marks-mut

checks:
  marks      every candidate's positional bound minimizing time (v = 1; v > 1 through its sibling / f_v) under
             bench/audit_round22's ends_budgets, slower_than_s 0 and the median plan time (v = 1), cutoffs none and
             1.0001 / 1.001 / 1.02 / 1.5 x the candidate's best plan meeting the budget, on fresh tables with
             ENDS_CLASS_MARKS 0 and its value: at or below that plan; bounds raised and lowered counted (the
             floor's reduce levels are per interval: not monotone in the switch; off_heavy 0-9 lowered 130 of
             39,524 asks, docs/solver.md round 23);
  marks-mut  the same with an invalid floor (every interval's base applied to every X: the intervals' caps
             dropped): counts the bounds it puts above a plan (does the check bite?);
  live       the same asks, round 23's floor (ENDS_CLASS_LIVE_SUMS off, ENDS_CLASS_MARKS 3) against this tree's
             (round 24, time530: the sums at the live marks, 8 marks);
  live-mut   the same with an invalid _live_sum (the smallest live mark's S, not the largest's).
Prints one JSON line per failure and a summary (audit_round13.sweep's)."""

from __future__ import annotations

import argparse
import math
import random
import sys
import time as real_time
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import audit_round13  # noqa: E402
import audit_round14  # noqa: E402
import audit_round15  # noqa: E402
import audit_round18  # noqa: E402
import audit_round19  # noqa: E402
import audit_round21  # noqa: E402
import audit_round22  # noqa: E402
from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch.formulation import positional  # noqa: E402
from optsearch.solver import Memo  # noqa: E402

REL = 1e-9
_FLOOR = positional.ends_class_floor_s


def _no_caps(f, blocks, slope, base, above, limit, deadline=None, hidden=None, uppers=None):
    """An invalid floor: every interval's base for every X (the caps B_i dropped)."""
    return _FLOOR(f, blocks, slope, base, above, limit, deadline, hidden,
                  uppers=None if uppers is None else np.append(uppers[1:], np.inf))


_LIVE = positional._live_sum


def _least_live(tab, upper, slope, comm_s, emb_s, limit, least_s=-math.inf):
    """An invalid _live_sum (round 24, time530): S at the smallest live mark at or below upper, not the largest (a
    plan at a larger live mark has a smaller sum)."""
    ix = np.nonzero(tab.possible)[0]
    ix = ix[tab.marks[ix] <= upper]
    for j in ix:
        at = np.array([j])
        if max(slope * tab.marks[j] + tab.total_at(at)[0] + max(comm_s, tab.comm_at(at)[0] + emb_s), least_s) <= limit:
            return float(tab.total_at(at)[0])
    return math.inf


# round 24 (time530): the live sums (ENDS_CLASS_LIVE_SUMS with ENDS_CLASS_MARKS 8) against round 23's floor
_LIVE_OFF = {"ENDS_CLASS_LIVE_SUMS": False, "ENDS_CLASS_MARKS": 3}


def _walk(problem, options, seed, stats, tag, mutant=False, live=False):
    rng = random.Random(seed)
    by_cand = audit_round14.plans_by_candidate(problem, options)
    budgets = audit_round22.ends_budgets(by_cand, rng)
    times = sorted(e.training_time_s for _, plans in by_cand.values() for _, e in plans)
    median = times[len(times) // 2] * 0.999 if times else 0.0
    memo = Memo(problem, options)
    marks = positional.ENDS_CLASS_MARKS
    for key, (cand, plans) in by_cand.items():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None:
            continue
        asks = []
        for budget in budgets:
            for slower in ((0.0, median) if cand.v == 1 else (0.0,)):
                values = audit_round19._meeting(plans, budget, slower)
                best = min(values) if values else None
                for cut in audit_round22.CUTS:
                    if best is None and cut != math.inf:
                        continue
                    asks.append((budget, slower, math.inf if cut == math.inf else best * cut, best))
        rng.shuffle(asks)
        got = {}
        for n in (0, marks):
            sibling.positional = None
            if live:  # off: round 23's floor; on: this tree's, with the invalid _live_sum for the mutant
                with mock.patch.multiple(positional, **(_LIVE_OFF if n == 0 else {"ENDS_CLASS_LIVE_SUMS": True})), \
                        mock.patch.object(positional, "_live_sum", _least_live if mutant and n else _LIVE):
                    got[n] = [audit_round22._bound(memo, cand, sibling, b, s, cutoff=c) for b, s, c, _ in asks]
            else:
                with mock.patch.multiple(positional, ENDS_CLASS_MARKS=n), \
                        mock.patch.object(positional, "ends_class_floor_s", _no_caps if mutant and n else _FLOOR):
                    got[n] = [audit_round22._bound(memo, cand, sibling, b, s, cutoff=c) for b, s, c, _ in asks]
            sibling.positional = None
        for (budget, slower, cut, best), off, on in zip(asks, got[0], got[marks]):
            stats[f"{tag}_asks"] += 1
            stats[f"{tag}_raised"] += on > off * (1 + REL)
            stats[f"{tag}_lowered"] += on < off * (1 - REL)
            if best is None:
                continue
            stats[f"{tag}_compared"] += 1
            stats[f"{tag}_tight"] += on >= best * (1 - 1e-6)
            if on > best * (1 + REL):
                stats[f"{tag}_above"] += 1
                if not mutant:
                    raise AssertionError(("above a plan", seed, repr(key), budget.model_dump(exclude_none=True),
                                          slower, cut, off, on, best))


def check_marks(problem, options, seed, stats):
    _walk(problem, options, seed, stats, "marks")


def check_marks_mut(problem, options, seed, stats):
    _walk(problem, options, seed, stats, "mut", mutant=True)


def check_live(problem, options, seed, stats):
    _walk(problem, options, seed, stats, "live", live=True)


def check_live_mut(problem, options, seed, stats):
    _walk(problem, options, seed, stats, "livemut", mutant=True, live=True)


CHECKS = {"marks": check_marks, "marks-mut": check_marks_mut, "live": check_live, "live-mut": check_live_mut}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="boundary-tight",
                    choices=[*KINDS, "hypinter", "hypinter-off", "hyptight", "moe", "moe1", *audit_round18.EXTRA_KINDS,
                             "t5", "coupled"])
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--checks", default="marks")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    totals = audit_round14.Totals(instances=0, failures=0, skipped=0)
    began = real_time.process_time()
    if args.kind == "coupled":
        instance = audit_round22.coupled_kind
    elif args.kind == "t5":
        instance = audit_round21.t5_kind
    elif args.kind in audit_round18.EXTRA_KINDS:
        instance = audit_round18.EXTRA_KINDS[args.kind]
    else:
        instance = audit_round15.seeded_instances(args.kind, seeds, KINDS)
    return audit_round13.sweep(CHECKS, args, seeds, instance, small, totals, began, skipped=True)


if __name__ == "__main__":
    sys.exit(main())
