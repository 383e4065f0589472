"""`optsearch catalog`: what is built in."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from optsearch.catalog import cluster_names, gpu_catalog, load_cluster, load_model, model_names
from optsearch.cli import app
from optsearch.errors import SpecError
from optsearch.report import stdout

WHAT = ("gpus", "models", "clusters")


@app.command("catalog")
def catalog_command(
    what: Annotated[Optional[str], typer.Argument(help="gpus, models or clusters (default: all three).")] = None,
) -> None:
    """List the built-in GPUs, models and clusters (names usable with --model and --cluster)."""
    if what is not None and what not in WHAT:
        raise SpecError(f"catalog: unknown section {what!r}; known: {', '.join(WHAT)}")
    if what in (None, "gpus"):
        t = Table(title="GPUs")
        for col in ("name", "memory GiB", "peak fp16 TFLOP/s", "HBM GB/s"):
            t.add_column(col)
        for g in gpu_catalog().values():
            t.add_row(g.name, f"{g.memory_gib:g}", f"{g.peak_fp16_tflop_per_s:g}", f"{g.hbm_gbyte_per_s:g}")
        stdout.print(t)
    if what in (None, "models"):
        t = Table(title="Models")
        for col in ("name", "layers", "hidden", "heads", "parameters", "description"):
            t.add_column(col)
        for name in model_names():
            m = load_model(name)
            t.add_row(name, str(m.num_layers), str(m.hidden_size), str(m.num_attention_heads),
                      f"{m.parameter_count() / 1e9:.2f} B", m.description)
        stdout.print(t)
    if what in (None, "clusters"):
        t = Table(title="Clusters")
        for col in ("name", "node types (available x type: GPUs, $/node-hour)", "description"):
            t.add_column(col)
        for name in cluster_names():
            c = load_cluster(name)
            types = "; ".join(
                f"{n.num_nodes_available} x {n.name}: {n.gpus_per_node} x {n.gpu}, ${n.price_usd_per_node_hour:g}"
                for n in c.node_types
            )
            t.add_row(name, types, c.description)
        stdout.print(t)
