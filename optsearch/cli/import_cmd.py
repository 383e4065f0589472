"""`optsearch import-profile`: turn a published profile (FASOP, AMP, Metis, Aceso) into an optsearch profile table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.errors import SpecError
from optsearch.profile.importers import DEFAULT_GPU_MAPS, SOURCES, import_profile
from optsearch.report import check_output_file, stderr, stdout

_DEFAULT_MAPS = "; ".join(
    f"{kind}: " + ", ".join(f"{k}={v}" for k, v in mapping.items()) for kind, mapping in DEFAULT_GPU_MAPS.items()
)


@app.command("import-profile")
def import_profile_command(
    source_kind: Annotated[str, typer.Argument(metavar="SOURCE", help=f"Whose files: {', '.join(SOURCES)}.")],
    source: Annotated[
        Path,
        typer.Option(
            "--source",
            help="Folder with the published files: FASOP's or AMP's known_cost/ (*.npy), Metis' DeviceType.*.json, or "
            "Aceso's profiled-time-eurosys/ (gpt_*.csv).",
        ),
    ],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="The model the files were timed on: fasop gpt2-xl, bert-large or t5-fasop; amp gpt2-medium; metis "
            "llama2-7b (its layer's parameter count is checked); aceso gpt3-1.3b, gpt3-2.7b, gpt3-6.7b, gpt3-13b or "
            "an Aceso size "
            "(350M, 1_3B, 2_6B, 6_7B, 13B).",
        ),
    ],
    gpu_map: Annotated[
        Optional[str],
        typer.Option(
            "--gpu-map",
            help=f"Source GPU name -> catalog GPU, e.g. A10=A10G,A100=A100-SXM-80GB. Defaults: {_DEFAULT_MAPS}.",
        ),
    ] = None,
    algo: Annotated[
        int, typer.Option(min=0, max=1, help="Aceso only: which profiled variant (algo0 or algo1 files); default 0.")
    ] = 0,
    out: Annotated[
        Optional[Path], typer.Option("--out", "-o", help="Write the table (CSV) here; without it, print it to stdout.")
    ] = None,
) -> None:
    """Import a published per-layer profile into optsearch's CSV format (use it with --profile)."""
    check_output_file(out, "--out")  # before the work
    options = {}
    if algo != 0:
        if source_kind != "aceso":
            raise SpecError(f"--algo = {algo}: only Aceso's files have algorithm variants")
        options["algo"] = algo
    table = import_profile(source_kind, source, model, gpu_map, **options)
    if out is None:
        stdout.out(table.to_csv(), end="", highlight=False)
        return
    table.save(out)
    gpus = ", ".join(sorted(table.gpus()))
    stderr.print(f"wrote {len(table.entries)} rows ({gpus}) to {out}")
