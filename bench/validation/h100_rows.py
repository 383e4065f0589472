"""What the cost model charges on the Megatron-LM H100 rows, and the checks of docs/validation.md, "H100 rows
off by more than 10 %" (issue 15). Diagnostics only: nothing here changes a price.

    python bench/validation/h100_rows.py            # from the repository root, with optsearch installed

Prints, per row of megatron-h100.csv: predicted / measured, the iteration split (pipeline, exposed data-parallel
term), the layer forward split of the analytic profile; then the ratios under three what-ifs of settings the
README does not give (no recomputation in place of `selective`; micro-batch 2 and 4); then, for the checked terms,
their size per row: tile / wave quantization of the layer GEMMs on 132 SMs, Megatron-Core r0.8.0's fp32 cross
entropy against the head traffic charged, and r0.8.0's per-iteration passes over the fp32 gradient buffer.
Those two are priced since (docs/cost-model.md sections 4b and 8b); the columns still print their size per row.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from optsearch.costmodel import estimate
from optsearch.problem import build_problem
from optsearch.profile import analytic
from optsearch.validate import DEFAULT_MEMORY_HEADROOM, as_run, load_runs, price

CSV = Path(__file__).with_name("megatron-h100.csv")
SMS = 132  # H100 SXM
TILE_M, TILE_N = 128, 256  # a Hopper bf16 cuBLAS / CUTLASS tile (NVIDIA, "Matrix Multiplication Background", ch. 3)
CE_BYTES_R080 = 38 + 14  # fp32 passes of vocab_parallel_cross_entropy at core_v0.8.0, forward + backward, per logit
CE_BYTES_CHARGED = 3 * 4 * (1 + analytic.BACKWARD_OVER_FORWARD)  # head_forward_s (before 4b): 12 B forward, x 2 back
GRAD_BUFFER_BYTES = 4 + 4 + 8  # zero_grad_buffer, the NaN check's norm, grad_data *= 1/dp: per fp32 grad element


def problem_of(run):
    p = build_problem(run.model, run.cluster, profile="analytic", global_batch_size=run.global_batch_size,
                      check_dtype=False)
    return replace(as_run(p, run), memory_headroom=DEFAULT_MEMORY_HEADROOM)


def wave_efficiency(m: int, n: int) -> float:
    """Useful / issued tile work of an m x n output on SMS SMs: partial tiles and the last partial wave."""
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    return (m * n / (TILE_M * TILE_N)) / (math.ceil(tiles / SMS) * SMS)


def layer_wave_efficiency(tokens: int, h: int, tp: int) -> float:
    """FLOP-weighted wave efficiency of one GPT layer's 12 GEMMs (QKV, projection, FC1, FC2; fwd, dgrad, wgrad)."""
    gemms = [(tokens, 3 * h // tp, h), (tokens, h, h // tp), (tokens, 4 * h // tp, h), (tokens, h, 4 * h // tp)]
    work = ideal = 0.0
    for m, n, k in gemms:
        for mm, nn in ((m, n), (m, k), (k, n)):  # fwd, dgrad (out m x k), wgrad (out k x n)
            f = 2.0 * m * n * k
            ideal += f
            work += f / wave_efficiency(mm, nn)
    return ideal / work


def main() -> None:
    runs = load_runs(CSV)
    print("row                        pred/meas  m  pipeline_s  dp_exposed_s  layer fwd ms (GEMM+core / traffic-flash"
          " / fixed+launch)")
    for run in runs:
        p = problem_of(run)
        e = estimate(p, run.plan)
        gpu = p.profile.gpus[p.node(run.plan.stages[0].node_type).gpu]
        kind, tp, b = p.model.kinds[0], run.plan.tp, run.plan.micro_batch_size
        gemm = analytic.layer_forward_flops(p.model, kind, b) / tp / analytic.sustained_flop_per_s(gpu)
        traffic = (2.0 * analytic.korthikanti_activation_bytes(p.model, b, tp) / (gpu.hbm_gbyte_per_s * 1e9)
                   - analytic.flash_attention_saving_s(p.model, kind, gpu, tp, b))
        fixed = analytic.GEMM_FIXED_S + analytic.KERNELS_PER_LAYER * analytic.KERNEL_LAUNCH_S
        print(f"{run.run_id:26s} {e.iteration_time_s / run.measured_s:6.3f} {e.num_micro_batches:3d} "
              f"{e.pipeline_time_s:10.4f} {e.dp_allreduce_s:12.4f}   {gemm * 1e3:.3f} / {traffic * 1e3:.3f} / "
              f"{fixed * 1e3:.3f}")

    def ratios(label: str, rs) -> None:
        pr = price(rs)
        mean = sum(abs(x.predicted_s / x.run.measured_s - 1) for x in pr) / len(pr)
        cells = " ".join(f"{x.predicted_s / x.run.measured_s:.3f}{'' if x.fits else '*'}" for x in pr)
        print(f"{label:30s} {cells}  mean |error| {mean:.1%}")

    print("\nwhat-if (not committed; * = predicted not to fit)   1.7B .. 462B")
    ratios("as committed", runs)
    none = [replace(r, plan=replace(r.plan, stages=tuple(replace(s, recompute="none") for s in r.plan.stages)))
            for r in runs]
    ratios("no recomputation", none)
    for mbs in (2, 4):
        ratios(f"micro-batch {mbs}", [replace(r, plan=replace(r.plan, micro_batch_size=mbs)) for r in runs])

    print("\nrow                        waves(128x256, 132 SMs)  CE fp32 extra s/iter  grad-buffer passes s/iter"
          "  (share of measured)")
    for run in runs:
        p = problem_of(run)
        gpu = p.profile.gpus[p.node(run.plan.stages[0].node_type).gpu]
        m, tp, b = p.model, run.plan.tp, run.plan.micro_batch_size
        hbm = gpu.hbm_gbyte_per_s * 1e9
        e = estimate(p, run.plan)
        logits = m.seq_length * b * m.vocab_size / tp
        ce = (CE_BYTES_R080 - CE_BYTES_CHARGED) * logits / hbm * e.num_micro_batches
        grad = GRAD_BUFFER_BYTES * max(s.parameters for s in e.stages) / tp / hbm
        eff = layer_wave_efficiency(m.seq_length * b, m.hidden_size, tp)
        print(f"{run.run_id:26s} {eff:8.3f}                 {ce:8.4f} ({ce / run.measured_s:5.1%})"
              f"       {grad:8.4f} ({grad / run.measured_s:5.1%})")


if __name__ == "__main__":
    main()
