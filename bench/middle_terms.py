"""Which term of the refined bound lifts the cost rows' cheap entries (issue 14, item 3, round 20, costmid).

    python bench/middle_terms.py --model gpt3-175b --cluster mixed-pool-8k --sample 1500
    python bench/middle_terms.py --model megatron-39b --cluster mixed-pool-8k --max-time-s 472432.4143546349

Runs the row as bench/proof_rows.py --cpu-clock does (8.8 s of the solver's CPU) with solver.QUEUE_DUMP set, takes a
sample of the cheap-level entries left below 0.99 x the incumbent, and for each computes, at its v = 1 sibling's
terms scaled by f_v: its refined bound as the loop computes it (Memo.refined_bound, on a fresh memo), and the refined
bound's terms one at a time: the cheap terms with the fastest pipelines (`bounds._aggregate_arrays`, refined),
the joint rent x time term (`bounds._joint_cost_rate_s`, under the deadline), and the rent of pp slots that can hold
the layers at all (`bounds._least_rate_per_gpu` at NMAX, under the deadline at the slowest stage the deadline
leaves) times the cheap iteration. Prints how many one refinement lifts past 0.99 x the incumbent, which term alone
does, and the CPU per entry. Diagnosis only: run it with solver.MIDDLE_JOINT = False (--base) for the base's queue.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-time-s", type=float, default=None)
    ap.add_argument("--time-limit", type=float, default=8.8)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--base", action="store_true", help="solver.MIDDLE_JOINT off for the run (the base's queue)")
    a = ap.parse_args()
    from optsearch import bounds as B
    from optsearch import solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    if a.base and hasattr(S, "MIDDLE_JOINT"):
        S.MIDDLE_JOINT = False
    problem = engine_problem("megatron", edited_problem(a.model, a.cluster, []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="cost", max_time_s=a.max_time_s)
    wall = time.perf_counter
    time.perf_counter = time.process_time
    S.QUEUE_DUMP = []
    res = S.solve(problem, budget, time_limit_s=a.time_limit, options=options)
    time.perf_counter = wall
    queue, parked, inc = S.QUEUE_DUMP[-1]
    entries = [e[3] for e in queue] + [e[3] for e in parked]
    cheap = [e for e in entries if e.level == S.CHEAP and e.lower_bound < inc * 0.99]
    random.seed(1)
    sample = random.sample(cheap, min(a.sample, len(cheap)))
    memo = S.Memo(problem, options)
    N, L = problem.iterations, problem.model.num_layers
    cats, t_ref, t_fit, t_joint = Counter(), 0.0, 0.0, 0.0
    for e in sample:
        d, c = e.terms, e.cand
        f = B.interleaving_factor(d.m, c.pp, c.v)
        pp = np.array([c.pp])
        _, it, _, crs, total, comm = B._aggregate_arrays(problem, d, pp, False)
        _, _, _, crs_pipe, _, _ = B._aggregate_arrays(problem, d, pp, True)
        mi = None if a.max_time_s is None else a.max_time_s * B.BOUND_SLACK / N / f
        t0 = time.process_time()
        hold = d.max_layers_per_stage
        if mi is not None and c.pp > 1 and d.m > 1:  # the slowest stage the deadline leaves
            most_s = (mi - float(total[0]) - float(comm[0])) / (d.m - 1)
            es = B.sender_send_min_s(d)
            hold = tuple(max(0, min(n, math.floor((most_s - es[g]) / d.step_min_s[g] + 1e-9)))
                         for g, n in enumerate(hold))
        fit = d.w * B._least_rate_per_gpu(d, c.pp, L, hold) * float(it[0])
        t1 = time.process_time()
        joint = B._joint_cost_rate_s(d, c.pp, L, float(total[0]), float(comm[0]), mi, None) if c.pp > 1 else 0.0
        t2 = time.process_time()
        r = S._bounded(problem, budget, d, c, True, memo.refined_bound(d, c, budget))
        t_ref += time.process_time() - t2
        t_fit += t1 - t0
        t_joint += t2 - t1
        usd = lambda rate_s: N * rate_s * f / 3600  # noqa: E731
        lifted = math.inf if r is None else max(e.lower_bound, r.lower_bound)
        if lifted < inc * 0.99:
            cats["refined: below 0.99"] += 1
            continue
        which = [name for name, v in (("pipelines", usd(float(crs_pipe[0]))), ("joint", usd(joint)),
                                      ("rent that holds L", usd(fit))) if v >= inc * 0.99]
        cats["refined: past 0.99; alone: " + (" + ".join(which) or "none (compositions)")] += 1
    print(json.dumps({"gap": res.gap, "incumbent": inc, "cheap below 0.99": len(cheap), "sample": len(sample),
                      "outcomes": dict(sorted(cats.items())),
                      "ms each": {"refined (fresh memo)": round(1e3 * t_ref / len(sample), 3),
                                  "joint (scalar walk)": round(1e3 * t_joint / len(sample), 3),
                                  "rent that holds L": round(1e3 * t_fit / len(sample), 3)}}))


if __name__ == "__main__":
    main()
