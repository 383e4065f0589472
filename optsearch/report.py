"""Output: rich tables for people, JSON for programs, atomic file writes. Results go to stdout, progress to stderr."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from optsearch.costmodel import Estimate
from optsearch.errors import SpecError
from optsearch.plan import Plan
from optsearch.units import format_duration, format_usd


def _pipe_width() -> int | None:
    """Output to a pipe or file has no screen to fit: 160 columns there, so that tables of numbers are not cut short
    (rich's default for a non-terminal is 80). A terminal, or COLUMNS in the environment, decides otherwise."""
    return None if "COLUMNS" in os.environ or sys.stdout.isatty() else 160


stdout = Console(soft_wrap=True, width=_pipe_width())
stderr = Console(stderr=True, soft_wrap=True)


def _umask() -> int:
    """The process's umask (reading it means setting it: it is set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file in the same folder and a rename: never half-written. A new file
    gets the mode the user's umask gives (as `open` would), a replaced file keeps its mode."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise SpecError(f"{path}: folder {directory} does not exist")
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _probe_folder(directory: Path, what: str) -> None:
    """Create and remove a temporary file in `directory`: the one test that also holds for root, read-only mounts
    and /proc (where permission bits say nothing)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".optsearch-probe.", dir=directory)
    except OSError as err:
        raise SpecError(f"{what}: cannot write in folder {directory}: {err.strerror or err}") from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def check_output_file(path: Path | None, option: str, *, suffixes: tuple[str, ...] = ()) -> None:
    """Before any work: `path` can be written as a file (its folder exists and takes files, it is not a folder or a
    device), and, with `suffixes`, its extension is one of them. Raises SpecError naming the option."""
    if path is None:
        return
    path = Path(path)
    what = f"{option} {path}"
    if str(path).endswith(("/", os.sep)) or path.is_dir():
        raise SpecError(f"{what}: is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise SpecError(f"{what}: exists and is not a regular file")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise SpecError(f"{what}: folder {directory} does not exist")
    if suffixes and path.suffix.lower().lstrip(".") not in suffixes:
        raise SpecError(f"{what}: unknown file type {path.suffix or '(none)'!r}; use one of "
                        + ", ".join("." + s for s in suffixes))
    _probe_folder(directory, what)


def check_output_folder(path: Path | None, option: str) -> None:
    """Before any work: `path` is a folder that exists and takes files, or can be created (its nearest existing
    parent takes files)."""
    if path is None:
        return
    path = Path(path)
    what = f"{option} {path}"
    if path.exists() and not path.is_dir():
        raise SpecError(f"{what}: exists and is not a folder")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(f"{what}: {existing} is not a folder")
    _probe_folder(existing, what)


def distinct_durations(seconds: list[float]) -> list[str]:
    """Durations as people read them, with as much precision as it takes for different values to read differently
    (a Pareto frontier whose times round to the same hour would look as if one row dominated another)."""
    import math

    def hours_fmt(decimals: int):
        return lambda s: f"{s / 3600:,.{decimals}f} h"

    formats = [format_duration, _days_hours_minutes, *(hours_fmt(d) for d in range(2, 10))]
    return _distinct(seconds, formats, math.isfinite)


def distinct_usd(amounts: list[float]) -> list[str]:
    """USD amounts, with cents (and more) where whole dollars would make different amounts read the same."""
    import math

    formats = [format_usd, *((lambda d: (lambda x: f"${x:,.{d}f}"))(d) for d in range(2, 8))]
    return _distinct(amounts, formats, math.isfinite)


def _distinct(values: list[float], formats, finite) -> list[str]:
    for fmt in formats:
        texts = [fmt(v) for v in values]
        if all(texts[i] != texts[j] for i in range(len(values)) for j in range(i)
               if values[i] != values[j] and finite(values[i]) and finite(values[j])):
            return texts
    return texts


def _days_hours_minutes(seconds: float) -> str:
    minutes = int(round(seconds / 60))
    days, rest = divmod(minutes, 1440)
    hrs, mins = divmod(rest, 60)
    return f"{days}d {hrs}h {mins}m" if days else f"{hrs}h {mins}m"


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, fixed separators, floats as Python repr (byte-identical across runs)."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _knobs_text(plan: Plan) -> str:
    """'cp 4, distributed optimizer, ' where the plan sets them (empty for the defaults)."""
    return ((f"cp {plan.cp}, " if plan.cp != 1 else "") + ("distributed optimizer, " if plan.distributed_optimizer else "")
            + ("overlapped grad reduce, " if plan.overlap_grad_reduce else ""))


def _virtual_text(plan: Plan) -> str:
    """', interleaved x v' for an interleaved plan (v model chunks per pipeline rank), else nothing."""
    return f", interleaved x {plan.virtual_stages}" if plan.virtual_stages != 1 else ""


def estimate_table(plan: Plan, est: Estimate, title: str = "Estimate") -> Table:
    block = "" if plan.recompute_num_layers is None else (
        f", block recomputation of the first {plan.recompute_num_layers} layers of every stage")
    table = Table(title=f"{title}: tp {plan.tp}, dp {plan.dp}{_ep_text(plan)}, pp {plan.pp}{_virtual_text(plan)}, "
                        f"micro-batch {plan.micro_batch_size}, {_knobs_text(plan)}{est.num_micro_batches} "
                        f"micro-batches{block}")
    for col in ("stage", "node type", "GPU", "layers", "recompute", "compute ms", "p2p ms", "grad reduce ms",
                "memory GiB", "fits"):
        table.add_column(col, justify="right" if col not in ("node type", "GPU", "recompute") else "left")
    # the gradient reduce runs over the dp x cp ranks of a stage (all-reduce, or reduce-scatter + all-gather under the
    # distributed optimizer): non-zero with dp 1 when cp > 1, so the caption says which ranks
    table.caption = f"grad reduce: the stage's gradients over its dp x cp = {plan.dp * plan.cp} ranks"
    for i, s in enumerate(est.stages):
        table.add_row(
            str(i), s.node_type, s.gpu, str(s.num_layers),
            s.recompute if s.recomputed_layers is None else f"block: {s.recomputed_layers} of {s.num_layers}",
            f"{s.compute_s * 1e3:.2f}", f"{s.p2p_s * 1e3:.2f}", f"{s.dp_allreduce_s * 1e3:.1f}",
            f"{s.memory_bytes / 2**30:.1f} / {s.memory_capacity_bytes / 2**30:.1f}",
            "yes" if s.fits else "[red]NO[/red]",
        )
    return table


def totals_table(est: Estimate) -> Table:
    table = Table(show_header=False, title="Totals")
    table.add_column("what")
    table.add_column("value", justify="right")
    nodes = ", ".join(f"{n} x {name}" for name, n in sorted(est.nodes.items()))
    rows = [
        ("nodes rented", nodes),
        ("pipeline (1F1B) per iteration", f"{est.pipeline_time_s:.4f} s"),
        ("gradient reduce (dp x cp) per iteration", f"{est.dp_allreduce_s:.4f} s"),
        ("tied-embedding all-reduce per iteration", f"{est.embedding_allreduce_s:.4f} s"),
        ("optimizer step per iteration", f"{est.optimizer_s:.4f} s"),
        ("iteration time", f"{est.iteration_time_s:.4f} s"),
        ("iterations", f"{est.iterations:,}"),
        ("training time", format_duration(est.training_time_s)),
        ("USD per hour", format_usd(est.usd_per_hour)),
        ("cost", format_usd(est.cost_usd)),
        ("fits in memory", "yes" if est.fits else "NO"),
    ]
    for what, value in rows:
        table.add_row(what, value)
    return table


# ---- solve results ---------------------------------------------------------------------------------------------


def plan_json(plan: Plan, est: Estimate) -> dict[str, Any]:
    """The plan as `solve --json` prints it (and `--out` writes it; `estimate --plan` and `launch` read it back)."""
    out = {
        "tp": plan.tp,
        "dp": plan.dp,
        "pp": plan.pp,
        "micro_batch_size": plan.micro_batch_size,
        "num_micro_batches": est.num_micro_batches,
        "nodes": dict(sorted(est.nodes.items())),
        "balance": plan.balance,
        "stages": [
            {"node_type": s.node_type, "gpu": e.gpu, "num_layers": s.num_layers, "recompute": s.recompute}
            for s, e in zip(plan.stages, est.stages)
        ],
        # block recomputation only: plans without it keep their JSON
        **({} if plan.recompute_num_layers is None else {"recompute_num_layers": plan.recompute_num_layers}),
        **({"ep": plan.ep} if plan.ep != 1 else {}),  # expert parallelism: written only when set
    } | {k: v for k, v in plan.to_dict().items()
         if k in ("cp", "distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                  "ddp_average_in_collective")}
    if plan.virtual_stages != 1:  # interleaved only: other plans keep today's JSON
        out["virtual_stages"] = plan.virtual_stages
    return out


def recompute_text(plan: Plan) -> str:
    """The plan's recomputation in one word: 'none', 'selective', 'full', 'block N' (block recomputation of the first N
    layers of every stage), or the modes of the stages with layers joined by '/' where they differ."""
    if plan.recompute_num_layers is not None:
        return f"block {plan.recompute_num_layers}"
    modes = [s.recompute for s in plan.stages if s.num_layers > 0] or [plan.stages[0].recompute]
    return modes[0] if len(set(modes)) == 1 else "/".join(modes)


def degrees_text(plan: Plan) -> str:
    """'tp/dp/pp', then cp, ep and v where they are not 1: '2/4/8 cp 2 v 2'."""
    out = f"{plan.tp}/{plan.dp}/{plan.pp}"
    for name, value in (("cp", plan.cp), ("ep", plan.ep), ("v", plan.virtual_stages)):
        if value != 1:
            out += f" {name} {value}"
    return out


def _ep_text(plan: Plan) -> str:
    return f", ep {plan.ep}" if plan.ep != 1 else ""


def megatron_json(problem, plan: Plan) -> dict[str, Any]:
    """{balance, args}: the FASOP partition string and the upstream Megatron-LM arguments (None if not expressible)."""
    from optsearch.errors import OptsearchError
    from optsearch.megatron import megatron_args

    out: dict[str, Any] = {"balance": plan.balance}
    try:
        margs = megatron_args(problem, plan)
        out["args"] = list(margs.args)
    except OptsearchError as err:
        out["args"] = None
        out["unsupported"] = str(err)
    return out


def solve_json(result, problem) -> dict[str, Any]:
    """One object: status, objective, solver, solve_time_s, first_plan_s, gap, plan, estimate, megatron (see README)."""
    first_plan_s = result.stats.get("first_plan_s")
    out: dict[str, Any] = {
        "status": result.status,
        "objective": result.objective,
        "solver": result.method,
        "solve_time_s": round(result.solve_time_s, 3),
        "first_plan_s": None if first_plan_s is None else round(first_plan_s, 3),
        "gap": result.gap,
        "objective_value": result.objective_value,
        "message": result.message,
        "plan": None,
        "estimate": None,
        "megatron": None,
    }
    if result.plan is not None and result.estimate is not None:
        out["plan"] = plan_json(result.plan, result.estimate)
        out["estimate"] = result.estimate.to_dict()
        out["megatron"] = megatron_json(problem, result.plan)
    return out


def solve_summary(result, problem, budget, scope: str = "") -> list[Any]:
    """Rich renderables for a solve result: headline, nodes, per-stage table, totals. `scope` follows the status
    (e.g. ' over the node types the profile covers')."""
    from rich.panel import Panel

    est, plan = result.estimate, result.plan
    gap = "0" if result.gap == 0 else ("unknown" if result.gap is None else f"{result.gap:.2%}")
    head = (f"[bold]{result.status}{scope}[/bold] ({budget.describe()}) — solver {result.method}, "
            f"gap {gap}, solve time {result.solve_time_s:.2f} s")
    nodes = ", ".join(f"{n} x {name}" for name, n in sorted(est.nodes.items()))
    body = (f"{head}\nrent: {nodes}  ({plan.num_gpus} GPUs, {format_usd(est.usd_per_hour)}/hour)\n"
            f"plan: tp {plan.tp}, dp {plan.dp}{_ep_text(plan)}, pp {plan.pp}{_virtual_text(plan)}, "
            f"micro-batch {plan.micro_batch_size}, {_knobs_text(plan)}recompute {recompute_text(plan)}, "
            f"balance {plan.balance}\n"
            f"training time {format_duration(est.training_time_s)}, cost {format_usd(est.cost_usd)}")
    return [Panel(body, title=f"optsearch solve: {problem.model.name} on {problem.cluster.name}"),
            estimate_table(plan, est), totals_table(est)]
