"""Price recorded runs and say how well the cost model predicts them (docs/validation.md).

A validation set is a CSV, one recorded run per row:

    run_id, group, source, model, cluster, global_batch_size, tp, dp, micro_batch_size, stages,
    measured_iteration_s, oom [, precision, sequence_parallel, grad_reduce_in_fp32, unfused_kernels, ep,
    eager_engine, cp, distributed_optimizer, virtual_stages, recompute_num_layers, pp, flash_attention,
    overlap_grad_reduce, overlap_param_gather, tp_comm_overlap,
    notes]

`stages` is `NODE_TYPE:LAYERS[:RECOMPUTE],...` in pipeline order (as `estimate --stages`); `model` and `cluster`
are catalog names or paths relative to the CSV's folder; `oom` is 1 for a run that ran out of memory (its
measured time is then empty); `group` names runs that compete for the same job (same model, batch, cluster pool):
the top pick and its regret are computed within a group.

Metrics (over rows with a measured time unless said otherwise):
    Spearman rank correlation of predicted and measured iteration time, per group and over all rows
    mean absolute relative error |predicted - measured| / measured, and the median of predicted / measured
    top-pick regret per group: the run the model ranks fastest among those it predicts to fit, measured time
        over the group's best measured time - 1 ("OOM" when the pick ran out of memory)
    memory-flag confusion over all rows: predicted not to fit vs ran out of memory
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from optsearch.costmodel import estimate
from optsearch.errors import OptsearchError, SpecError
from optsearch.plan import Plan, parse_stages
from optsearch.problem import DEFAULT_MEMORY_HEADROOM, Problem, build_problem, check_profile_dtype
from optsearch.profile.analytic import EAGER_ENGINES, AnalyticProfile
from optsearch.spec.base import read_text
from optsearch.targets import check_context_parallel_profile

REQUIRED = ("run_id", "group", "source", "model", "cluster", "global_batch_size", "tp", "dp", "micro_batch_size",
            "stages", "measured_iteration_s", "oom")

# Columns that name a setting of the run which validate does not price (Megatron-LM's argument names and other
# spellings of the plan's and job's fields): a CSV with one is refused (exit 2) rather than priced as if it were
# absent. The plan's own names (cp, distributed_optimizer, virtual_stages, recompute_num_layers, ep, pp) are honoured.
_COLUMN = "use the column "
_SPEC = "the model's spec sets it (validate prices the model's own); drop the column"
UNHONOURED = {
    "context_parallel_size": _COLUMN + "cp", "cp_size": _COLUMN + "cp",
    "use_distributed_optimizer": _COLUMN + "distributed_optimizer", "dist_opt": _COLUMN + "distributed_optimizer",
    "distributed_optimiser": _COLUMN + "distributed_optimizer",
    "virtual_pipeline_model_parallel_size": _COLUMN + "virtual_stages", "vpp": _COLUMN + "virtual_stages",
    "num_layers_per_virtual_pipeline_stage": _COLUMN + "virtual_stages (model chunks per pipeline stage)",
    "recompute_granularity": "give it in stages (NODE_TYPE:LAYERS:RECOMPUTE)",
    "recompute": "give it in stages (NODE_TYPE:LAYERS:RECOMPUTE)",
    "recompute_method": "give it in stages (NODE_TYPE:LAYERS:RECOMPUTE) and, for block, the column "
                        "recompute_num_layers",
    "tensor_model_parallel_size": _COLUMN + "tp", "data_parallel_size": _COLUMN + "dp",
    "pipeline_model_parallel_size": _COLUMN + "pp", "expert_model_parallel_size": _COLUMN + "ep",
    "micro_batch": _COLUMN + "micro_batch_size", "mbs": _COLUMN + "micro_batch_size",
    "global_batch": _COLUMN + "global_batch_size", "gbs": _COLUMN + "global_batch_size",
    "grad_reduce_overlap": _COLUMN + "overlap_grad_reduce", "overlap_grad_reduction": _COLUMN + "overlap_grad_reduce",
    "param_gather_overlap": _COLUMN + "overlap_param_gather", "overlap_tp_comm": _COLUMN + "tp_comm_overlap",
    "seq_length": _SPEC, "seq_len": _SPEC, "sequence_length": _SPEC, "num_micro_batches": "it follows from "
    "global_batch_size, dp and micro_batch_size; drop the column",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    run_id: str
    group: str
    source: str
    model: str
    cluster: str
    global_batch_size: int
    plan: Plan
    measured_s: float | None
    oom: bool
    precision: str | None
    sequence_parallel: bool | None = None  # optional column: 1 / 0; empty: as the model's job says
    grad_reduce_in_fp32: bool | None = None  # optional column: 1 / 0; empty: as the job says (bf16: fp32)
    where: str = ""  # "FILE row N (RUN_ID)", for errors found when pricing
    unfused_kernels: bool | None = None  # optional column: 1: the engine had no fused softmax (analytic profile only)
    eager_engine: str | None = None  # optional column: the eager engine's host time (analytic profile only)
    flash_attention: bool | None = None  # optional column: 1: no s x s score traffic (analytic profile only)


@dataclass(frozen=True, slots=True, kw_only=True)
class Priced:
    run: Run
    predicted_s: float
    fits: bool
    peak_memory_share: float  # largest stage memory / its capacity
    # cp > 1 on a node type where upstream Megatron-LM has no attention with context parallelism
    # (targets.context_parallel_attention_error): the reason, else None. Such a row is priced as recorded (it ran on
    # some engine) and flagged: `estimate` and `launch` refuse the same plan (docs/validation.md).
    upstream_refuses: str | None = None


def _int(row: dict, key: str, where: str) -> int:
    try:
        value = int(row[key])
    except (TypeError, ValueError):
        raise SpecError(f"{where}: {key} = {row.get(key)!r}: must be an integer") from None
    if value <= 0:
        raise SpecError(f"{where}: {key} = {value}: must be positive")
    return value


def _flag(row: dict, key: str, where: str) -> bool | None:
    """An optional 1 / 0 column: None when empty or absent."""
    text = (row.get(key) or "").strip()
    if text not in ("", "0", "1"):
        raise SpecError(f"{where}: {key} = {text!r}: must be 1, 0 or empty")
    return None if text == "" else text == "1"


def load_runs(path: Path) -> list[Run]:
    """Read and check a validation CSV; errors name the file, row and field."""
    try:
        return _load_runs(path)
    except csv.Error as err:  # a field over the csv module's limit, a NUL byte
        raise SpecError(f"{path}: not a readable CSV: {err}") from None


def _dispatch(row: dict, where: str) -> str:
    """The column param_gather_dispatch (Plan.param_gather_dispatch): main (empty or absent) or core_r0.8.0."""
    from optsearch.plan import PARAM_GATHER_DISPATCHES
    text = (row.get("param_gather_dispatch") or "").strip() or "main"
    if text not in PARAM_GATHER_DISPATCHES:
        raise SpecError(f"{where}: param_gather_dispatch = {text!r}: must be one of "
                        f"{', '.join(PARAM_GATHER_DISPATCHES)} or empty (main)")
    return text


def _load_runs(path: Path) -> list[Run]:
    text = read_text(Path(path))  # a regular UTF-8 file of bounded size; anything else is one line of SpecError
    reader = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise SpecError(f"{path}: missing columns {', '.join(missing)}")
    for column in reader.fieldnames or []:
        key = column.strip().lower().replace("-", "_").lstrip("_")
        if key in UNHONOURED:
            raise SpecError(f"{path}: column {column!r}: validate does not read it (it would be ignored); "
                            f"{UNHONOURED[key]}")
    runs: list[Run] = []
    for number, row in enumerate(reader, start=2):
        where = f"{path} row {number} ({row.get('run_id')})"
        if None in row or None in row.values():  # DictReader: extra fields under the key None, missing ones None
            found = len(reader.fieldnames) + len(row.get(None) or []) - sum(v is None for v in row.values())
            raise SpecError(f"{where}: {found} fields where the header has {len(reader.fieldnames)}"
                            + (" (a comma inside a field must be quoted, e.g. \"a100:12,a100:12\")"
                               if found > len(reader.fieldnames) else ""))
        oom_text = (row["oom"] or "").strip()
        if oom_text not in ("0", "1"):
            raise SpecError(f"{where}: oom = {oom_text!r}: must be 0 or 1")
        measured_text = (row["measured_iteration_s"] or "").strip()
        measured = None
        if measured_text:
            try:
                measured = float(measured_text)
            except ValueError:
                raise SpecError(f"{where}: measured_iteration_s = {measured_text!r}: not a number") from None
            if not (math.isfinite(measured) and measured > 0):
                raise SpecError(f"{where}: measured_iteration_s = {measured}: must be a positive finite number")
        if measured is None and oom_text == "0":
            raise SpecError(f"{where}: measured_iteration_s is empty but oom = 0")
        if measured is not None and oom_text == "1":
            raise SpecError(f"{where}: measured_iteration_s = {measured} but oom = 1: a run that ran out of memory "
                            "has no measured time (leave it empty)")
        try:
            stages = parse_stages(row["stages"])
        except SpecError as err:
            raise SpecError(f"{where}: stages: {err}") from None
        plan = Plan(tp=_int(row, "tp", where), dp=_int(row, "dp", where),
                    micro_batch_size=_int(row, "micro_batch_size", where), stages=stages,
                    ep=_int(row, "ep", where) if (row.get("ep") or "").strip() else 1,  # optional column (MoE)
                    # optional columns, the plan file's names; empty or absent: 1, off, 1, none
                    cp=_int(row, "cp", where) if (row.get("cp") or "").strip() else 1,
                    distributed_optimizer=_flag(row, "distributed_optimizer", where) is True,
                    virtual_stages=_int(row, "virtual_stages", where) if (row.get("virtual_stages") or "").strip()
                    else 1,
                    recompute_num_layers=_int(row, "recompute_num_layers", where)
                    if (row.get("recompute_num_layers") or "").strip() else None,
                    # Megatron's --overlap-grad-reduce (costmodel section 7c); empty or absent: off
                    overlap_grad_reduce=_flag(row, "overlap_grad_reduce", where) is True,
                    # Megatron's --overlap-param-gather at core_r0.8.0 (costmodel section 7d); empty or absent: off
                    overlap_param_gather=_flag(row, "overlap_param_gather", where) is True,
                    # Megatron's --tp-comm-overlap with TE's userbuffers (costmodel section 3c); empty or absent: off
                    tp_comm_overlap=_flag(row, "tp_comm_overlap", where) is True,
                    # the Megatron-Core whose --overlap-param-gather dispatch prices it (costmodel 7d / 7f); empty or
                    # absent: upstream main
                    param_gather_dispatch=_dispatch(row, where))
        if plan.overlap_param_gather and not (plan.distributed_optimizer and plan.overlap_grad_reduce):
            raise SpecError(f"{where}: overlap_param_gather = 1 needs distributed_optimizer = 1 and "
                            "overlap_grad_reduce = 1 (Megatron-LM's arguments.py asserts both)")
        if (row.get("pp") or "").strip() and _int(row, "pp", where) != plan.pp:
            raise SpecError(f"{where}: pp = {row['pp'].strip()}: must equal the number of stages ({plan.pp})")
        precision = (row.get("precision") or "").strip() or None
        if precision not in (None, "fp16", "bf16"):
            raise SpecError(f"{where}: precision = {precision!r}: must be fp16 or bf16")
        sp_text = (row.get("sequence_parallel") or "").strip()
        if sp_text not in ("", "0", "1"):
            raise SpecError(f"{where}: sequence_parallel = {sp_text!r}: must be 1, 0 or empty")
        grad_text = (row.get("grad_reduce_in_fp32") or "").strip()
        if grad_text not in ("", "0", "1"):
            raise SpecError(f"{where}: grad_reduce_in_fp32 = {grad_text!r}: must be 1, 0 or empty")
        unfused_text = (row.get("unfused_kernels") or "").strip()
        if unfused_text not in ("", "0", "1"):
            raise SpecError(f"{where}: unfused_kernels = {unfused_text!r}: must be 1, 0 or empty")
        flash_text = (row.get("flash_attention") or "").strip()
        if flash_text not in ("", "0", "1"):
            raise SpecError(f"{where}: flash_attention = {flash_text!r}: must be 1, 0 or empty")
        engine_text = (row.get("eager_engine") or "").strip()
        if engine_text and engine_text not in EAGER_ENGINES:
            raise SpecError(f"{where}: eager_engine = {engine_text!r}: must be empty or one of "
                            f"{', '.join(sorted(EAGER_ENGINES))}")
        runs.append(Run(run_id=row["run_id"], group=row["group"], source=row["source"],
                        model=_resolve(row["model"], path), cluster=_resolve(row["cluster"], path),
                        global_batch_size=_int(row, "global_batch_size", where), plan=plan, measured_s=measured,
                        oom=oom_text == "1", precision=precision, where=where,
                        sequence_parallel=None if sp_text == "" else sp_text == "1",
                        grad_reduce_in_fp32=None if grad_text == "" else grad_text == "1",
                        unfused_kernels=None if unfused_text == "" else unfused_text == "1",
                        eager_engine=engine_text or None,
                        flash_attention=None if flash_text == "" else flash_text == "1"))
    if not runs:
        raise SpecError(f"{path}: no runs")
    return runs


def _resolve(name: str, csv_path: Path) -> str:
    """A catalog name stays; a path (has a suffix) is taken relative to the CSV's folder."""
    name = name.strip()
    if name.endswith((".yaml", ".yml", ".json")):
        return str((csv_path.parent / name).resolve())
    return name


def as_run(problem: Problem, run: Run) -> Problem:
    """The problem with the job settings the run's row records (precision, sequence parallelism, gradient dtype, the
    engine's attention kernels); the problem's own where a column is empty."""
    if run.precision is not None and run.precision != problem.job.precision:
        problem = replace(problem, job=problem.job.model_copy(update={"precision": run.precision}))
    if run.sequence_parallel is not None:  # as the run was launched (SC'21's runs predate it: 0)
        problem = replace(problem, job=problem.job.model_copy(update={"sequence_parallel": run.sequence_parallel}))
    if run.grad_reduce_in_fp32 is not None:  # e.g. DeepSpeed's fp32_allreduce with fp16 (AMP's runs)
        problem = replace(problem, job=problem.job.model_copy(update={"grad_reduce_in_fp32": run.grad_reduce_in_fp32}))
    if run.unfused_kernels is not None and isinstance(problem.profile, AnalyticProfile):
        # the engine's attention kernels (AMP's Megatron v1.1.5: unfused); a measured table already has them
        problem = replace(problem, profile=replace(problem.profile, unfused_kernels=run.unfused_kernels))
    if run.eager_engine is not None and isinstance(problem.profile, AnalyticProfile):
        # the engine's host time per layer (AMP's Megatron v1.1.5 fork); a measured table already has it
        problem = replace(problem, profile=replace(problem.profile, eager_engine=run.eager_engine))
    if run.flash_attention is not None:
        # the engine's flash attention (Megatron-Core with Transformer Engine): no stored scores (memory), and for the
        # analytic profile no score traffic (a measured table already has its times)
        from optsearch.problem import with_flash_attention

        problem = with_flash_attention(problem, run.flash_attention)
    return problem


def price(runs: list[Run], profile: str = "analytic", memory_headroom: float = DEFAULT_MEMORY_HEADROOM) -> list[Priced]:
    out = []
    for run in runs:
        try:
            problem = build_problem(run.model, run.cluster, profile=profile, global_batch_size=run.global_batch_size,
                                    check_dtype=False)
            problem = replace(as_run(problem, run), memory_headroom=memory_headroom)
            check_profile_dtype(problem.profile, problem.job.precision)  # the row's precision column
            check_context_parallel_profile(problem, run.plan, f"--profile {profile}")
            est = estimate(problem, run.plan)
        except OptsearchError as err:
            raise SpecError(f"{run.where or 'run ' + run.run_id}: {err}") from None
        share = max(s.memory_bytes / s.memory_capacity_bytes for s in est.stages)
        out.append(Priced(run=run, predicted_s=est.iteration_time_s, fits=est.fits, peak_memory_share=share,
                          upstream_refuses=_upstream_refuses(problem, run)))
    return out


def _upstream_refuses(problem: Problem, run: Run) -> str | None:
    """launch's reason (targets.context_parallel_attention_error) why upstream Megatron-LM cannot run this cp > 1
    plan, or None. Upstream splits attention over cp ranks only with flash (or cuDNN fused) attention: a row that says
    flash_attention = 0 cannot run at cp > 1; otherwise the plan's node types are checked with flash attention
    wherever it runs (an empty column prices the attention unfused, section 14, but says nothing of the engine)."""
    plan = run.plan
    if plan.cp <= 1:
        return None
    if run.flash_attention is False:
        return (f"cp = {plan.cp}: the row says flash_attention = 0, and Transformer Engine's unfused attention has "
                f"no context parallelism")
    from optsearch.problem import with_flash_attention
    from optsearch.targets import context_parallel_attention_error

    why = context_parallel_attention_error(with_flash_attention(problem, True),
                                           sorted({s.node_type for s in plan.stages}))
    return None if why is None else f"cp = {plan.cp}: {why}"


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho: Pearson correlation of the (average-tie) ranks; None under 3 points or no spread."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def metrics(priced: list[Priced]) -> dict:
    timed = [p for p in priced if p.run.measured_s is not None]
    ratios = [p.predicted_s / p.run.measured_s for p in timed]
    groups: dict[str, list[Priced]] = {}
    for p in priced:
        groups.setdefault(p.run.group, []).append(p)
    per_group = {}
    for name, members in groups.items():
        g_timed = [p for p in members if p.run.measured_s is not None]
        fitting = [p for p in members if p.fits]
        pick = min(fitting, key=lambda p: p.predicted_s) if fitting else None
        best = min((p.run.measured_s for p in g_timed), default=None)
        if pick is None or best is None:
            regret = None
        elif pick.run.oom:
            regret = "OOM"
        else:
            regret = pick.run.measured_s / best - 1
        per_group[name] = {
            "runs": len(members),
            "timed": len(g_timed),
            "spearman": spearman([p.predicted_s for p in g_timed], [p.run.measured_s for p in g_timed]),
            "mean_abs_error": statistics.fmean(abs(p.predicted_s / p.run.measured_s - 1) for p in g_timed)
            if g_timed else None,
            "top_pick": pick.run.run_id if pick else None,
            "top_pick_regret": regret,
        }
    confusion = {
        "oom_flagged": sum(1 for p in priced if p.run.oom and not p.fits),
        "oom_missed": sum(1 for p in priced if p.run.oom and p.fits),
        "good_flagged": sum(1 for p in priced if not p.run.oom and not p.fits),
        "good_passed": sum(1 for p in priced if not p.run.oom and p.fits),
    }
    return {
        "runs": len(priced),
        "timed": len(timed),
        "spearman": spearman([p.predicted_s for p in timed], [p.run.measured_s for p in timed]),
        "mean_abs_error": statistics.fmean(abs(r - 1) for r in ratios) if ratios else None,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "groups": per_group,
        "memory": confusion,
    }


def rows_json(priced: list[Priced]) -> list[dict]:
    return [
        {
            "run_id": p.run.run_id,
            "group": p.run.group,
            "measured_iteration_s": p.run.measured_s,
            "predicted_iteration_s": p.predicted_s,
            "ratio": p.predicted_s / p.run.measured_s if p.run.measured_s else None,
            "oom": p.run.oom,
            "predicted_fits": p.fits,
            "peak_memory_share": p.peak_memory_share,
            "upstream_refuses": p.upstream_refuses,
        }
        for p in priced
    ]
