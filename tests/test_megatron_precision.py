"""The megatron launch's precision flag on GPUs without bf16 tensor cores (review finding 1): a bf16 job whose plan puts
a stage on a GPU of compute capability below 8.0 (V100 7.0, T4 7.5) launches with --fp16 (the rate the cost model
priced) and keeps the gradient dtype it was priced with; a GPU spec without compute_capability is not judged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch.megatron import megatron_args
from optsearch.plan import Plan, parse_balance
from optsearch.problem import build_problem
from optsearch.targets import engine_problem
from test_megatron_parse import _run_upstream, upstream  # noqa: F401  (the fixture: upstream's parse_args)


def _plan(balance: str, order: str, tp: int = 1, dp: int = 1) -> Plan:
    return Plan(tp=tp, dp=dp, micro_batch_size=1, stages=parse_balance(balance, order, "none"))


def _problem(model: str, cluster: str, **cc: float | None):
    """The megatron problem, with the named GPUs' compute capability replaced."""
    problem = engine_problem("megatron", build_problem(model, cluster))
    gpus = {name: gpu.model_copy(update={"compute_capability": cc[name]}) if name in cc else gpu
            for name, gpu in problem.gpus.items()}
    return replace(problem, gpus=gpus)


def test_bf16_job_on_v100_and_t4_launches_fp16_with_fp32_gradients():
    problem = _problem("gpt2-medium", "amp-p3-g4dn")
    assert problem.job.precision == "bf16" and problem.job.gradients_in_fp32
    margs = megatron_args(problem, _plan("12-12", "p3.8xlarge,g4dn.12xlarge", dp=4))
    assert "--bf16" not in margs.args
    assert "--fp16" in margs.args and "--accumulate-allreduce-grads-in-fp32" in margs.args
    note = next(n for n in margs.notes if n.startswith("precision:"))
    assert "V100-16GB, compute capability 7.0" in note and "T4, compute capability 7.5" in note


def test_bf16_job_with_16_bit_gradients_launches_plain_fp16():
    problem = _problem("gpt2-medium", "amp-p3-g4dn")
    problem = replace(problem, job=problem.job.model_copy(update={"grad_reduce_in_fp32": False}))
    margs = megatron_args(problem, _plan("24", "p3.8xlarge", dp=4))
    assert "--fp16" in margs.args
    assert "--bf16" not in margs.args and "--accumulate-allreduce-grads-in-fp32" not in margs.args


def test_one_pre_ampere_stage_switches_the_whole_launch_and_ampere_alone_keeps_bf16():
    problem = _problem("gpt2-medium", "fasop-a100-a10", A10G=7.5)  # an A10G posing as a Turing GPU
    assert problem.job.precision == "bf16"
    mixed = megatron_args(problem, _plan("0-8-8-8", "a100,a10*3", tp=2, dp=2))
    assert "--fp16" in mixed.args and "--bf16" not in mixed.args
    assert any(n.startswith("precision:") and "a10 (A10G, compute capability 7.5)" in n for n in mixed.notes)
    ampere = megatron_args(problem, _plan("24", "a100", tp=2, dp=2))
    assert "--bf16" in ampere.args and "--fp16" not in ampere.args
    assert not any(n.startswith("precision:") for n in ampere.notes)


def test_gpu_without_compute_capability_keeps_the_jobs_precision():
    problem = _problem("gpt2-medium", "amp-p3-g4dn", **{"V100-16GB": None})
    margs = megatron_args(problem, _plan("24", "p3.8xlarge", dp=4))
    assert "--bf16" in margs.args and "--fp16" not in margs.args


def test_fp16_job_priced_with_fp32_gradients_asks_megatron_for_them():
    problem = _problem("gpt2-xl", "fasop-a10")
    job = problem.job.model_copy(update={"precision": "fp16", "grad_reduce_in_fp32": True})
    margs = megatron_args(replace(problem, job=job), _plan("12-12-12-12", "a10", dp=4))
    assert "--fp16" in margs.args and "--accumulate-allreduce-grads-in-fp32" in margs.args
    plain = megatron_args(replace(problem, job=job.model_copy(update={"grad_reduce_in_fp32": None})),
                          _plan("12-12-12-12", "a10", dp=4))
    assert "--accumulate-allreduce-grads-in-fp32" not in plain.args


@pytest.mark.parametrize("fp32_grads", [None, False])
def test_switched_launch_passes_upstream_validation(upstream, monkeypatch, fp32_grads):  # noqa: F811
    """Upstream's parse_args and validate_args: fp16 on, bf16 off, gradients in the dtype the cost model priced."""
    problem = _problem("gpt2-medium", "amp-p3-g4dn")
    problem = replace(problem, job=problem.job.model_copy(update={"grad_reduce_in_fp32": fp32_grads}))
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, _plan("12-12", "p3.8xlarge,g4dn.12xlarge", dp=4))
    assert args.fp16 and not args.bf16
    assert args.accumulate_allreduce_grads_in_fp32 == problem.job.gradients_in_fp32
