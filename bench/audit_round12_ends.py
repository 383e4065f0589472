"""Audit of round 12's shared climb ends (timeload, solver._climb's `ends`): climbs from several starts sharing one
record of ends return what the same climbs without it return. Starts: random plans of the space that meet the budget
(more paths cross than from the seed plans alone, and _rescaled moves happen), time under a cost budget and cost
under a deadline. Not part of the suite, e.g.

    nice -n 5 python bench/audit_round12_ends.py --kind random --seeds 0-59 --starts 6

Prints one JSON line per instance with a mismatch and a summary."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_audit_dist_bounds import small, space_plans  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import Memo, _candidates, _neighbour_search  # noqa: E402
from optsearch.spec.budget import Budget  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=list(KINDS))
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--starts", type=int, default=6)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    stats = {"instances": 0, "budgets": 0, "climbs": 0, "hits": 0, "mismatches": 0}
    for seed in range(int(lo), int(hi or lo) + 1):
        problem, options = KINDS[args.kind](seed)
        if not small(problem, options):
            continue
        priced = list(space_plans(problem, options))
        if len(priced) < 3:
            continue
        stats["instances"] += 1
        rng = random.Random(seed)
        ests = sorted((e for _, _, e in priced), key=lambda e: e.cost_usd)
        pick = ests[len(ests) // 2]
        budgets = [Budget(objective="time", max_cost_usd=pick.cost_usd * f) for f in (1.0, 1.5)]
        budgets += [Budget(objective="cost", max_time_s=pick.training_time_s * f) for f in (1.0, 1.5)]
        for budget in budgets:
            meeting = [(p, e) for _, p, e in priced if not budget_violations(p, e, budget) and p.virtual_stages == 1]
            if not meeting:
                continue
            stats["budgets"] += 1
            starts = [rng.choice(meeting) for _ in range(args.starts)]
            memo = Memo(problem, options)
            bounded, _ = _candidates(memo, budget)
            ends: dict = {}
            for plan, est in starts + starts[:2]:
                start = (objective_value(est, budget.objective), plan, est)
                before = len(ends)
                shared = _neighbour_search(memo, budget, bounded, start, None, None, ends)
                fresh_memo = Memo(problem, options)
                fresh = _neighbour_search(fresh_memo, budget, _candidates(fresh_memo, budget)[0], start, None)
                stats["climbs"] += 1
                stats["hits"] += len(ends) == before  # nothing new recorded: it returned an earlier end at once
                if shared[0] != fresh[0]:
                    stats["mismatches"] += 1
                    print(json.dumps({"seed": seed, "budget": budget.model_dump(exclude_none=True),
                                      "start": str(plan), "shared": shared[0], "fresh": fresh[0],
                                      "shared_plan": str(shared[1]), "fresh_plan": str(fresh[1])}), flush=True)
    print(json.dumps({"kind": args.kind, "seeds": args.seeds, **stats}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
