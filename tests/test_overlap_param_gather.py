"""Megatron-LM's --overlap-param-gather at core_r0.8.0 in the cost model (docs/cost-model.md section 7d): the
distributed optimizer's parameter all-gather dispatched at the step's start and waited for by the first forward, on
hand-computed numbers, and the validation CSV column that turns it on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import (
    estimate,
    gradient_sync_s,
    overlap_bucket_count,
    param_gather_delay_s,
    stage_forward_s,
    stage_layer_kinds,
)
from optsearch.errors import SpecError
from optsearch.problem import build_problem
from optsearch.validate import as_run, load_runs, price

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "bench/validation/megatron-h100.csv"


def test_one_stage_by_hand():
    # 4 buckets of 0.1 s against a 1.0 s first forward (0.25 s per bucket): only the first bucket's 0.1 s shows
    assert param_gather_delay_s([0.4], [1.0], 4) == pytest.approx(0.1)
    # comm-bound: 4 buckets of 0.5 s against 1.0 s: the chain ends at 0.5 + 3 x 0.5 + 0.25 = 2.25 s, 1.25 s late
    assert param_gather_delay_s([2.0], [1.0], 4) == pytest.approx(1.25)
    # one bucket: all of it waits; nothing to gather: no delay
    assert param_gather_delay_s([0.3], [1.0], 1) == pytest.approx(0.3)
    assert param_gather_delay_s([0.0], [1.0], 4) == 0.0


def test_later_stages_hide_their_gather_behind_the_pipeline_fill():
    # stage 0: 3 buckets, max(0.1, 0.3 - 0.2 x 2 / 3) = 0.1667, ends 0.3667; stage 1 waits to 0.5, ends 0.6;
    # stage 2's 0.2 s gather ended long before: ends 0.7; without gathers the fill is 0.4 s: 0.3 s late
    assert param_gather_delay_s([0.3, 0.5, 0.2], [0.2, 0.1, 0.1], 3) == pytest.approx(0.3)
    # every later gather shorter than the fill before it: only stage 0's first bucket shows
    assert param_gather_delay_s([0.4, 0.3, 0.3], [1.0, 1.0, 1.0], 4) == pytest.approx(0.1)


def test_matches_a_wait_then_dispatch_simulation():
    """The closed form equals the r0.8.0 chain: bucket 0 dispatched at 0, bucket k + 1 dispatched when the forward
    waits on bucket k (the pre-hook), the forward of bucket k starting when its gather has ended."""
    for gather, forward, n in [(0.4, 1.0, 4), (2.0, 1.0, 4), (0.7, 0.7, 3), (5.0, 0.2, 9), (0.05, 3.0, 30)]:
        start = gather / n  # bucket 0's gather, then its forward
        for _ in range(1, n):
            start = start + max(forward / n, gather / n)  # next gather runs from this bucket's start
        end = start + forward / n
        assert param_gather_delay_s([gather], [forward], n) == pytest.approx(end - forward)


def _h100(index: int):
    run = load_runs(H100)[index]
    problem = build_problem(run.model, run.cluster, global_batch_size=run.global_batch_size, check_dtype=False)
    return as_run(problem, run), replace(run.plan, tp_comm_overlap=False)  # section 7d alone


def test_estimate_moves_the_gather_to_the_first_forward_by_hand():
    """The H100 32B row (one stage, fp32 gradients): the 2 of 6 bytes per element of gradient_sync_s that are the
    16-bit parameter all-gather leave the end of the iteration and delay the first forward instead."""
    problem, plan = _h100(3)
    assert plan.overlap_param_gather and plan.overlap_grad_reduce and plan.pp == 1
    on = estimate(problem, plan)
    off = estimate(problem, replace(plan, overlap_param_gather=False))
    stage = off.stages[0]
    gather = gradient_sync_s(problem, stage.node_type, stage.parameters, plan.tp, plan.dp, True, 1, True) * 2 / 6
    forward = stage_forward_s(problem, stage.node_type, stage_layer_kinds(problem.model, plan)[0], plan.tp, 1, True,
                              True)
    n = overlap_bucket_count(stage.parameters / plan.tp, plan.dp, True)
    delay = max(gather / n, gather - forward * (n - 1) / n)
    assert on.stages[0].dp_allreduce_s == pytest.approx(off.stages[0].dp_allreduce_s - gather)
    assert on.dp_allreduce_s == pytest.approx(off.dp_allreduce_s - gather + delay)
    assert on.pipeline_time_s == off.pipeline_time_s
    assert 0 < delay < gather


def test_pipelined_row_adds_the_fill_delay():
    """The 70B row (2 stages): the delay is param_gather_delay_s over both stages' gathers and first forwards."""
    problem, plan = _h100(4)
    assert plan.pp == 2
    on = estimate(problem, plan)
    off = estimate(problem, replace(plan, overlap_param_gather=False))
    kinds = stage_layer_kinds(problem.model, plan)
    gathers = [gradient_sync_s(problem, s.node_type, s.parameters, plan.tp, plan.dp, True, 1, True) * 2 / 6
               for s in off.stages]
    forwards = [stage_forward_s(problem, s.node_type, kinds[i], plan.tp, 1, i == 0, i == 1)
                for i, s in enumerate(off.stages)]
    n = overlap_bucket_count(off.stages[0].parameters / plan.tp, plan.dp, True)
    delay = param_gather_delay_s(gathers, forwards, n)
    rest = max(s.dp_allreduce_s - g for s, g in zip(off.stages, gathers))
    assert on.dp_allreduce_s == pytest.approx(rest + delay)
    assert on.iteration_time_s < off.iteration_time_s


def test_off_by_default_and_other_sets_untouched():
    run = load_runs(H100)[0]
    plan = run.plan
    assert type(plan)(tp=1, dp=1, micro_batch_size=1, stages=plan.stages).overlap_param_gather is False
    on, off = price([run]), price([replace(run, plan=replace(plan, overlap_param_gather=False))])
    assert on[0].predicted_s < off[0].predicted_s


def test_csv_needs_the_distributed_optimizer_and_the_grad_overlap(tmp_path):
    lines = H100.read_text().splitlines()
    head = lines[0].split(",")
    row = lines[1].split(",")
    for column in ("distributed_optimizer", "overlap_grad_reduce"):
        bad = list(row)
        bad[head.index(column)] = "0"
        path = tmp_path / f"{column}.csv"
        path.write_text("\n".join([lines[0], ",".join(bad)]) + "\n")
        with pytest.raises(SpecError, match="overlap_param_gather = 1 needs distributed_optimizer = 1 and "
                                            "overlap_grad_reduce = 1"):
            load_runs(path)
    bad = list(row)
    bad[head.index("overlap_param_gather")] = "2"
    path = tmp_path / "two.csv"
    path.write_text("\n".join([lines[0], ",".join(bad)]) + "\n")
    with pytest.raises(SpecError, match="overlap_param_gather = '2': must be 1, 0 or empty"):
        load_runs(path)
