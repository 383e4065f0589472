"""Sequence parallelism (job.sequence_parallel, Megatron's --sequence-parallel wherever tp > 1): the cost-model term on
hand-computed numbers, the solvers against brute force with it on, and the launch flag (issue 16, item 2)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from draws import draws
from pytest import approx

import optsearch.costmodel as cm
from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.megatron import launch_files
from optsearch.plan import Plan, parse_balance
from optsearch.problem import build_problem
from optsearch.solver import solve
from optsearch.spec.budget import Budget
from test_costmodel import LAYER, toy_problem
from test_solver import MAX_PLANS, REL, _assert_honest, _budget, instances


def _with_sp(problem, on: bool = True):
    return replace(problem, job=problem.job.model_copy(update={"sequence_parallel": on}))


@pytest.mark.parametrize(
    "tp, recompute, expected",
    [
        # toy: s = h = 1000, b = 1, a = 8, so s b h = 1e6 and 5 a s / h = 40
        (2, "none", 37e6),  # s b h (34/t + 5 a s / (h t)) = 1e6 x (17 + 20); without SP 42e6
        (2, "selective", 17e6),  # 34 s b h / t; without SP 22e6
        (2, "full", 1e6),  # 2 s b h / t; without SP 2e6
        (1, "none", 74e6),  # t = 1: Megatron turns sequence parallelism off; nothing changes
        (1, "selective", 34e6),
        (1, "full", 2e6),
    ],
)
def test_sequence_parallel_activation_bytes(tp, recompute, expected):
    assert cm.layer_activation_bytes(_with_sp(toy_problem()), "fast", LAYER, tp, 1, recompute) == approx(expected)


def test_sequence_parallel_changes_memory_not_time():
    """Reduce-scatter + all-gather move what the all-reduce moved (each half of the ring all-reduce), so the stage time
    is the same; only the stored activations shrink."""
    off, on = toy_problem(), _with_sp(toy_problem())
    for r in ("none", "selective", "full"):
        assert cm.layer_step_s(on, "fast", LAYER, 2, 1, r) == cm.layer_step_s(off, "fast", LAYER, 2, 1, r)
        assert cm.layer_activation_bytes(on, "fast", LAYER, 2, 1, r) < cm.layer_activation_bytes(off, "fast", LAYER,
                                                                                                 2, 1, r)


@settings(max_examples=draws(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_optimum_with_sequence_parallelism_equals_brute_force(case):
    problem, options, objective, kind, factor = case
    problem = _with_sp(problem)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    without = solve_exhaustive(_with_sp(problem, False), budget, options=options, max_plans=MAX_PLANS)
    if without.status == "optimal":  # never worse with it: the same plans, each with no more memory, same time
        assert truth.status == "optimal" and truth.objective_value <= without.objective_value * (1 + 1e-12)
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        if truth.status == "infeasible":
            assert got.status == "infeasible"
            continue
        assert got.status == "optimal", got.message
        _assert_honest(problem, budget, options, got)
        assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL)


def test_launch_flag_only_with_tensor_parallelism():
    problem = _with_sp(build_problem("llama2-70b", "aws-p4d"))
    plan = Plan(tp=8, dp=2, micro_batch_size=1, stages=parse_balance("10-10-10-10-10-10-10-10", "p4d.24xlarge",
                                                                    "full"))
    text = launch_files(problem, plan, "megatron")[0]["megatron_args.sh"]
    assert "--sequence-parallel" in text
    gpt = _with_sp(build_problem("gpt2-xl", "fasop-a10"))
    flat = Plan(tp=1, dp=4, micro_batch_size=1, stages=parse_balance("12-12-12-12", "a10"))
    assert "--sequence-parallel" not in launch_files(gpt, flat, "megatron")[0]["megatron_args.sh"]
    wide = Plan(tp=2, dp=2, micro_batch_size=1, stages=parse_balance("12-12-12-12", "a10"))
    assert "--sequence-parallel" in launch_files(gpt, wide, "fasop")[0]["fasop_conf.sh"]


def test_unset_job_turns_sequence_parallelism_on_wherever_tp_is_above_one():
    """job.sequence_parallel unset (the catalog default) is on at tp > 1, as true is; false forces it off; tp = 1 never
    (Megatron turns it off there). The cost model never prices it slower or larger, so on is the search's choice."""
    unset = _with_sp(toy_problem(), None)
    for tp, on in ((1, False), (2, True), (4, True)):
        assert cm.sequence_parallel_on(unset.job, tp) is on
        assert cm.sequence_parallel_on(_with_sp(toy_problem(), True).job, tp) is on
        assert cm.sequence_parallel_on(_with_sp(toy_problem(), False).job, tp) is False
    for r in ("none", "selective", "full"):
        assert cm.layer_activation_bytes(unset, "fast", LAYER, 2, 1, r) == cm.layer_activation_bytes(
            _with_sp(toy_problem()), "fast", LAYER, 2, 1, r)


def test_catalog_default_launches_with_sequence_parallelism_at_tp_above_one():
    """A catalog job leaves sequence parallelism unset: a tp 2 plan launches with --sequence-parallel, and with
    --set job.sequence_parallel=false (forced off) without it."""
    problem = build_problem("gpt2-xl", "fasop-a10")
    assert problem.job.sequence_parallel is None
    plan = Plan(tp=2, dp=2, micro_batch_size=1, stages=parse_balance("12-12-12-12", "a10", "selective"))
    text = "".join(launch_files(problem, plan, "megatron")[0].values())
    assert "--sequence-parallel" in text
    off = "".join(launch_files(_with_sp(problem, False), plan, "megatron")[0].values())
    assert "--sequence-parallel" not in off
