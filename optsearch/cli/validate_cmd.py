"""`optsearch validate`: price a CSV of recorded runs and report how well the cost model predicts them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optsearch.cli import app
from optsearch.cli.options import HeadroomOpt, JsonOpt, ProfileOpt
from optsearch.problem import DEFAULT_MEMORY_HEADROOM
from optsearch.report import dumps, stderr, stdout


def _fmt(value, pct: bool = False, sign: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if pct:
        return f"{value:+.1%}" if sign else f"{value:.1%}"
    return f"{value:.3f}"


@app.command("validate")
def validate_command(
    runs_csvs: Annotated[
        list[Path],
        typer.Argument(metavar="RUNS.csv", help="Validation sets: CSVs of recorded runs (docs/validation.md); "
                                                   "several are priced together, each row in its own group."),
    ],
    profile: ProfileOpt = "analytic",
    memory_headroom: HeadroomOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price recorded runs: rank correlation (Spearman), mean error, top-pick regret, memory-flag confusion.

    Each row is a plan, its measured iteration time and whether it ran out of memory; see docs/validation.md for
    the columns and bench/validation/ for the sets shipped with their sources.
    """
    from optsearch.validate import load_runs, metrics, price, rows_json

    runs = [run for path in runs_csvs for run in load_runs(path)]
    headroom = DEFAULT_MEMORY_HEADROOM if memory_headroom is None else memory_headroom
    priced = price(runs, profile=profile, memory_headroom=headroom)
    result = metrics(priced)
    for p in priced:  # priced as recorded, but upstream Megatron-LM cannot run the plan (estimate / launch refuse it)
        if p.upstream_refuses is not None:
            stderr.print(f"warning: {p.run.where or 'run ' + p.run.run_id}: {p.upstream_refuses}; upstream "
                         f"Megatron-LM cannot run this plan (estimate and launch refuse it); priced as recorded",
                         highlight=False, markup=False)
    if as_json:
        stdout.out(dumps({"metrics": result, "runs": rows_json(priced)}), end="", highlight=False)
        return
    out = stdout.print
    rows = rows_json(priced)
    run_w = max([3] + [len(r["run_id"]) for r in rows])  # columns as wide as the longest name (AMP's ids run to 35)
    group_w = max([5] + [len(r["group"]) for r in rows])
    header = (f"{'run':<{run_w}} {'group':<{group_w}} {'measured s':>10} {'predicted s':>11} {'ratio':>6} {'oom':>4} "
              f"{'fits':>5}")
    out(f"{header} {'mem':>5}", highlight=False, markup=False)
    for row in rows:
        measured = "-" if row["measured_iteration_s"] is None else f"{row['measured_iteration_s']:.4f}"
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        out(f"{row['run_id']:<{run_w}} {row['group']:<{group_w}} {measured:>10} {row['predicted_iteration_s']:>11.4f} "
            f"{ratio:>6} {'yes' if row['oom'] else 'no':>4} {'yes' if row['predicted_fits'] else 'no':>5} "
            f"{row['peak_memory_share']:>5.0%}", highlight=False, markup=False)
    out("", highlight=False)
    for name, g in result["groups"].items():
        pick = (f"top pick {g['top_pick']} (regret {_fmt(g['top_pick_regret'], True, sign=True)})"
                if g["top_pick"] is not None else "no top pick (no run is predicted to fit)")
        out(f"group {name}: {g['timed']} timed of {g['runs']}; Spearman {_fmt(g['spearman'])}; "
            f"mean |error| {_fmt(g['mean_abs_error'], True)}; {pick}", highlight=False, markup=False)
    mem = result["memory"]
    out(f"all: {result['timed']} timed of {result['runs']}; Spearman {_fmt(result['spearman'])}; "
        f"mean |error| {_fmt(result['mean_abs_error'], True)}; median predicted/measured "
        f"{_fmt(result['median_ratio'])}", highlight=False, markup=False)
    out(f"memory: out-of-memory runs flagged {mem['oom_flagged']} of {mem['oom_flagged'] + mem['oom_missed']}; "
        f"good runs flagged {mem['good_flagged']} of {mem['good_flagged'] + mem['good_passed']} "
        f"(headroom {headroom:.0%})", highlight=False, markup=False)
