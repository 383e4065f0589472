"""Post-merge audit of round 10 (docs/solver.md "Round 10 after the merge: the seams, audited"): the seams between
timeb (stage 0's reduce and the tied embedding in the positional bound), lazyoff (the distributed-optimizer-off
candidates built after the first plan, solver.LAZY_OFF / _with_off) and costside (the climb's skip,
solver._refined_at_least), written in parallel, none seeing the others.

The checks are functions, so that bench/audit_round10.py can run them over many seeds; the tests here run a few:
  * check_solve: both backends against brute force (both optimizer settings in the space) under edge budgets (none;
    B and D at plans' exact values, just inside BUDGET_REL and just below the least value; an off plan's time and
    cost; a rent and a GPU limit), on each path by which the off candidates join: after the seeds' first plan (no
    limit), under a time limit (seed search, early seeds, descent, climb shares), in the loop at once with no seeds
    (OFF_WAIT_S 0, QUICK_SEEDS 0), and with the climb's skip off (the same values);
  * the climb's skip (tests/test_climb_refined.check_skip) and timeb's floors
    (tests/test_positional_first_reduce._least_ratio) on memory-tight and off-heavy instances, which those files'
    own tests do not draw (their instances are test_audit_dist_bounds.random_instance's).
With paramgather merged (--overlap-param-gather searched at pp = 1, --ddp-average-in-collective; with_knobs turns
both on), the same checks run on instances with the knobs. Checks that fail on a broken version: the off candidates
never joining (_with_off adds nothing: check_solve), and timeb's stage-0 floor counting the parameter all-gather as
exposed where --overlap-param-gather hides it (the floor check)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

import optsearch.formulation.positional as _positional
from optsearch import solver as solver_module
from optsearch.costmodel import distributed_optimizer_on
from optsearch.spec.budget import Budget
from priced import solve_exhaustive

from test_audit_dist_bounds import (
    MAX_PLANS, check_plan_honest, off_heavy_instance, random_instance, small, space_plans,
)


def tight_instance(seed: int):
    """random_instance with 2.5-6 GiB GPUs and 4-8k sequences: memory-tight (recomputation, and the optimizer
    setting's memory, decide which plans fit; some instances have no plan at all)."""
    from optsearch.problem import Problem, with_flash_attention
    from optsearch.profile import AnalyticProfile

    problem, options = random_instance(seed)
    rng = random.Random(20_000 + seed)
    gpus = [g.model_copy(update={"memory_gib": rng.choice([2.5, 3.0, 4.0, 6.0])}) for g in problem.cluster.gpus]
    model = problem.model.model_copy(update={"seq_length": rng.choice([4096, 8192])})
    cluster = problem.cluster.model_copy(update={"gpus": gpus})
    by_name = {g.name: g for g in gpus}
    out = Problem(model=model, cluster=cluster, job=problem.job, gpus=by_name,
                  profile=AnalyticProfile(model=model, gpus=by_name), overlap_grad_reduce=True)
    if problem.flash_attention:
        out = with_flash_attention(out, True)
    return replace(out, **{k: getattr(problem, k) for k in ("overlap_param_gather", "ddp_average_in_collective")
                           if hasattr(problem, k)}), options


def with_knobs(instance):
    """The instance generator with paramgather's knobs in the problem, as engine_problem sets them for upstream
    Megatron-LM: --overlap-param-gather searched (on for one-stage plans with the distributed optimizer and the
    overlap) and --ddp-average-in-collective (dp x cp > 1)."""
    def made(seed: int):
        problem, options = instance(seed)
        return replace(problem, overlap_param_gather=True, ddp_average_in_collective=True), options

    made.__name__ = f"{instance.__name__}_with_knobs"
    return made


def solve_budgets(priced: list, rng: random.Random) -> list[Budget]:
    """Edge budgets: none; B at the fastest plan's cost, at the cheapest's cost, within BUDGET_REL below it (brute
    force counts the plan as meeting it) and 1e-4 below it (infeasible); D the same way at the fastest plan's time
    and at the cheapest's; an off plan's exact time and cost (where one exists); a random plan's rent and GPUs."""
    out = [Budget(objective="cost"), Budget(objective="time")]
    if not priced:
        return out
    ests = [e for _, _, e in priced]
    fastest = min(ests, key=lambda e: e.training_time_s)
    cheapest = min(ests, key=lambda e: e.cost_usd)
    out += [Budget(objective="time", max_cost_usd=fastest.cost_usd),
            Budget(objective="time", max_cost_usd=cheapest.cost_usd),
            Budget(objective="time", max_cost_usd=cheapest.cost_usd * (1 - 1e-4)),
            Budget(objective="cost", max_time_s=cheapest.training_time_s),
            Budget(objective="cost", max_time_s=fastest.training_time_s),
            Budget(objective="cost", max_time_s=fastest.training_time_s * (1 - 1e-4)),
            Budget(objective="time", max_cost_usd=cheapest.cost_usd * (1 - 5e-7)),
            Budget(objective="cost", max_time_s=fastest.training_time_s * (1 - 5e-7))]
    off = [e for _, p, e in priced if not p.distributed_optimizer]
    if off:
        pick = rng.choice(off)
        out += [Budget(objective="time", max_cost_usd=pick.cost_usd),
                Budget(objective="cost", max_time_s=pick.training_time_s)]
    pick = rng.choice(priced)
    out += [Budget(objective=rng.choice(["cost", "time"]), max_usd_per_hour=pick[2].usd_per_hour),
            Budget(objective=rng.choice(["cost", "time"]), max_gpus=pick[1].num_gpus)]
    return out


# solve's paths: (module settings, time limit)
PATHS = {
    "default": ({}, None),  # the off candidates join after the seeds' first plan
    "limit": ({}, 60.0),  # seed search, early seeds and descent, climbs with their shares
    "join-at-once": ({"OFF_WAIT_S": 0.0, "QUICK_SEEDS": 0}, None),  # in the loop, before any plan
    "no-skip": ({"CLIMB_REFINED": False}, 60.0),  # the climb without costside's skip
    # limits that stop the search early: the off candidates join by OFF_WAIT_SHARE of the limit, or not at all
    # before the limit; every claim made must still hold (below)
    "tiny-limit": ({}, 0.02),
    "short-limit": ({"QUICK_SEEDS": 0}, 0.2),
}
STOPPED = ("tiny-limit", "short-limit")  # paths whose answer may be a plan without a proof


def check_solve(problem, options, seed: int, paths=tuple(PATHS), solvers=("cbc", "cpsat")) -> dict:
    """Every path's answer on both backends equals brute force's (status, value), and every plan is honest
    (check_plan_honest: in the space, fits, meets the budget, priced as reported, launch flags as the plan says)."""
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    stats = {"plans": len(priced), "budgets": 0, "solves": 0, "infeasible": 0, "off_optima": 0, "gather_optima": 0}  # off_optima: an
    # off candidate's (dist False where the search's default is on, the ones lazyoff builds late)
    for budget in solve_budgets(priced, rng):
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        stats["budgets"] += 1
        stats["infeasible"] += truth.status == "infeasible"
        stats["off_optima"] += truth.status == "optimal" and truth.plan.distributed_optimizer is False and \
            distributed_optimizer_on(problem.job, truth.plan.dp, truth.plan.cp)
        stats["gather_optima"] += truth.status == "optimal" and truth.plan.overlap_param_gather
        for path in paths:
            patches, limit = PATHS[path]
            for name in solvers:
                with mock.patch.multiple(solver_module, **patches) if patches else _Nothing():
                    got = solver_module.solve(problem, budget, solver=name, options=options, time_limit_s=limit)
                stats["solves"] += 1
                where = (path, name, budget, truth.status, truth.objective_value, got.status, got.message)
                if path in STOPPED and got.status in ("feasible", "timeout"):  # stopped: no claim of optimality
                    stats["stopped"] = stats.get("stopped", 0) + 1
                    if got.plan is not None:  # a plan that exists and meets the budget, no better than the optimum
                        assert truth.status == "optimal", where
                        check_plan_honest(problem, options, budget, got.plan, got.objective_value)
                        assert got.objective_value >= truth.objective_value * (1 - 1e-6), where
                    if got.bound is not None and truth.status == "optimal":  # a proven bound lies below the optimum
                        assert got.bound <= truth.objective_value * (1 + 1e-6), where
                    continue
                if truth.status == "infeasible":
                    assert got.status == "infeasible", where
                    continue
                assert truth.status == "optimal" and got.status == "optimal", where
                check_plan_honest(problem, options, budget, got.plan, got.objective_value)
                assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6), where
    return stats


_FIRST = _positional.first_stage_reduce_s  # before any monkeypatch


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# off-heavy 2: 15 plans, an off candidate's plan the optimum under 12 of its 14 budgets; tight 1 with paramgather's
# knobs: 10 plans on 2.5-6 GiB GPUs at seq 4096-8192 (most plans do not fit), a one-stage plan with the gather on the
# optimum under 7 of its 14 budgets
SOLVE_CASES = ((off_heavy_instance, 2, ("default", "join-at-once")), (with_knobs(tight_instance), 1, ("default",)))


@pytest.mark.parametrize("instance, seed, paths", SOLVE_CASES)
def test_every_join_path_equals_brute_force_at_edge_budgets(instance, seed, paths):
    problem, options = instance(seed)
    assert small(problem, options)
    stats = check_solve(problem, options, seed, paths)
    assert stats["infeasible"] > 0 and stats["solves"] >= 28  # the budgets below the least value are infeasible
    assert stats["off_optima"] > 0 or stats["gather_optima"] > 0  # lazyoff's candidates, or gather-on plans, win


def test_the_check_fails_when_the_off_candidates_never_join():
    """A lazy path that never builds the off candidates (_with_off adding nothing) answers above brute force, or
    'infeasible' where only off plans meet the budget: check_solve fails on it (off-heavy seed 2, the default path)."""
    problem, options = off_heavy_instance(2)
    with mock.patch.object(solver_module, "_with_off", lambda memo, budget, slower, bounded, *deadline: (bounded, [], 0)), \
            pytest.raises(AssertionError):
        check_solve(problem, options, 2, ("default",), ("cpsat",))


@pytest.mark.parametrize("instance, seed", [(off_heavy_instance, 2), (tight_instance, 12),
                                            (with_knobs(off_heavy_instance), 2), (with_knobs(tight_instance), 1)])
def test_the_skip_and_the_floors_hold_on_off_heavy_and_memory_tight_instances(instance, seed):
    """costside's skip (check_skip: _refined_at_least is False at every v = 1 candidate's best plan under each edge
    budget) and timeb's floors (_least_ratio: every v = 1 plan at or above its candidate's positional bound), with
    off candidates (off-heavy) and where memory decides (tight), which their own tests' instances do not draw."""
    from test_climb_refined import check_skip
    from test_positional_first_reduce import _least_ratio

    problem, options = instance(seed)
    stats = check_skip(problem, options, seed)
    assert stats["checked"] > 100 and stats["skipped"] > 0
    least, raised = _least_ratio(problem, options)
    assert least >= 1 - 1e-9 and raised > 0


def _gather_exposed(f):
    """A broken stage-0 floor: timeb's h_0 with the parameter all-gather counted in rest_0 on a one-stage plan with
    --overlap-param-gather (as timeb's floor priced rest_0 before paramgather: the all-gather share of alpha, exposed
    after the step), where the gather hides behind the first forward (only its delay stays)."""
    out = _FIRST(f)
    c = f.c
    if out is None or not c.param_gather_s_per_param:
        return out
    n = np.arange(out.shape[1], dtype=float)
    params = n * c.layer_params[0] + c.fixed_params[0]
    return out + np.array([c.param_gather_s_per_param[g] * params for g in range(out.shape[0])]) * (1 - 1e-12)


def test_the_floor_check_fails_when_stage_0_counts_the_hidden_gather(monkeypatch):
    """timeb's floor is valid under paramgather because Coefficients.allreduce_floor_s_per_param is 0 where the
    gather is on (pp = 1): with the gather counted as exposed in rest_0, the positional bound of a gather-on candidate
    lies above its plans (off-heavy seed 2 with the knobs: tp 1, dp 4, b 1, pp 1, 419.06 s bound, 417.58 s plan), and
    the check above fails."""
    from test_positional_first_reduce import _least_ratio

    problem, options = with_knobs(off_heavy_instance)(2)
    assert _least_ratio(problem, options)[0] >= 1 - 1e-9
    monkeypatch.setattr(_positional, "first_stage_reduce_s", _gather_exposed)
    assert _least_ratio(problem, options)[0] < 1 - 1e-9
