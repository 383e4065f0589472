"""Megatron-LM's --overlap-grad-reduce in the cost model (docs/cost-model.md section 7c): the bucketed gradient
collective launched during the last micro-batch's backward, on hand-computed numbers, and the validation CSV column
that turns it on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import (
    estimate,
    exposed_grad_reduce_s,
    gradient_bytes,
    gradient_sync_s,
    overlap_bucket_count,
    overlap_bucket_elements,
    overlapped_grad_reduce_s,
    stage_forward_s,
    stage_layer_kinds,
)
from optsearch.errors import SpecError
from optsearch.problem import build_problem
from optsearch.validate import as_run, load_runs, price

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "bench/validation/megatron-h100.csv"


def test_bucket_size_follows_megatron_default():
    """distributed_data_parallel.py: bucket_size = max(40e6, 1e6 x dp group size) elements."""
    assert overlap_bucket_elements(8) == 40_000_000
    assert overlap_bucket_elements(40) == 40_000_000
    assert overlap_bucket_elements(48) == 48_000_000


def test_bucket_count_first_stage_only():
    """ceil(elements / bucket) on pipeline rank 0; one bucket on ranks > 0 (bucket_size None there)."""
    assert overlap_bucket_count(1.7e9, 48, True) == 36  # 1.7e9 / 48e6 = 35.4
    assert overlap_bucket_count(80e6, 8, True) == 2
    assert overlap_bucket_count(10e6, 8, True) == 1
    assert overlap_bucket_count(1.7e9, 48, False) == 1
    assert overlap_bucket_count(0.0, 8, True) == 1


def test_overlapped_collective_by_hand():
    # comm-bound: 4 buckets of 0.25 s, backward 0.5 s (a bucket ready every 0.125 s): the last ends at
    # 0.125 + 1.0 = 1.125 s, 0.625 s after the backward
    assert overlapped_grad_reduce_s(1.0, 0.5, 4) == pytest.approx(0.625)
    # compute-bound: 4 buckets of 0.05 s, a bucket ready every 0.25 s: only the last bucket's 0.05 s shows
    assert overlapped_grad_reduce_s(0.2, 1.0, 4) == pytest.approx(0.05)
    # one bucket: nothing hidden; no collective: nothing exposed
    assert overlapped_grad_reduce_s(0.7, 5.0, 1) == pytest.approx(0.7)
    assert overlapped_grad_reduce_s(0.0, 1.0, 4) == 0.0


def test_overlapped_collective_matches_a_bucket_by_bucket_simulation():
    """The closed form equals a direct simulation: bucket k ready at k W / n, collectives one at a time."""
    for sync, window, n in [(1.0, 0.5, 4), (0.3, 0.9, 7), (2.0, 2.0, 3), (0.01, 3.0, 50), (5.0, 0.1, 10)]:
        end = 0.0
        for k in range(1, n + 1):
            end = max(end, k * window / n) + sync / n
        assert overlapped_grad_reduce_s(sync, window, n) == pytest.approx(end - window)


def test_later_stages_hide_behind_earlier_stages_last_backward():
    # stage 0: 2 buckets, max(0.5, 1.0 - 0.3 / 2) = 0.85; stage 1: 0.5 - 0.3 = 0.2; stage 2: 0.4 - (0.3 + 0.2) < 0
    assert exposed_grad_reduce_s([1.0, 0.5, 0.4], [0.3, 0.2, 0.1], 2) == pytest.approx([0.85, 0.2, 0.0])


def _h100_problem(index: int):
    run = load_runs(H100)[index]
    problem = build_problem(run.model, run.cluster, global_batch_size=run.global_batch_size, check_dtype=False)
    return as_run(problem, run), _grad_reduce_only(run.plan)


def _grad_reduce_only(plan):
    """The row's plan without the other two overlaps (tests/test_overlap_param_gather.py, test_tp_comm_overlap.py)."""
    return replace(plan, overlap_param_gather=False, tp_comm_overlap=False)


def test_estimate_prices_the_exposed_reduce_scatter_by_hand():
    """The H100 32B row (one stage, distributed optimizer, fp32 gradients): the reduce-scatter (4 of the 4 + 2 bytes
    per element of gradient_sync_s) is overlapped with the last backward in ceil(P / t / 48e6) buckets, the
    16-bit parameter all-gather (2 of 6) stays exposed; nothing else in the iteration moves."""
    problem, plan = _h100_problem(3)
    assert plan.overlap_grad_reduce and plan.pp == 1 and plan.distributed_optimizer
    on = estimate(problem, plan)
    off = estimate(problem, replace(plan, overlap_grad_reduce=False))
    stage = off.stages[0]
    sync = gradient_sync_s(problem, stage.node_type, stage.parameters, plan.tp, plan.dp, True, 1, True)
    assert sync == pytest.approx(off.dp_allreduce_s)
    assert gradient_bytes(problem.job) == 4
    backward = stage.compute_s - stage_forward_s(problem, stage.node_type, stage_layer_kinds(problem.model, plan)[0],
                                                 plan.tp, 1, True, True)
    n = overlap_bucket_count(stage.parameters / plan.tp, plan.dp, True)
    expected = overlapped_grad_reduce_s(sync * 4 / 6, backward, n) + sync * 2 / 6
    assert on.dp_allreduce_s == pytest.approx(expected)
    assert 0 < on.dp_allreduce_s < off.dp_allreduce_s
    assert on.pipeline_time_s == off.pipeline_time_s and on.optimizer_s == off.optimizer_s
    assert on.iteration_time_s == pytest.approx(off.iteration_time_s - off.dp_allreduce_s + on.dp_allreduce_s)


def test_forward_is_about_a_third_of_the_step():
    """The backward window is the step less its forward: with selective recomputation about 2/3 of the step."""
    problem, plan = _h100_problem(0)  # 1.7B, tp 1
    stage = estimate(problem, plan).stages[0]
    fwd = stage_forward_s(problem, stage.node_type, stage_layer_kinds(problem.model, plan)[0], 1, 1, True, True)
    assert 0.25 < fwd / stage.compute_s < 0.4


def test_off_by_default_and_never_slower():
    runs = [replace(r, plan=_grad_reduce_only(r.plan)) for r in load_runs(H100)]
    on = price(runs)
    off = price([replace(r, plan=replace(r.plan, overlap_grad_reduce=False)) for r in runs])
    for a, b in zip(on, off):
        assert a.predicted_s < b.predicted_s
    plan = runs[0].plan
    assert replace(plan, overlap_grad_reduce=False) == type(plan)(tp=plan.tp, dp=plan.dp,
                                                                   micro_batch_size=plan.micro_batch_size,
                                                                   stages=plan.stages, distributed_optimizer=True,
                                                                   param_gather_dispatch="core_r0.8.0")  # (ppgather)


def test_csv_column_values(tmp_path):
    text = H100.read_text()
    bad = tmp_path / "bad.csv"
    lines = text.splitlines()
    bad.write_text("\n".join([lines[0], lines[1].replace(",1,1,1,48 GPUs", ",1,1,2,48 GPUs")]) + "\n")
    with pytest.raises(SpecError, match="overlap_grad_reduce = '2': must be 1, 0 or empty"):
        load_runs(bad)
    empty = tmp_path / "empty.csv"
    empty.write_text("\n".join([lines[0], lines[1].replace(",1,1,1,1,1,48 GPUs", ",1,0,1,1,,48 GPUs")]) + "\n")
    assert load_runs(empty)[0].plan.overlap_grad_reduce is False


@pytest.mark.parametrize("column", ["grad_reduce_overlap", "param_gather_overlap", "overlap_tp_comm"])
def test_misnamed_overlap_columns_are_refused(tmp_path, column):
    lines = H100.read_text().splitlines()
    path = tmp_path / "x.csv"
    path.write_text("\n".join([lines[0] + "," + column, lines[1] + ",1"]) + "\n")
    with pytest.raises(SpecError, match=column):
        load_runs(path)
