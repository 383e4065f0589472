"""Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers, TE v1.7 defaults) in the cost model
(docs/cost-model.md section 3c), on hand-computed numbers, and the validation CSV column that turns it on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import (
    GPU_SM_COUNT,
    TP_OVERLAP_COMM_SMS,
    bulk_exposed_s,
    estimate,
    pipelined_reduce_scatter_exposed_s,
    ring_exchange_exposed_s,
    stage_layer_kinds,
    tp_allreduce_s,
    tp_overlap_gemm_s,
    tp_overlap_layer_change_s,
    tp_overlap_pass_s,
)
from optsearch.errors import SpecError
from optsearch.problem import build_problem
from optsearch.validate import as_run, load_runs

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "bench/validation/megatron-h100.csv"
SHARE = 16 / 132  # TE's num_sm = 16 comm SMs of the H100 SXM's 132


def test_constants_from_the_sources():
    assert TP_OVERLAP_COMM_SMS == 16 and GPU_SM_COUNT["H100-SXM-80GB"] == 132


def test_ring_exchange_by_hand():
    # tp 4: 3 steps of 1/3 s against GEMM chunks of 0.2 s: ends at 1.0 + 0.2 = 1.2 s, 0.4 s after the 0.8 s GEMM
    assert ring_exchange_exposed_s(1.0, 0.8, 4) == pytest.approx(0.4)
    assert ring_exchange_exposed_s(0.2, 1.0, 8) == 0.0


def test_ring_exchange_matches_a_chunk_by_chunk_simulation():
    """Chunk 0 on the local shard; step i's send/receive starts when step i - 1's has ended (TE's send stream waits
    on the receive); GEMM chunk i + 1 starts when its chunk is in and the previous chunk is done."""
    for comm, gemm, tp in [(1.0, 0.8, 4), (0.2, 1.0, 8), (0.5, 0.5, 2), (3.0, 0.1, 8)]:
        step, chunk = comm / (tp - 1), gemm / tp
        end = chunk
        for i in range(1, tp):
            end = max(end, i * step) + chunk
        assert ring_exchange_exposed_s(comm, gemm, tp) == pytest.approx(end - gemm)


def test_pipelined_reduce_scatter_by_hand():
    # 4 chunks: GEMM-bound, only the last chunk's 0.1 s shows, plus 16/132 of the SMs during 3 x 0.1 s
    assert pipelined_reduce_scatter_exposed_s(0.4, 1.0, 4, 0.0) == pytest.approx(0.1)
    assert pipelined_reduce_scatter_exposed_s(0.4, 1.0, 4, SHARE) == pytest.approx(0.1 + SHARE * 0.3)
    # comm-bound: 1.0 - 0.4 x 3 / 4 = 0.7 exposed, the GEMM shares the GPU for 0.3 s
    assert pipelined_reduce_scatter_exposed_s(1.0, 0.4, 4, 0.25) == pytest.approx(0.7 + 0.25 * 0.3)
    assert pipelined_reduce_scatter_exposed_s(0.0, 1.0, 4, SHARE) == 0.0


def test_bulk_by_hand():
    assert bulk_exposed_s(0.3, 1.0, 0.25) == pytest.approx(0.075)
    assert bulk_exposed_s(1.0, 0.4, 0.25) == pytest.approx(0.6 + 0.1)
    assert bulk_exposed_s(0.0, 1.0, 0.25) == 0.0


def _h100(index: int):
    run = load_runs(H100)[index]
    problem = build_problem(run.model, run.cluster, global_batch_size=run.global_batch_size, check_dtype=False)
    return as_run(problem, run), run.plan


def test_layer_of_the_16b_row_by_hand():
    """16B row: h 6144, f 24576, s 4096, b 1, tp 4 on DGX H100 (370 GB/s all-reduce bus bandwidth, NCCL latency
    8.4 + 6 x 3.4 us), 732 TFLOP/s sustained."""
    problem, plan = _h100(2)
    node = plan.stages[0].node_type
    assert plan.tp == 4
    message = 4096 * 6144 * 2
    comm = (1.5 * message / 370e9 + 28.8e-6) / 2  # half of section 3's all-reduce: 0.1164 ms
    assert tp_allreduce_s(problem, node, 4, 1) / 2 == pytest.approx(comm)
    qkv = 2 * 4096 * 6144 * 3 * 6144 / 4 / 732e12  # 0.3168 ms
    proj, fc = qkv / 3, 2 * 4096 * 6144 * 24576 / 4 / 732e12  # 0.1056 ms, 0.4224 ms
    assert tp_overlap_gemm_s(problem, node, 1, 4) == pytest.approx({"qkv": qkv, "proj": proj, "fc1": fc, "fc2": fc})
    # forward: both all-gathers hidden (comm < 3/4 of the GEMM); proj's reduce-scatter comm - 3/4 proj, fc2's the
    # last chunk; each + 16/132 of the SMs for 3/4 of min(comm, GEMM)
    forward = (comm - 0.75 * proj + SHARE * 0.75 * proj) + (comm / 4 + SHARE * 0.75 * comm)
    # backward: ring fc2 and proj dgrad (proj's 3/4 x 0.1056 < comm: 0.0372 ms shows), four bulk collectives
    backward = (comm - 0.75 * proj) + 2 * SHARE * comm + 2 * SHARE * comm
    fwd, bwd = tp_overlap_pass_s(problem, node, 4, 1)
    assert fwd == pytest.approx(forward) and bwd == pytest.approx(backward)
    assert fwd == pytest.approx(0.0866e-3, abs=1e-7)
    # selective recomputation: the step's 8 priced all-gathers / reduce-scatters (4 all-reduces) are replaced
    kind = problem.model.kinds[0]
    assert tp_overlap_layer_change_s(problem, node, kind, 4, 1, "selective") == pytest.approx(
        forward + backward - 8 * comm)
    # full recomputation runs the forward (and its overlapped collectives) twice: 6 all-reduces were priced
    assert tp_overlap_layer_change_s(problem, node, kind, 4, 1, "full") == pytest.approx(
        2 * forward + backward - 12 * comm)


def test_estimate_adds_the_change_per_layer():
    problem, plan = _h100(4)  # 70B, tp 8, 2 stages
    assert plan.tp_comm_overlap
    on = estimate(problem, plan)
    off = estimate(problem, replace(plan, tp_comm_overlap=False))
    kinds = stage_layer_kinds(problem.model, plan)
    by_name = {k.name: k for k in problem.model.kinds}
    for i, stage in enumerate(plan.stages):
        change = sum(count * tp_overlap_layer_change_s(problem, stage.node_type, by_name[name], plan.tp, 1,
                                                       stage.recompute) for name, count in kinds[i].items())
        assert change < 0
        assert on.stages[i].compute_s == pytest.approx(off.stages[i].compute_s + change)
    assert on.iteration_time_s < off.iteration_time_s


def test_tp_one_is_unchanged():
    problem, plan = _h100(0)  # 1.7B, tp 1
    assert plan.tp_comm_overlap and plan.tp == 1
    assert estimate(problem, plan) == estimate(problem, replace(plan, tp_comm_overlap=False))


def test_needs_sequence_parallelism_and_no_context_parallelism():
    problem, plan = _h100(2)
    no_sp = replace(problem, job=problem.job.model_copy(update={"sequence_parallel": False}))
    with pytest.raises(SpecError, match="tp_comm_overlap: needs sequence parallelism"):
        estimate(no_sp, plan)
    with pytest.raises(SpecError, match="block recomputation"):
        estimate(problem, replace(plan, cp=2))


def test_csv_column(tmp_path):
    lines = H100.read_text().splitlines()
    head, row = lines[0].split(","), lines[2].split(",")
    assert load_runs(H100)[1].plan.tp_comm_overlap is True
    for value, match in (("2", "tp_comm_overlap = '2': must be 1, 0 or empty"),):
        bad = list(row)
        bad[head.index("tp_comm_overlap")] = value
        path = tmp_path / "bad.csv"
        path.write_text("\n".join([lines[0], ",".join(bad)]) + "\n")
        with pytest.raises(SpecError, match=match):
            load_runs(path)
    off = list(row)
    off[head.index("tp_comm_overlap")] = ""
    path = tmp_path / "off.csv"
    path.write_text("\n".join([lines[0], ",".join(off)]) + "\n")
    assert load_runs(path)[0].plan.tp_comm_overlap is False
