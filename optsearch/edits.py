"""`--set KEY=VALUE`: what-if edits to the model, cluster and job specs, re-validated through the pydantic specs.

Keys (node types are addressed by name; VALUE is read as YAML, so 16 is an int, 5.5 a float, true a bool):

    node_types.NAME.FIELD=VALUE     a field of one node type, e.g. node_types.a100.price_usd_per_node_hour=5.5
                                    (`count` is an alias of num_nodes_available)
    cluster.FIELD=VALUE             a top-level cluster field (cluster.node_types.NAME.FIELD works too)
    job.FIELD=VALUE                 the training job, e.g. job.global_batch_size=512
    model.FIELD=VALUE               the model shape, e.g. model.seq_length=2048

Every edit is applied to the specs' dicts and the result validated again, so a bad key or value is a SpecError
(exit 2) naming the `--set` it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from optsearch.errors import SpecError
from optsearch.spec import ClusterSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.base import validate

ALIASES = {"count": "num_nodes_available"}
SECTIONS = ("node_types", "cluster", "job", "model")


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """One parsed `--set`: section (cluster, job or model), node type (for node_types) and field."""

    text: str
    section: str
    node_type: str | None
    field: str
    value: Any


def parse_edit(text: str) -> Edit:
    """'node_types.a100.count=16' -> Edit(section='cluster', node_type='a100', field='num_nodes_available', value=16)."""
    where = f"--set {text}"
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise SpecError(f"{where}: expected KEY=VALUE, e.g. node_types.a100.count=16 or job.global_batch_size=512")
    value = _parse_value(raw)
    parts = key.split(".")
    if parts[0] == "cluster" and len(parts) > 1 and parts[1] == "node_types":
        parts = parts[1:]
    if parts[0] == "node_types":
        # node type names may contain '.', e.g. p4d.24xlarge: the field is the last part, the name the rest
        if len(parts) < 3:
            raise SpecError(f"{where}: node_types.NAME.FIELD expected, e.g. node_types.a100.count=16")
        name, field = ".".join(parts[1:-1]), parts[-1]
        return Edit(text=text, section="cluster", node_type=name, field=ALIASES.get(field, field), value=value)
    if parts[0] not in SECTIONS or len(parts) != 2:
        raise SpecError(f"{where}: {key!r}: unknown key; use node_types.NAME.FIELD, cluster.FIELD, job.FIELD or "
                        f"model.FIELD")
    return Edit(text=text, section=parts[0], node_type=None, field=parts[1], value=value)


def _parse_value(raw: str) -> Any:
    """YAML scalars (16, 5.5, true, a100), plus numbers YAML 1.1 reads as text (1e9)."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw.strip()
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value else number
    return value


def _check_field(edit: Edit, cls: type[BaseModel], what: str) -> None:
    if edit.field not in cls.model_fields:
        known = ", ".join(cls.model_fields)
        alias = " (count is an alias of num_nodes_available)" if cls is NodeTypeSpec else ""
        raise SpecError(f"--set {edit.text}: {what} has no field {edit.field!r}; known: {known}{alias}")


def apply_edits(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, edits: Sequence[str | Edit]
) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    """The specs with every edit applied in order, each step validated (the error names the `--set`)."""
    for item in edits:
        edit = parse_edit(item) if isinstance(item, str) else item
        source = f"--set {edit.text}"
        if edit.section == "cluster" and edit.node_type is not None:
            data = cluster.model_dump()
            names = [n["name"] for n in data["node_types"]]
            if edit.node_type not in names:
                raise SpecError(f"{source}: cluster {cluster.name} has no node type {edit.node_type!r}; "
                                f"known: {', '.join(names)}")
            _check_field(edit, NodeTypeSpec, f"node type {edit.node_type}")
            data["node_types"][names.index(edit.node_type)][edit.field] = edit.value
            cluster = validate(ClusterSpec, data, source)
            _check_gpus(cluster, source)
        elif edit.section == "cluster":
            _check_field(edit, ClusterSpec, "the cluster")
            cluster = validate(ClusterSpec, {**cluster.model_dump(), edit.field: edit.value}, source)
            _check_gpus(cluster, source)
        elif edit.section == "job":
            _check_field(edit, JobSpec, "the job")
            data = {**job.model_dump(), edit.field: edit.value}
            # a new training length replaces the other way of giving it
            if edit.field == "train_iterations":
                data["train_tokens"] = None
            elif edit.field == "train_tokens":
                data["train_iterations"] = None
            job = validate(JobSpec, data, source)
        else:
            _check_field(edit, ModelSpec, "the model")
            model = validate(ModelSpec, {**model.model_dump(), edit.field: edit.value}, source)
    return model, cluster, job


def _check_gpus(cluster: ClusterSpec, source: str) -> None:
    from optsearch.catalog import gpus_for

    gpus = gpus_for(cluster)
    for i, node in enumerate(cluster.node_types):
        if node.gpu not in gpus:
            raise SpecError(f"{source}: node_types[{i}].gpu = {node.gpu!r}: unknown GPU; known: {', '.join(sorted(gpus))}")


def edited_problem(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    edits: Sequence[str | Edit] = (),
    *,
    profile: Any = None,
    global_batch_size: int | None = None,
    iterations: int | None = None,
    tokens: int | None = None,
):
    """build_problem with `--set` edits applied first (then the --global-batch-size/--iterations/--tokens overrides)."""
    from optsearch.catalog import load_cluster, load_model
    from optsearch.problem import build_problem

    model_spec = load_model(model) if isinstance(model, str) else model
    cluster_spec = load_cluster(cluster) if isinstance(cluster, str) else cluster
    job = model_spec.default_job
    if edits:
        model_spec, cluster_spec, job = apply_edits(model_spec, cluster_spec, job, edits)
    return build_problem(model_spec, cluster_spec, profile=profile, job=job, global_batch_size=global_batch_size,
                         iterations=iterations, tokens=tokens)
