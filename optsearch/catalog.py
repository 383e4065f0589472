"""Resolve a name ("gpt2-xl", "fasop-a100-a10") or a YAML/JSON path to a spec.

Built-in catalogs live beside the package: models/*.yaml, clusters/*.yaml and clusters/gpus.yaml.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from optsearch.errors import SpecError
from optsearch.spec import ClusterSpec, GpuCatalog, GpuSpec, ModelSpec
from optsearch.spec.base import read_mapping, validate

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
CLUSTERS_DIR = ROOT / "clusters"
GPUS_FILE = CLUSTERS_DIR / "gpus.yaml"


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref or "\\" in ref


def _catalog_files(directory: Path) -> dict[str, Path]:
    files = sorted(p for p in directory.glob("*.yaml") if p != GPUS_FILE) if directory.is_dir() else []
    return {p.stem: p for p in files}


@lru_cache(maxsize=None)
def gpu_catalog() -> dict[str, GpuSpec]:
    """The built-in GPU catalog, by name."""
    catalog = validate(GpuCatalog, read_mapping(GPUS_FILE), str(GPUS_FILE))
    return {g.name: g for g in catalog.gpus}


def model_names() -> list[str]:
    return list(_catalog_files(MODELS_DIR))


def cluster_names() -> list[str]:
    return list(_catalog_files(CLUSTERS_DIR))


def _resolve(ref: str, directory: Path, what: str) -> tuple[dict, str]:
    if _looks_like_path(ref):
        path = Path(ref)
        return read_mapping(path), str(path)
    files = _catalog_files(directory)
    if ref not in files:
        other, other_dir = ("cluster", CLUSTERS_DIR) if what == "model" else ("model", MODELS_DIR)
        if ref in _catalog_files(other_dir):
            raise SpecError(f"unknown {what} {ref!r}: {ref} is a {other} in the catalog, not a {what} (swapped "
                            "--model and --cluster?)")
        known = ", ".join(files) or "(none)"
        raise SpecError(f"unknown {what} {ref!r}; known: {known} (or give a path to a .yaml/.json file)")
    return read_mapping(files[ref]), str(files[ref].relative_to(ROOT))


def _check_kind(data: dict, source: str, what: str) -> None:
    """A cluster file given as the model (or the reverse) says so, instead of listing every key as unknown."""
    if what == "model" and "node_types" in data and "num_layers" not in data:
        raise SpecError(f"{source}: looks like a cluster spec (it has node_types), not a model (swapped --model and "
                        "--cluster?)")
    if what == "cluster" and "node_types" not in data and ("num_layers" in data or "hidden_size" in data):
        raise SpecError(f"{source}: looks like a model spec (it has num_layers/hidden_size), not a cluster (swapped "
                        "--model and --cluster?)")


def load_model(ref: str) -> ModelSpec:
    data, source = _resolve(ref, MODELS_DIR, "model")
    _check_kind(data, source, "model")
    return validate(ModelSpec, data, source)


def load_cluster(ref: str) -> ClusterSpec:
    data, source = _resolve(ref, CLUSTERS_DIR, "cluster")
    _check_kind(data, source, "cluster")
    cluster = validate(ClusterSpec, data, source)
    gpus = gpus_for(cluster)
    for i, node in enumerate(cluster.node_types):
        if node.gpu not in gpus:
            known = ", ".join(sorted(gpus))
            raise SpecError(f"{source}: node_types[{i}].gpu = {node.gpu!r}: unknown GPU; known: {known}; or define "
                            f"it in the cluster's gpus: list (docs/specs.md)")
    return cluster


def gpus_for(cluster: ClusterSpec) -> dict[str, GpuSpec]:
    """The built-in GPU catalog, extended (and overridden) by the cluster's own `gpus`."""
    gpus = dict(gpu_catalog())
    gpus.update({g.name: g for g in cluster.gpus})
    return gpus
