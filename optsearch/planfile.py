"""Plan files: the plan `solve --out` writes, with the problem it was solved for, so that the file stands on its own.

`solve --out plan.json` (and `solve --json`) write, beside the plan and its estimate, a `problem` object:

    problem.model    {ref, sha256, spec}    ref: the --model given; sha256: of the spec as read from ref (before --set
    problem.cluster  {ref, sha256, spec}    edits), over its canonical JSON; spec: the spec the solve used, after the
                                            edits (the cluster's spec lists every GPU its node types use, so it does
                                            not depend on the built-in GPU catalog)
    problem.profile  {ref, sha256?, csv?}   'analytic', or a table's path, the sha256 of its CSV form and the CSV
    problem.job      the job spec solved for (after --global-batch-size / --iterations / --tokens)
    problem.edits    the --set edits, in order
    problem.budget   the budget: objective and limits
    problem.memory_headroom  the share of each GPU's usable memory the plan leaves free (--memory-headroom)
    problem.target   the engine the plan was searched for (--target: megatron or fasop; optsearch/targets.py)
    problem.flash_attention  whether the engine runs flash attention where it can (--[no-]flash-attention; absent in
                     older files: the target's default, targets.engine_problem)

`estimate --plan`, `launch` and `calibrate` rebuild the problem from it (`problem_for_plan`); a --model or --cluster
given beside the file is compared with the recorded one by content hash, and a difference is said on stderr.
The plan's derived fields (nodes, balance, num_micro_batches, pp, each stage's gpu) are checked against the plan's
stages (`check_derived_fields`): an edit to one of them alone is a contradiction, refused with the field named.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from optsearch.errors import SpecError
from optsearch.plan import Plan, plan_from_dict
from optsearch.spec.base import read_mapping

PLAN_FILE_LIMIT_BYTES = 64 * 2**20  # a plan with an embedded profile table; plans without one are a few KiB


def spec_sha256(spec: Any) -> str:
    """sha256 of a spec's canonical JSON (sorted keys, no spaces): the same spec gives the same hash, whatever the
    file's layout, comments or format (YAML or JSON)."""
    data = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else spec
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def read_plan_file(path: Path) -> dict[str, Any]:
    """The JSON object in a plan file; SpecError (one line) for anything else: not a file, binary, not JSON."""
    return read_mapping(Path(path), limit_bytes=PLAN_FILE_LIMIT_BYTES, kind="JSON",
                        expected="a JSON object (as `solve --out` writes)")


# ---- writing -------------------------------------------------------------------------------------------------


def problem_record(problem, *, model_ref: str, cluster_ref: str, profile_ref: str, edits: list[str] | None,
                   budget, target: str | None = None) -> dict[str, Any]:
    """The `problem` object of a plan file (see the module docstring)."""
    from optsearch.catalog import load_cluster, load_model
    from optsearch.profile import ProfileTable

    cluster = problem.cluster.model_dump(mode="json")
    own = {g["name"] for g in cluster["gpus"]}
    for node in problem.cluster.node_types:  # the catalog GPUs the node types use, so the file needs no catalog
        if node.gpu not in own and node.gpu in problem.gpus:
            cluster["gpus"].append(problem.gpus[node.gpu].model_dump(mode="json"))
            own.add(node.gpu)
    profile: dict[str, Any] = {"ref": profile_ref}
    if isinstance(problem.profile, ProfileTable):
        text = problem.profile.to_csv()
        profile.update(sha256=hashlib.sha256(text.encode()).hexdigest(), csv=text)
    return {
        "model": {"ref": model_ref, "sha256": spec_sha256(load_model(model_ref)),
                  "spec": problem.model.model_dump(mode="json")},
        "cluster": {"ref": cluster_ref, "sha256": spec_sha256(load_cluster(cluster_ref)), "spec": cluster},
        "profile": profile,
        "job": problem.job.model_dump(mode="json"),
        "edits": list(edits or []),
        "budget": budget.model_dump(mode="json"),
        "memory_headroom": problem.memory_headroom,
        "target": target,
        "flash_attention": problem.flash_attention,
    }


# ---- reading -------------------------------------------------------------------------------------------------


def _section(record: dict, key: str, source: str) -> dict:
    value = record.get(key)
    if not isinstance(value, dict):
        raise SpecError(f"{source}: problem.{key} = {value!r}: must be an object (as `solve --out` writes it)")
    return value


def problem_from_record(record: Any, source: str, *, profile: str | None = None):
    """The Problem a plan file records. `profile` (a --profile given beside the file) replaces the recorded one."""
    from optsearch.catalog import gpus_for
    from optsearch.problem import build_problem
    from optsearch.profile.table import parse_csv
    from optsearch.spec import ClusterSpec, JobSpec, ModelSpec
    from optsearch.spec.base import validate

    if not isinstance(record, dict):
        raise SpecError(f"{source}: problem = {record!r}: must be an object (as `solve --out` writes it)")
    model = validate(ModelSpec, _section(record, "model", source).get("spec"), f"{source}: problem.model.spec")
    cluster = validate(ClusterSpec, _section(record, "cluster", source).get("spec"), f"{source}: problem.cluster.spec")
    gpus = gpus_for(cluster)
    for i, node in enumerate(cluster.node_types):
        if node.gpu not in gpus:
            raise SpecError(f"{source}: problem.cluster.spec.node_types[{i}].gpu = {node.gpu!r}: unknown GPU")
    job = validate(JobSpec, record.get("job"), f"{source}: problem.job")
    headroom = recorded_headroom(record, source)
    prof: Any = profile
    if profile is None:
        recorded = _section(record, "profile", source)
        ref = recorded.get("ref")
        if ref in (None, "analytic"):
            prof = "analytic"
        elif isinstance(recorded.get("csv"), str):
            prof = parse_csv(recorded["csv"], f"{source}: problem.profile ({ref})")
        else:
            raise SpecError(f"{source}: problem.profile = {ref!r}: the table is not in the file; give --profile")
    problem = engine_attention(build_problem(model, cluster, profile=prof, job=job), record, source)
    return problem if headroom is None else replace(problem, memory_headroom=headroom)


def engine_attention(problem, record: dict, source: str):
    """The problem with the engine's attention the file was solved for: its `flash_attention`, or for a file that
    predates the field the default of its target (targets.engine_problem: on for upstream Megatron-LM)."""
    from optsearch.problem import with_flash_attention
    from optsearch.targets import engine_problem

    value = record.get("flash_attention")
    if value is None:
        target = record.get("target") or "megatron"
        return engine_problem(target, problem) if target in ("megatron", "fasop") else problem
    if not isinstance(value, bool):
        raise SpecError(f"{source}: problem.flash_attention = {value!r}: must be true or false")
    return with_flash_attention(problem, value)


def recorded_headroom(record: dict, source: str) -> float | None:
    """The memory headroom the plan was solved with; None when the file predates the field (the default applies)."""
    value = record.get("memory_headroom")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 0.9:
        raise SpecError(f"{source}: problem.memory_headroom = {value!r}: must be a number from 0 to 0.9")
    return float(value)


def problem_for_plan(data: dict, source: str, *, model: str | None, cluster: str | None, profile: str | None,
                     global_batch_size: int | None = None, iterations: int | None = None, tokens: int | None = None,
                     warn: Callable[[str], None] = lambda line: None):
    """(problem, replaced): the problem to price a plan file against: the recorded one, with a --model, --cluster or
    --profile given beside the file in place of the recorded one (`warn` says so when it differs), then the job
    overrides. `replaced` names what differs from what the file was solved for ("model", "cluster", "job"): the
    derived fields that depend on it are not checked against the file's.

    A file without a recorded problem (written before plan files recorded it) needs --model and --cluster."""
    from optsearch.catalog import load_cluster, load_model
    from optsearch.problem import build_problem

    record = data.get("problem")
    if record is None:
        missing = [n for n, v in (("--model", model), ("--cluster", cluster)) if v is None]
        if missing:
            raise SpecError(f"{source}: the file does not record the model and cluster it was solved for (written by "
                            f"an older optsearch); give {' and '.join(missing)}")
        problem = build_problem(model, cluster, profile=profile or "analytic", global_batch_size=global_batch_size,
                                iterations=iterations, tokens=tokens)
        problem = engine_attention(problem, {}, source)  # no target recorded: upstream's
        return problem, {"model", "cluster", "job"}  # nothing recorded: its derived fields may be for another problem
    problem = problem_from_record(record, source, profile=profile)
    flash = problem.flash_attention  # what the file records: kept when the model, cluster or job is replaced below
    model_spec, cluster_spec = problem.model, problem.cluster
    replaced: set[str] = set()
    for flag, ref, key, load in (("--model", model, "model", load_model), ("--cluster", cluster, "cluster",
                                                                            load_cluster)):
        if ref is None:
            continue
        given = load(ref)
        recorded = record[key]
        if spec_sha256(given) == recorded.get("sha256"):
            continue  # the same spec the plan was solved for (its --set edits stay applied)
        warn(f"{flag} {ref} differs from the {key} {source} was solved for ({recorded.get('ref')}, sha256 "
             f"{str(recorded.get('sha256'))[:12]}, now {spec_sha256(given)[:12]}): pricing the plan on {ref}")
        replaced.add(key)
        if key == "model":
            model_spec = given
            replaced.add("job")
        else:
            cluster_spec = given
    if profile is not None and profile != (record.get("profile") or {}).get("ref"):
        warn(f"--profile {profile} is not the profile {source} was solved with "
             f"({(record.get('profile') or {}).get('ref')}): pricing the plan with {profile}")
    if model_spec is not problem.model or cluster_spec is not problem.cluster:
        problem = build_problem(model_spec, cluster_spec, profile=profile or _recorded_profile(problem, record),
                                job=problem.job)
    if (global_batch_size, iterations, tokens) != (None, None, None):
        before = problem.job
        problem = build_problem(problem.model, problem.cluster, profile=problem.profile, job=problem.job,
                                global_batch_size=global_batch_size, iterations=iterations, tokens=tokens)
        replaced.add("job")
        if problem.job.global_batch_size != before.global_batch_size:  # the micro-batch count, so the plan's times
            warn(f"--global-batch-size {problem.job.global_batch_size} differs from the {before.global_batch_size} "
                 f"{source} was solved for: the plan runs {problem.job.global_batch_size} sequences per step, priced "
                 "anew; it is not the plan solve proved optimal for this batch (re-solve with --global-batch-size)")
    headroom = recorded_headroom(record, source)
    if headroom is not None and problem.memory_headroom != headroom:
        problem = replace(problem, memory_headroom=headroom)
    if problem.flash_attention != flash:
        from optsearch.problem import with_flash_attention

        problem = with_flash_attention(problem, flash)
    return problem, replaced


def _recorded_profile(problem, record: dict):
    ref = (record.get("profile") or {}).get("ref")
    return "analytic" if ref in (None, "analytic") else problem.profile


def load_plan_file(path: Path, plan_reader: Callable[[Any, str], Plan] = plan_from_dict) -> tuple[Plan, dict]:
    """(plan, the file's JSON object)."""
    data = read_plan_file(path)
    return plan_reader(data, str(path)), data


# ---- derived fields ------------------------------------------------------------------------------------------


def check_derived_fields(data: dict, plan: Plan, problem, source: str,
                         replaced: frozenset[str] | set[str] = frozenset()) -> None:
    """Refuse a plan file whose derived fields disagree with its stages: an edit to `nodes`, `balance`,
    `num_micro_batches` or a stage's `gpu` alone changes nothing, so it is a contradiction, not a plan.
    `replaced` (from problem_for_plan): with another job, num_micro_batches is not checked; with another cluster,
    nodes and the stages' gpu are not."""
    from optsearch.costmodel import estimate

    body = data["plan"] if isinstance(data.get("plan"), dict) else data
    est = estimate(problem, plan)

    def refuse(field: str, value: Any, rule: str) -> None:
        raise SpecError(f"{source}: {field} = {value!r}: {rule}")

    if "balance" in body and body["balance"] != plan.balance:
        refuse("balance", body["balance"], f"the stages hold {plan.balance} layers; balance is derived from the "
                                           "stages: edit stages[].num_layers (or delete balance)")
    if "num_micro_batches" in body:  # never anything but a positive integer, whatever job replaces the file's
        m = body["num_micro_batches"]
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            refuse("num_micro_batches", m, "must be global batch / (dp x micro-batch), a positive integer")
    if "num_micro_batches" in body and "job" not in replaced:
        m = body["num_micro_batches"]
        ok = isinstance(m, int) and not isinstance(m, bool) and m == est.num_micro_batches
        if not ok:
            shown = m if not (isinstance(m, float) and math.isnan(m)) else float("nan")
            refuse("num_micro_batches", shown,
                   f"must be global batch / (dp x micro-batch) = {problem.job.global_batch_size} / ({plan.dp} x "
                   f"{plan.micro_batch_size}) = {est.num_micro_batches}")
    if "nodes" in body and "cluster" not in replaced:
        nodes = body["nodes"]
        if not isinstance(nodes, dict) or {k: v for k, v in nodes.items() if v != 0} != dict(est.nodes):
            refuse("nodes", nodes, f"the stages rent {dict(sorted(est.nodes.items()))} (of "
                                   + ", ".join(f"{n.num_nodes_available} {n.name}" for n in problem.cluster.node_types)
                                   + " available); nodes is derived from the stages: edit the stages (or delete nodes)")
    stages = body.get("stages") if isinstance(body.get("stages"), list) and "cluster" not in replaced else []
    for i, (raw, stage) in enumerate(zip(stages, plan.stages)):
        if isinstance(raw, dict) and "gpu" in raw:
            gpu = problem.gpu_of(stage.node_type).name
            if raw["gpu"] != gpu:
                refuse(f"stages[{i}].gpu", raw["gpu"], f"node type {stage.node_type} has {gpu}; the GPU follows "
                                                       "the node type: edit stages[].node_type (or delete gpu)")
