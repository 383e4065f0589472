"""Output: rich tables for people, JSON for programs, atomic file writes. Results go to stdout, progress to stderr."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from optsearch.costmodel import Estimate
from optsearch.errors import SpecError
from optsearch.plan import Plan
from optsearch.units import format_duration, format_usd

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file in the same folder and a rename: never half-written."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise SpecError(f"{path}: folder {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, fixed separators, floats as Python repr (byte-identical across runs)."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def estimate_table(plan: Plan, est: Estimate, title: str = "Estimate") -> Table:
    table = Table(title=f"{title}: tp {plan.tp}, dp {plan.dp}, pp {plan.pp}, micro-batch {plan.micro_batch_size}, "
                        f"{est.num_micro_batches} micro-batches")
    for col in ("stage", "node type", "GPU", "layers", "recompute", "compute ms", "p2p ms", "DP all-reduce ms",
                "memory GiB", "fits"):
        table.add_column(col, justify="right" if col not in ("node type", "GPU", "recompute") else "left")
    for i, s in enumerate(est.stages):
        table.add_row(
            str(i), s.node_type, s.gpu, str(s.num_layers), s.recompute,
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
        ("DP all-reduce per iteration", f"{est.dp_allreduce_s:.4f} s"),
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
