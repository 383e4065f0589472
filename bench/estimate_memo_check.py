"""The cost model's memo and the profile's cache on a row's own plans (issue 14, item 3, round 21, loop39;
docs/solver.md "Round 21: time under a cost budget, the proof loop's work per bound (loop39, 2026-11-25)").

    python bench/estimate_memo_check.py --model megatron-39b --cluster mixed-pool-8k --max-cost-usd 516104.72

Solves the row (time under the cost budget, the CPU clock, --time-limit, default 10) recording every plan that
`costmodel.estimate` is asked to price, then prices them all again with costmodel.ESTIMATE_MEMO and
profile.analytic.GET_CACHE off and on (each setting on a fresh problem, --passes times): the CPU per call and how many
Estimates equal the switches-off ones (dataclass equality: every field, floats exact).
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--max-cost-usd", type=float, required=True)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()

    import optsearch.costmodel as C
    import optsearch.profile.analytic as A
    import optsearch.solver as S
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.spec.budget import Budget
    from optsearch.targets import engine_problem

    def fresh():
        return engine_problem("megatron", edited_problem(args.model, args.cluster, []))

    problem = fresh()
    plans, orig = [], C.estimate

    def recorded(p, plan):
        plans.append(plan)
        return orig(p, plan)
    for mod in list(sys.modules.values()):  # every module that imported estimate by name
        if getattr(mod, "__name__", "").startswith("optsearch") and getattr(mod, "estimate", None) is orig:
            mod.estimate = recorded
    clock = time.perf_counter
    time.perf_counter = time.process_time
    S.solve(problem, Budget(objective="time", max_cost_usd=args.max_cost_usd), time_limit_s=args.time_limit,
            options=space_from_target("megatron", problem))
    time.perf_counter = clock
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("optsearch") and getattr(mod, "estimate", None) is recorded:
            mod.estimate = orig

    def run(memo: bool, cache: bool):
        C.ESTIMATE_MEMO, A.GET_CACHE = memo, cache
        p, out = fresh(), []
        t0 = time.process_time()
        for plan in plans:
            try:
                out.append(C.estimate(p, plan))
            except Exception as e:  # refused both ways or not: counted by the comparison
                out.append(repr(e))
        return out, time.process_time() - t0
    base, _ = run(False, False)
    for _ in range(args.passes):
        for memo, cache in ((False, False), (False, True), (True, False), (True, True)):
            out, cpu = run(memo, cache)
            same = sum(a == b for a, b in zip(out, base))
            print(f"ESTIMATE_MEMO={int(memo)} GET_CACHE={int(cache)}: {len(plans)} plans, {cpu:.3f} s CPU "
                  f"({1e3 * cpu / max(1, len(plans)):.2f} ms per estimate), equal to the switches-off ones: "
                  f"{same}/{len(plans)}")
    C.ESTIMATE_MEMO, A.GET_CACHE = True, True


if __name__ == "__main__":
    main()
