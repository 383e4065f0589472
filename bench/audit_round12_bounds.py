"""Audit of round 12's bounds over many seeds (the round's own property tests are derandomized with fixed counts, so
OPTSEARCH_DRAWS and --hypothesis-seed do not widen them): for every seed of bench/audit_round11.py's instance kinds,
  * tables   tests/test_refined_arrays._compare and tests/test_audit_round12._compare_tables (bounds.refined_tables /
             refined_bound_at equal candidate_bound(refined=True) bit for bit; every degree, cp and optimizer setting
             of the space, the gather terms, every pp up to max_stages + 3, MAX_COMPOSITIONS = 0);
  * walk     tests/test_inflight_time_walk._compare (the time walk without rent equals the walk with it; R finite
             exactly from holds_from) and _check_cutoffs (the cutoff's bound below every plan, at or above the cutoff
             wherever the bound without it is), with the overlap on.
    nice -n 5 python bench/audit_round12_bounds.py --kind tight --seeds 0-99 --checks tables,walk"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_audit_dist_bounds import small  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402
from test_audit_round12 import _compare_tables, _degrees  # noqa: E402
from test_inflight_time_walk import _candidates, _check_cutoffs  # noqa: E402
from test_inflight_time_walk import _compare as _compare_walk  # noqa: E402
from test_refined_arrays import _compare  # noqa: E402

from optsearch import bounds  # noqa: E402
from optsearch.bounds import degree_terms, gather_terms  # noqa: E402
from optsearch.candidates import max_stages  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=list(KINDS))
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="tables,walk")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    checks = args.checks.split(",")
    stats = {"instances": 0, "tables_bounds": 0, "walk_candidates": 0, "cutoff_checks": 0, "cutoff_decided": 0}
    failures = []
    for seed in range(int(lo), int(hi or lo) + 1):
        problem, options = KINDS[args.kind](seed)
        try:
            if "tables" in checks:
                most = max_stages(problem, options) + 3
                with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
                    for tp, dp, mbs, cp, uses in _degrees(problem, options):
                        for dist in (None, False):
                            d = degree_terms(problem, tp, dp, mbs, uses, 1, cp, None, dist)
                            stats["tables_bounds"] += _compare(problem, d, most) + _compare_tables(problem, d, most)
                            if dist is None:
                                stats["tables_bounds"] += _compare_tables(problem, gather_terms(d), most)
            if "walk" in checks and small(problem, options):
                over = replace(problem, overlap_grad_reduce=True)
                stats["walk_candidates"] += _compare_walk(over, options, _candidates(over, options))
                a, b = _check_cutoffs(over, options)
                stats["cutoff_checks"] += a
                stats["cutoff_decided"] += b
            stats["instances"] += 1
            print(json.dumps({"seed": seed, **stats}), flush=True)  # running totals
        except Exception as exc:
            failures.append((seed, repr(exc)[:1500], traceback.format_exc()[-1500:]))
            print(json.dumps({"seed": seed, "FAIL": repr(exc)[:1500]}), flush=True)
    print(json.dumps({"kind": args.kind, "seeds": args.seeds, **stats, "failures": len(failures)}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
