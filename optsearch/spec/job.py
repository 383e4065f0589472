"""Training job spec: how much training, at what batch size and precision."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from optsearch.spec.base import Spec


class JobSpec(Spec):
    global_batch_size: int = Field(
        gt=0, le=1_000_000, description="Sequences per optimizer step (all data-parallel replicas)."
    )
    train_iterations: int | None = Field(
        default=None, gt=0, le=10**10, description="Training length in optimizer steps. Give this or train_tokens."
    )
    train_tokens: int | None = Field(
        default=None,
        gt=0,
        le=10**16,
        description="Training length in tokens; iterations = ceil(tokens / (global batch x sequence length)).",
    )
    precision: Literal["fp16", "bf16"] = Field(
        default="bf16", description="Mixed-precision compute dtype (weights and activations use 2 bytes)."
    )
    optimizer: Literal["adam"] = Field(default="adam", description="Optimizer; Adam with fp32 master weights.")
    distributed_optimizer: bool | None = Field(
        default=None,
        description="Megatron's --use-distributed-optimizer (optimizer states sharded over the dp x cp ranks, gradients "
                    "reduce-scattered, parameters all-gathered). Unset: the search decides, and turns it on wherever "
                    "dp x cp > 1 (under the cost model it never costs time or memory: docs/knobs.md); true: the same "
                    "(on wherever dp x cp > 1); false: off for every plan.",
    )
    grad_reduce_in_fp32: bool | None = Field(
        default=None,
        description="Gradients accumulated and all-reduced in fp32 (Megatron's --accumulate-allreduce-grads-in-fp32, "
                    "DeepSpeed's fp32_allreduce). Default: on for bf16 (Megatron forces it), off for fp16.",
    )
    sequence_parallel: bool | None = Field(
        default=None,
        description="Megatron's --sequence-parallel wherever tp > 1: the activations tensor parallelism leaves "
                    "whole (layer-norm and dropout inputs) are split over the tp ranks too (Korthikanti et al. 2022). "
                    "Under the cost model it never costs time or memory, so unset (the default) or true turns it on "
                    "for every plan with tp > 1; false forces it off.",
    )

    @property
    def gradients_in_fp32(self) -> bool:
        """Whether gradients are kept and all-reduced in fp32 (the job's setting, else Megatron's default)."""
        if self.grad_reduce_in_fp32 is not None:
            return self.grad_reduce_in_fp32
        return self.precision == "bf16"

    @model_validator(mode="after")
    def _exactly_one_length(self) -> "JobSpec":
        if (self.train_iterations is None) == (self.train_tokens is None):
            raise ValueError("give exactly one of train_iterations and train_tokens (train_iterations = "
                             f"{self.train_iterations}, train_tokens = {self.train_tokens})")
        return self

    def iterations(self, seq_length: int) -> int:
        """Optimizer steps for the whole training run."""
        if self.train_iterations is not None:
            return self.train_iterations
        assert self.train_tokens is not None
        return math.ceil(self.train_tokens / (self.global_batch_size * seq_length))
