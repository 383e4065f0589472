"""Megatron's communication overlaps in plan files and the launch (issue 15; docs/targets.md "Communication
overlaps"): the plan keys round-trip, upstream's rule between them is enforced, `launch` emits exactly the flags the
plan says (and reads them back), refuses what the cost model does not price, and Transformer Engine's userbuffers
are in the memory term. With OPTSEARCH_MEGATRON_LM set, upstream's own parse_args / validate_args accept the flags."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from optsearch.costmodel import estimate, tp_overlap_buffer_bytes
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.megatron import megatron_args, plan_from_megatron_args
from optsearch.plan import Plan, parse_balance, plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import engine_problem

from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401  (the fixture)


def _problem(model: str, cluster: str):
    return engine_problem("megatron", build_problem(model, cluster))


def _plan(balance: str, order: str, tp: int = 1, dp: int = 4, **fields) -> Plan:
    return Plan(tp=tp, dp=dp, micro_batch_size=1, stages=parse_balance(balance, order), **fields)


OVERLAPS = dict(distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)


def test_plan_json_round_trips_and_stays_unchanged_without_overlaps():
    bare = _plan("12-12-12-12", "a10")
    assert not {"overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"} & set(bare.to_dict())
    full = replace(bare, tp_comm_overlap=True, **OVERLAPS)
    text = json.dumps(full.to_dict())
    assert plan_from_dict(json.loads(text)) == full
    assert json.loads(text)["overlap_param_gather"] is True


@pytest.mark.parametrize("fields", [dict(overlap_param_gather=True, overlap_grad_reduce=True),
                                    dict(overlap_param_gather=True, distributed_optimizer=True)])
def test_param_gather_needs_the_distributed_optimizer_and_the_grad_overlap(fields):
    data = _plan("12-12-12-12", "a10").to_dict() | fields
    with pytest.raises(SpecError, match="overlap_param_gather = true: needs distributed_optimizer"):
        plan_from_dict(data, "p.json")


def test_a_non_boolean_key_is_refused():
    with pytest.raises(SpecError, match=r"p.json: overlap_grad_reduce = 'yes': must be true or false"):
        plan_from_dict(_plan("48", "a10").to_dict() | {"overlap_grad_reduce": "yes"}, "p.json")


def test_launch_emits_exactly_the_plan_flags_and_reads_them_back():
    problem = _problem("gpt2-xl", "fasop-a10")
    bare = megatron_args(problem, _plan("12-12-12-12", "a10")).args
    assert not any("overlap" in a for a in bare)
    plan = _plan("12-12-12-12", "a10", **OVERLAPS)
    margs = megatron_args(problem, plan)
    assert [a for a in margs.args if "overlap" in a] == ["--overlap-grad-reduce", "--overlap-param-gather"]
    assert any("core_r0.8.0" in n for n in margs.notes)  # pp > 1: the version the param gather is priced at
    back = plan_from_megatron_args(margs.args, node_order="a10", dp=plan.dp)
    assert (back.overlap_grad_reduce, back.overlap_param_gather, back.tp_comm_overlap) == (True, True, False)


def test_launch_refuses_the_bucketed_overlaps_on_the_interleaved_schedule():
    plan = _plan("12-12-12-12", "a10", virtual_stages=2, overlap_grad_reduce=True)
    with pytest.raises(UnsupportedPlanError, match="virtual_stages = 2: optsearch prices the bucketed overlaps"):
        megatron_args(_problem("gpt2-xl", "fasop-a10"), plan)


def test_tp_comm_overlap_emitted_only_at_tp_above_one_and_where_priced():
    problem = _problem("gpt3-13b", "aws-p4d")
    one = megatron_args(problem, _plan("10-10-10-10", "p4d.24xlarge", tp=1, dp=8, tp_comm_overlap=True))
    assert "--tp-comm-overlap" not in one.args and any("tp = 1" in n for n in one.notes)
    two = megatron_args(problem, _plan("10-10-10-10", "p4d.24xlarge", tp=2, dp=4, tp_comm_overlap=True))
    assert "--tp-comm-overlap" in two.args and "--sequence-parallel" in two.args
    a10 = _problem("gpt2-xl", "fasop-a10")  # A10's SM count is not in the model's table
    with pytest.raises(UnsupportedPlanError, match="no SM count for GPU"):
        megatron_args(a10, _plan("12-12-12-12", "a10", tp=2, dp=2, tp_comm_overlap=True))


def test_userbuffers_memory_by_hand():
    """GPT-3 13B (s 2048, h 5120), b = 2 on A100 (compute capability 8.0): 10 x 4096 x 5120 x 2 bytes = 419,430,400
    and 3 x 4 MiB of cuBLAS workspace = 12,582,912; with cp 2 the buffers halve."""
    problem = _problem("gpt3-13b", "aws-p4d")
    assert tp_overlap_buffer_bytes(problem, "p4d.24xlarge", 2) == 419_430_400 + 12_582_912
    assert tp_overlap_buffer_bytes(problem, "p4d.24xlarge", 2, cp=2) == 209_715_200 + 12_582_912
    h100 = _problem("gpt3-13b", "aws-p5")
    assert tp_overlap_buffer_bytes(h100, "p5.48xlarge", 1) == 209_715_200 + 3 * 33_554_432


def test_estimate_adds_the_userbuffers_to_every_stage():
    problem = _problem("gpt3-13b", "aws-p4d")
    plan = _plan("10-10-10-10", "p4d.24xlarge", tp=2, dp=4)
    off, on = estimate(problem, plan), estimate(problem, replace(plan, tp_comm_overlap=True))
    extra = tp_overlap_buffer_bytes(problem, "p4d.24xlarge", 1)
    assert [b.memory_bytes - a.memory_bytes for a, b in zip(off.stages, on.stages)] == pytest.approx([extra] * 4)


@pytest.mark.parametrize("case", ["grad", "both", "tp"])
def test_upstream_accepts_the_flags(upstream, monkeypatch, case):  # noqa: F811
    if case == "tp":
        problem = _problem("gpt3-13b", "aws-p4d")
        plan = _plan("10-10-10-10", "p4d.24xlarge", tp=2, dp=4, tp_comm_overlap=True, overlap_grad_reduce=True)
    else:
        problem = _problem("gpt2-xl", "fasop-a10")
        plan = _plan("12-12-12-12", "a10", **(OVERLAPS if case == "both" else dict(overlap_grad_reduce=True)))
    _check(upstream, monkeypatch, problem, plan)
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert (args.overlap_grad_reduce, args.overlap_param_gather, args.tp_comm_overlap) == (
        plan.overlap_grad_reduce, plan.overlap_param_gather, plan.tp_comm_overlap)
