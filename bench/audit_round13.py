"""Post-merge audit of round 13 (audit5): firstplan (EARLY_SEEDS_AFTER_LIST, DESCENT_CARRY / DESCENT_MORE_SHARE,
OFF_NOT_PAST_LIMIT) and budgetgap (ClimbCut / CLIMB_RESUME, DEEPER_RESHAPED). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round13.py --kind offheavy --seeds 0-19 --checks solve,clock
    nice -n 5 python bench/audit_round13.py --kind random --seeds 0-59 --checks resume,deeper

kinds: tests/test_audit_round11.KINDS (random, offheavy, tight, each also -pipelined); hypinter (-off): derandomized
draws of tests/test_interleaved.interleaved_instances (with the overlap on and the optimizer open). checks:
  solve   no time limit: cbc and cpsat equal brute force (status and value), every plan honest (check_plan_honest);
  clock   a clock that jumps (the solver module's time.perf_counter ahead by an offset): at the k-th call it jumps by
          1e6 s (past any limit) or by 0.3 x the limit (a share cut), for k spread over a run's calls, and a clock
          slowed on every call; time limit 10 s, both backends. Every answer is honest against brute force: "optimal"
          only at brute force's value, "infeasible" only where brute force is, a bound never above the optimum (the
          off candidates included), a plan honest and never below the optimum;
  resume  climbs (plain and wide, from random plans of the space that meet the budget) cut after 1-3 evaluations
          (NEIGHBOUR_EVALS) or by their deadline at a random call of the clock, sharing one record of ends, then the same starts climbed again with the record: the
          answers equal those of climbs alone (fresh memo, no record), plan and value;
  deeper  _deeper_interleaved's reshaped keys: every plan _climb_plans prices for such a key that meets the budget is
          at or above the key's least cheap bound over v (the order and stop of DEEPER_RESHAPED), and the step's
          answer equals the step without the stop (every reshaped key priced) or is at most as good only where the
          stop's bound is valid.
Prints one JSON line per failure and a summary."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time as real_time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_audit_dist_bounds import MAX_PLANS, check_plan_honest, small, space_plans  # noqa: E402
from test_audit_round11 import KINDS  # noqa: E402

from optsearch import solver as solver_module  # noqa: E402
from optsearch.baselines.exhaustive import solve_exhaustive  # noqa: E402
from optsearch.search import budget_violations, objective_value  # noqa: E402
from optsearch.solver import (  # noqa: E402
    Memo, _candidates, _climb, _climb_plans, _deeper_interleaved, _least_over_v, _refined_at_least, solve,
)
from optsearch.spec.budget import Budget  # noqa: E402

REL = 1e-6


class JumpClock:
    """time for the solver module: perf_counter = the real one + offset; at call number `at` the offset grows by
    `jump`; every call adds `step`."""

    def __init__(self, at: int | None = None, jump: float = 0.0, step: float = 0.0):
        self.at, self.jump, self.step, self.calls, self.offset = at, jump, step, 0, 0.0

    def perf_counter(self) -> float:
        self.calls += 1
        if self.at is not None and self.calls == self.at:
            self.offset += self.jump
        self.offset += self.step
        return real_time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(real_time, name)


def budgets_of(problem, options, seed):
    rng = random.Random(seed)
    ests = [e for _, _, e in space_plans(problem, options)]
    out = [Budget(objective="time"), Budget(objective="cost")]
    if not ests:
        return out
    for est in (rng.choice(ests), min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s)):
        for scale in (1.0, 1.05):
            out.append(Budget(objective="time", max_cost_usd=est.cost_usd * scale))
            out.append(Budget(objective="cost", max_time_s=est.training_time_s * scale))
    return out


def honest(problem, options, budget, got, truth, where):
    """What an answer may say, against brute force (truth)."""
    opt = truth.objective_value if truth.status == "optimal" else None
    if got.status == "infeasible":
        assert truth.status == "infeasible", where
    if got.status == "optimal":
        assert opt is not None and math.isclose(got.objective_value, opt, rel_tol=REL), where
        assert got.bound is None or math.isclose(got.bound, opt, rel_tol=REL), where
    if got.plan is not None:
        check_plan_honest(problem, options, budget, got.plan, got.objective_value)
        assert opt is not None and got.objective_value >= opt * (1 - REL), where
    if got.bound is not None:
        assert opt is not None and got.bound <= opt * (1 + REL), where
    if got.status == "timeout":
        assert got.plan is None, where
    if got.gap is not None and opt is not None:
        assert got.gap >= (got.objective_value - opt) / got.objective_value - REL, where


def check_solve(problem, options, seed, stats):
    for budget in budgets_of(problem, options, seed):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for name in ("cbc", "cpsat"):
            got = solve(problem, budget, solver=name, options=options)
            stats["solves"] += 1
            where = (name, budget.model_dump(exclude_none=True), truth.status, truth.objective_value, got.status,
                     got.objective_value, got.message)
            assert got.status == truth.status, where
            if truth.status == "optimal":
                assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), where
                check_plan_honest(problem, options, budget, got.plan, got.objective_value)


def check_clock(problem, options, seed, stats, points=6, limit=10.0):
    rng = random.Random(seed)
    budgets = budgets_of(problem, options, seed)
    for budget in rng.sample(budgets, min(6, len(budgets))):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for name in ("cbc", "cpsat"):
            counter = JumpClock()
            solver_module.time = counter
            try:
                solve(problem, budget, solver=name, options=options, time_limit_s=limit)
            finally:
                solver_module.time = real_time
            n = counter.calls
            clocks = [JumpClock(at=k, jump=1e6) for k in sorted(rng.sample(range(1, n + 1), min(points, n)))]
            clocks += [JumpClock(at=k, jump=0.3 * limit) for k in sorted(rng.sample(range(1, n + 1), min(points, n)))]
            clocks += [JumpClock(step=limit / max(1, n) * f) for f in (0.5, 2.0)]
            for clock in clocks:
                solver_module.time = clock
                try:
                    got = solve(problem, budget, solver=name, options=options, time_limit_s=limit)
                finally:
                    solver_module.time = real_time
                stats["solves"] += 1
                stats[got.status] = stats.get(got.status, 0) + 1
                stats["no_bound_feasible"] += got.status == "feasible" and got.bound is None
                stats["off_message"] += "distributed-optimizer-off" in (got.message or "")
                where = (name, budget.model_dump(exclude_none=True), clock.at, clock.jump, clock.step, n,
                         truth.status, truth.objective_value, got.status, got.objective_value, got.bound,
                         got.message, str(got.plan))
                honest(problem, options, budget, got, truth, where)


def meeting_starts(problem, options, budget, rng, count):
    meeting = [(p, e) for _, p, e in space_plans(problem, options)
               if p.virtual_stages == 1 and not budget_violations(p, e, budget)]
    return [rng.choice(meeting) for _ in range(count)] if meeting else []


def check_resume(problem, options, seed, stats, starts=5):
    rng = random.Random(seed)
    priced = [e for _, _, e in space_plans(problem, options)]
    if not priced:
        return
    pick = rng.choice(priced)
    for budget in (Budget(objective="time", max_cost_usd=pick.cost_usd * 1.2),
                   Budget(objective="cost", max_time_s=pick.training_time_s * 1.2)):
        begins = meeting_starts(problem, options, budget, rng, starts)
        if not begins:
            continue
        memo = Memo(problem, options)
        bounded, _ = _candidates(memo, budget)
        fresh_memo = Memo(problem, options)
        fresh_bounded, _ = _candidates(fresh_memo, budget)
        for wide in (False, True):
            ends: dict = {}
            for n, (plan, est) in enumerate(begins):  # cut climbs sharing ends: after 1-3 evaluations
                start = (objective_value(est, budget.objective), plan, est)  # (NEIGHBOUR_EVALS), or by the deadline
                if n % 2 == 0:  # at a random call of the clock (before or among the neighbours, or in _rescaled)
                    solver_module.NEIGHBOUR_EVALS = rng.randint(1, 3)
                else:
                    solver_module.time = JumpClock(at=rng.randint(1, 12), jump=1e6)
                try:
                    _climb(memo, budget, bounded, start, real_time.perf_counter() + 1e3, wide, ends=ends)
                finally:
                    solver_module.NEIGHBOUR_EVALS, solver_module.time = 1000, real_time
            stats["cuts"] += sum(isinstance(v, solver_module.ClimbCut) for v in ends.values())
            for plan, est in begins + begins[:2]:
                start = (objective_value(est, budget.objective), plan, est)
                shared = _climb(memo, budget, bounded, start, None, wide, ends=ends)
                alone = _climb(fresh_memo, budget, fresh_bounded, start, None, wide)
                stats["climbs"] += 1
                where = (budget.model_dump(exclude_none=True), wide, str(plan), shared[0], alone[0], str(shared[1]),
                         str(alone[1]))
                assert shared[0] == alone[0] and shared[1] == alone[1], where


def check_deeper(problem, options, seed, stats, starts=4):
    """Every v = 1 key's least cheap bound over v (as DEEPER_RESHAPED computes it) against every plan _climb_plans
    prices for it that meets the budget: every key's must hold (assert; an off key's (key[7] = 1) broke it before
    solver._least_over_v: the off candidates exist at v = 1 only, but _interleaved prices their plans at v > 1 too,
    counted in deeper_off_below before the assert). From random plans that meet the budget, the step's answer
    is honest and no worse than its start, and the reshaped keys it stops before (least >= its answer) that hold a
    plan meeting the budget below its answer are counted (deeper_missed: incumbents missed, never a proof)."""
    if not any(v > 1 for v in options.virtual_stages):
        return
    rng = random.Random(seed)
    priced = [e for _, _, e in space_plans(problem, options)]
    if not priced:
        return
    batch = problem.job.global_batch_size
    for scale in (1.0, 1.5, 3.0):
        budget = Budget(objective="time", max_cost_usd=min(e.cost_usd for e in priced) * scale)
        memo = Memo(problem, options)
        bounded, _ = _candidates(memo, budget)
        by_key = {item.cand.key: item for item in bounded if item.cand.v == 1}
        least = {k: low for k, low in _least_over_v(bounded).items() if k in by_key}  # as the step reads them
        best_of: dict = {}
        for k, low in least.items():  # every v = 1 key, reshaped or not: the bound the stop reads
            for plan, est in _climb_plans(memo, budget, by_key[k].cand):
                if budget_violations(plan, est, budget):
                    continue
                stats["deeper_plans"] += 1
                value = objective_value(est, "time")
                best_of[k] = min(best_of.get(k, math.inf), value)
                if value < low * (1 - REL):  # any key: off keys too since solver._least_over_v (audit5's find)
                    stats["deeper_off_below"] += k[7] != 0
                    raise AssertionError(("least bound above a priced plan", budget.model_dump(
                        exclude_none=True), k, low, value, str(plan)))
        for k, value in best_of.items():  # _refined_at_least (interleaved: each v) never rules out a key below
            stats["refined_checked"] += 1  # its best priced plan (off keys reach it at v > 1 only through this step)
            if _refined_at_least(memo, budget, by_key[k], value * (1 + 1e-6), True):
                stats["refined_wrong"] += 1
                print(json.dumps({"seed": seed, "refined_rules_out": k, "best_priced": value,
                                  "budget": budget.model_dump(exclude_none=True)}), flush=True)
                if k[7] == 0:
                    raise AssertionError(("refined rules out a key below its plan", k, value))
        for plan, est in meeting_starts(problem, options, budget, rng, starts):
            start = (objective_value(est, "time"), plan, est)
            got = _deeper_interleaved(memo, budget, bounded, start, None)
            stats["deeper_steps"] += 1
            assert got[0] <= start[0] and not budget_violations(got[1], got[2], budget)
            check_plan_honest(problem, options, budget, got[1], got[0])
            if plan.virtual_stages != 1 or not any(v > 1 for v in memo.options.virtual_stages):
                continue
            gpus, pp = plan.tp * plan.dp * plan.cp * len(plan.stages), len(plan.stages)
            for k, low in least.items():  # the reshaped keys the stop left unpriced
                if (k[0] * k[1] * k[5] * k[3] == gpus and k[3] > pp and batch % (k[1] * k[2]) == 0
                        and (batch // (k[1] * k[2])) % k[3] == 0 and low >= got[0] * (1 - 1e-9)
                        and best_of.get(k, math.inf) < got[0] * (1 - 1e-9)):
                    stats["deeper_missed"] += 1
                    print(json.dumps({"seed": seed, "missed_key": k, "least": low, "its_best": best_of[k],
                                      "step_gave": got[0], "start": str(plan)}), flush=True)


def hypinter_cases(n: int, off: bool):
    """n instances of tests/test_interleaved.interleaved_instances (derandomized; v > 1 in every space, cp and block
    recomputation sometimes); off: with --overlap-grad-reduce on and the optimizer left open (the off candidates at
    v = 1, as the megatron target searches)."""
    from dataclasses import replace

    from hypothesis import HealthCheck, given, settings

    from test_interleaved import interleaved_instances

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(interleaved_instances())
    def draw(case):
        problem, options, _, _ = case
        if off:
            job = problem.job.model_copy(update={"distributed_optimizer": None})
            problem = replace(problem, overlap_grad_reduce=True, job=job)
        out.append((problem, options))

    draw()
    return out


CHECKS = {"solve": check_solve, "clock": check_clock, "resume": check_resume, "deeper": check_deeper}


def run_checks(checks: dict, args, problem, options, seed: int, totals: dict) -> None:
    """Each of --checks on one instance: an assertion or any other error counts as a failure, printed as one JSON
    line with its trace (the sweep goes on). Shared by the audit sweeps of rounds 13 to 15."""
    for check in args.checks.split(","):
        try:
            checks[check](problem, options, seed, totals)
        except Exception as exc:  # an assertion or any other error: a failure
            totals["failures"] += 1
            print(json.dumps({"seed": seed, "check": check, "error": repr(exc)[:3000],
                              "trace": traceback.format_exc()[-1500:]}), flush=True)


def sweep(checks: dict, args, seeds, instance, keep, totals: dict, began: float, skipped: bool = False) -> int:
    """The sweep of rounds 13 to 21: instance(seed) (None: no more), those keep(problem, options) lets through, each
    checked by run_checks until --max-seconds of CPU; then the totals line. Returns the exit code (0). skipped
    (rounds 18 to 21): a None draw (over its plan limit, or past a drawn list's end) and a draw keep refuses are
    counted in totals["skipped"] and the sweep goes on."""
    for seed in seeds:
        if real_time.process_time() - began > args.max_seconds:
            break
        drawn = instance(seed)
        if drawn is None and not skipped:
            break
        if drawn is None or not keep(*drawn):
            if skipped:
                totals["skipped"] += 1
            continue
        problem, options = drawn
        totals["instances"] += 1
        run_checks(checks, args, problem, options, seed, totals)
    print_totals(args, totals, began)
    return 0


def print_totals(args, totals: dict, began: float) -> None:
    """The sweep's last line: its arguments, the counts of every check and its CPU seconds."""
    print(json.dumps({"kind": args.kind, "seeds": args.seeds, "checks": args.checks, **totals,
                      "cpu_s": round(real_time.process_time() - began, 1)}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="random", choices=[*KINDS, "hypinter", "hypinter-off"])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--checks", default="solve,clock")
    ap.add_argument("--max-seconds", type=float, default=1e9)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    totals = {"instances": 0, "solves": 0, "no_bound_feasible": 0, "off_message": 0, "cuts": 0, "climbs": 0,
              "deeper_plans": 0, "deeper_steps": 0, "deeper_off_below": 0, "deeper_missed": 0, "refined_checked": 0, "refined_wrong": 0, "failures": 0}
    began = real_time.process_time()
    seeds = range(int(lo), int(hi or lo) + 1)
    drawn = hypinter_cases(seeds[-1] + 1, args.kind == "hypinter-off") if args.kind.startswith("hypinter") else None
    return sweep(CHECKS, args, seeds, lambda seed: drawn[seed] if drawn is not None else KINDS[args.kind](seed),
                 small, totals, began)


if __name__ == "__main__":
    sys.exit(main())
