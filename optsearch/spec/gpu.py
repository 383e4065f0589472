"""GPU spec: what the cost model needs to know about one accelerator."""

from __future__ import annotations

from pydantic import Field

from optsearch.spec.base import Spec


class GpuSpec(Spec):
    name: str = Field(description="Catalog name, e.g. 'A100-SXM-80GB'.", min_length=1)
    memory_gib: float = Field(gt=0, le=10_000, description="Device memory in GiB (2^30 bytes) as the vendor sells it.")
    peak_fp16_tflop_per_s: float = Field(
        ge=1e-3, le=1e6, description="Peak dense (no sparsity) FP16/BF16 tensor-core throughput in TFLOP/s."
    )
    hbm_gbyte_per_s: float = Field(
        ge=1e-3, le=1e7, description="Device memory bandwidth in GB/s (10^9 bytes per second)."
    )
    usable_memory_gib: float | None = Field(
        default=None, gt=0, le=10_000,
        description="Memory the card exposes to programs (nvidia-smi's memory.total), GiB; default memory_gib.",
    )
    sustained_fp16_tflop_per_s: float | None = Field(
        default=None, ge=1e-3, le=1e6,
        description="Sustained dense FP16/BF16 GEMM rate of large matrix products (benchmarks), TFLOP/s; "
                    "default 0.75 x peak.",
    )
    source: str = Field(default="", description="Where the numbers come from (datasheet).")
    compute_capability: float | None = Field(
        default=None, ge=1, le=20,
        description="CUDA compute capability, major.minor (8.0: A100, 9.0: H100; NVIDIA's CUDA GPUs list). Flash "
                    "attention needs 8.0 or newer (Transformer Engine's backend filter, docs/cost-model.md section "
                    "14, \"Flash attention\"); absent: not assumed, the scores are priced as stored.",
    )


class GpuCatalog(Spec):
    gpus: list[GpuSpec] = Field(description="GPU specs, one per catalog name.")
