"""Cluster spec: the node types one can rent, how many of each, at what price, with which links."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from optsearch.spec.base import Spec
from optsearch.spec.gpu import GpuSpec


class NodeTypeSpec(Spec):
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.]+$",
        description="Node type name used in plans, e.g. 'p4d.24xlarge' or 'a10'. Letters, digits, '_' and '.'.",
    )
    gpu: str = Field(min_length=1, description="GPU catalog name (or a name from this cluster's `gpus`).")
    gpus_per_node: int = Field(gt=0, le=1024, description="GPUs in one node.")
    num_nodes_available: int = Field(ge=0, le=100_000, description="How many nodes of this type can be rented at most.")
    price_usd_per_node_hour: float = Field(
        ge=1e-4, le=1e6, description="Rental price in USD per node-hour (on-demand)."
    )
    intra_node_link: Literal["nvlink", "pcie"] = Field(description="What connects the GPUs inside a node.")
    intra_node_gbyte_per_s: float = Field(
        ge=1e-3, le=1e6, description="Per-GPU one-direction bandwidth between GPUs of one node, GB/s (10^9 B/s)."
    )
    inter_node_gbit_per_s: float = Field(
        ge=1e-3, le=1e7, description="Network bandwidth of the whole node (all NICs), Gbit/s."
    )
    intra_node_allreduce_gbyte_per_s: float | None = Field(
        default=None, ge=1e-3, le=1e6,
        description="NCCL all-reduce bus bandwidth measured inside one node (nccl-tests busbw), GB/s; default: "
                    "intra_node_gbyte_per_s, x 0.5 on PCIe (see docs/cost-model.md, section 3).",
    )
    source: str = Field(default="", description="Where price and bandwidths come from.")
    collective_latency: Literal["nccl", "none"] = Field(
        default="nccl",
        description="Fixed time per collective and per pipeline send: 'nccl' (NCCL's ring latency model, "
                    "docs/cost-model.md section 3b) or 'none' (bandwidth terms only).",
    )


class ClusterSpec(Spec):
    name: str = Field(min_length=1, description="Catalog name, e.g. 'fasop-a100-a10'.")
    description: str = Field(default="", description="One line for `optsearch catalog clusters`.")
    node_types: list[NodeTypeSpec] = Field(min_length=1, description="Node types that may be rented.")
    gpus: list[GpuSpec] = Field(
        default_factory=list, description="Extra GPU specs for GPUs that are not in the built-in catalog."
    )

    @model_validator(mode="after")
    def _unique_names(self) -> "ClusterSpec":
        names = [n.name for n in self.node_types]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"node_types[].name must be unique; repeated: {', '.join(dup)}")
        return self

    def node_type(self, name: str) -> NodeTypeSpec:
        for node in self.node_types:
            if node.name == name:
                return node
        from optsearch.errors import SpecError

        known = ", ".join(n.name for n in self.node_types)
        raise SpecError(f"cluster {self.name}: unknown node type {name!r}; known: {known}")
