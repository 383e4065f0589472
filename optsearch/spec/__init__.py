"""Input specs (pydantic, extra='forbid'): GPU, model, cluster, job."""

from optsearch.spec.cluster import ClusterSpec, NodeTypeSpec
from optsearch.spec.gpu import GpuCatalog, GpuSpec
from optsearch.spec.job import JobSpec
from optsearch.spec.model import LayerKindSpec, ModelSpec

__all__ = ["ClusterSpec", "GpuCatalog", "GpuSpec", "JobSpec", "LayerKindSpec", "ModelSpec", "NodeTypeSpec"]
