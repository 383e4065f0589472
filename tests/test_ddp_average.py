"""--ddp-average-in-collective (issue 15, paramgather; docs/cost-model.md section 8c): upstream main averages the dense
gradients in the data-parallel collective (ReduceOp.AVG) and skips its 1 / (dp x cp) scale pass over the gradient
buffer. The plan field prices it, the search sets it where dp x cp > 1 for the megatron target, launch emits it; a
plan without it prices as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch import megatron
from optsearch.costmodel import ddp_average_on, estimate, expert_optimizer_step_s, grad_buffer_passes_s, optimizer_s
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.plan import Plan, Stage, plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import engine_problem


def _problem():
    return build_problem("gpt2-xl", "fasop-a100-a10")


def test_passes_without_the_scale_by_hand():
    """1e9 fp32 gradients (bf16 job) on an A100 (1,555 GB/s): zero + norm + scale (read, write) = 4 passes x 4 B =
    16 B per element, 16e9 / 1555e9 = 10.289 ms; averaged in the collective 2 passes = 8 B, 5.145 ms."""
    problem = replace(_problem(), job=_problem().job.model_copy(update={"precision": "bf16"}))
    assert problem.gpu_of("a100").hbm_gbyte_per_s == 1555.0
    assert grad_buffer_passes_s(problem, "a100", 1e9, 8) == pytest.approx(10.289389e-3, rel=1e-6)
    assert grad_buffer_passes_s(problem, "a100", 1e9, 8, scaled=False) == pytest.approx(5.144695e-3, rel=1e-6)
    assert grad_buffer_passes_s(problem, "a100", 1e9, 1) == grad_buffer_passes_s(problem, "a100", 1e9, 1, scaled=False)


def test_optimizer_step_drops_the_scale_for_dense_and_ep_one_experts_only():
    problem = replace(_problem(), ddp_average_in_collective=True)
    plain = _problem()
    saved = optimizer_s(plain, "a100", 1e9, 1, 8, 1, True) - optimizer_s(problem, "a100", 1e9, 1, 8, 1, True)
    assert saved == pytest.approx(2 * 1e9 * 2 / (problem.gpu_of("a100").hbm_gbyte_per_s * 1e9), rel=1e-9)  # fp16: 2 B
    # experts: averaged over the expert dp group, scaled by edp / dp = 1 / ep first (distributed_data_parallel.py
    # l. 271-273): the pass stays unless ep = 1
    assert expert_optimizer_step_s(problem, "a100", 1e9, 1, 8, 2) == expert_optimizer_step_s(plain, "a100", 1e9, 1, 8, 2)
    assert expert_optimizer_step_s(problem, "a100", 1e9, 1, 8, 1) < expert_optimizer_step_s(plain, "a100", 1e9, 1, 8, 1)


def _plan(**kw) -> Plan:
    return Plan(tp=1, dp=4, micro_batch_size=1, stages=(Stage(node_type="a10", num_layers=48, recompute="full"),),
                **kw)


def test_the_plan_field_prices_and_a_plan_without_it_is_unchanged():
    plain, flagged = _problem(), replace(_problem(), ddp_average_in_collective=True)
    before = estimate(plain, _plan())
    assert estimate(flagged, _plan()) == before  # a plan without the field: byte-identical, whatever the problem
    on = estimate(plain, _plan(ddp_average_in_collective=True))
    assert on == estimate(flagged, _plan(ddp_average_in_collective=True))
    local = before.stages[0].parameters  # tp 1: the whole buffer on every rank, 2 B (fp16 job)
    hbm = plain.gpu_of("a10").hbm_gbyte_per_s * 1e9
    assert before.optimizer_s - on.optimizer_s == pytest.approx(local * 2 * 2 / hbm, rel=1e-9)
    assert before.iteration_time_s - on.iteration_time_s == pytest.approx(local * 2 * 2 / hbm, rel=1e-9)


def test_the_search_sets_it_where_there_is_a_reduce():
    problem = engine_problem("megatron", _problem())
    assert ddp_average_on(problem, 4) and ddp_average_on(problem, 1, 2) and not ddp_average_on(problem, 1)
    assert not ddp_average_on(engine_problem("megatron", _problem(), overlap_grad_reduce=False), 4)
    assert not ddp_average_on(engine_problem("fasop", _problem()), 4)  # the fork has no such flag


def test_plan_file_and_launch():
    plan = _plan(ddp_average_in_collective=True)
    data = plan.to_dict()
    assert data["ddp_average_in_collective"] is True and "ddp_average_in_collective" not in _plan().to_dict()
    assert plan_from_dict(data) == plan
    with pytest.raises(SpecError, match="ddp_average_in_collective = 'yes': must be true or false"):
        plan_from_dict({**data, "ddp_average_in_collective": "yes"})
    problem = engine_problem("megatron", _problem())
    assert "--ddp-average-in-collective" in megatron.megatron_args(problem, plan).args
    assert "--ddp-average-in-collective" not in megatron.megatron_args(problem, _plan()).args
    with pytest.raises(UnsupportedPlanError, match="ddp_average_in_collective"):
        megatron.fasop_settings(engine_problem("fasop", _problem()), plan)
