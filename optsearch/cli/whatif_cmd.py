"""`optsearch whatif` (budget sweeps, cluster comparisons, marginal node value) and `optsearch pareto` (the exact
(training time, cost) frontier). Results to stdout (table or --json), progress to stderr."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from optsearch.cli import app
from optsearch.cli.options import (
    ClusterOpt, GlobalBatchOpt, IterationsOpt, ModelOpt, ProfileOpt, SetOpt, TargetOpt, TokensOpt,
    problem_from_options, profile_coverage, space_from_target, HeadroomOpt, FlashAttentionOpt,
)
from optsearch.cli.solve_cmd import (
    MaxCostOpt, MaxGpusOpt, MaxRateOpt, MaxTimeOpt, SolverOpt, budget_from_options,
)
from optsearch.errors import InfeasibleError, SpecError
from optsearch.report import (
    check_output_file, degrees_text, distinct_durations, distinct_usd, dumps, recompute_text, solve_json, stderr, stdout,
    write_atomic,
)
from optsearch.units import format_duration, format_usd
from optsearch.whatif import Point, Sweep, describe_change, parse_sweep

PerSolveLimitOpt = Annotated[
    Optional[float],
    typer.Option("--time-limit", min=0.01, max=1e7, help="Stop each solve after this many seconds (its point is then "
                                                "'feasible', not proven optimal)."),
]
CsvOpt = Annotated[Optional[Path], typer.Option("--csv", help="Also write the points as CSV to this file.")]
PLOT_SUFFIXES = ("png", "pdf", "svg", "jpg", "jpeg")
PlotOpt = Annotated[
    Optional[Path],
    typer.Option("--plot", help="Also draw cost against training time to this file (.png, .pdf, .svg or .jpg)."),
]
JsonListOpt = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON array, one object per point: solve --json's keys (message with the "
                                "profile's coverage note, left_out_node_types) plus budget, how (solved, reused or "
                                "implied), reason, label and cluster."),
]
ParetoJsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON array, one object per frontier plan, fastest first: solve --json's keys "
                                "(message with the profile's coverage note, left_out_node_types) plus budget (the "
                                "deadline the plan was solved under), how, label and cluster."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q",
                                        help="No progress bar on stderr (drawn only when stderr is a terminal).")]

CSV_COLUMNS = ("label", "cluster", "objective", "max_time_s", "max_cost_usd", "status", "how", "training_time_s",
               "cost_usd", "usd_per_hour", "nodes", "num_gpus", "tp", "dp", "pp", "micro_batch_size", "balance",
               "cp", "ep", "virtual_stages", "distributed_optimizer", "recompute", "recompute_num_layers",
               "solve_time_s", "gap", "delta_time_s", "delta_cost_usd", "reason")


# ---- output -------------------------------------------------------------------------------------------------

def point_json(point: Point, left_out: dict[str, str] | None = None) -> dict:
    """`solve --json`'s keys plus budget, how (solved / reused / implied), reason, label and cluster; as solve, the
    message carries the profile's coverage note and left_out_node_types names the node types it leaves out."""
    from optsearch.coverage import scoped_message

    left_out = left_out or {}
    out = {"budget": point.budget.model_dump(), **solve_json(point.result, point.problem), "how": point.how,
           "reason": point.reason, "label": point.label, "cluster": point.problem.cluster.name}
    out["message"] = scoped_message(point.result.status, out["message"], left_out, point.problem.profile.name)
    out["left_out_node_types"] = left_out
    out.update(point.extra)
    return out


def points_csv(points: list[Point]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for p in points:
        row = {"label": p.label, "cluster": p.problem.cluster.name, "objective": p.budget.objective,
               "max_time_s": p.budget.max_time_s, "max_cost_usd": p.budget.max_cost_usd, "status": p.result.status,
               "how": p.how, "solve_time_s": round(p.result.solve_time_s, 3), "gap": p.result.gap,
               "reason": p.reason, **p.extra}
        if p.plan is not None and p.estimate is not None:
            e, plan = p.estimate, p.plan
            row.update(training_time_s=e.training_time_s, cost_usd=e.cost_usd, usd_per_hour=e.usd_per_hour,
                       nodes=nodes_text(p), num_gpus=plan.num_gpus, tp=plan.tp, dp=plan.dp, pp=plan.pp,
                       micro_batch_size=plan.micro_batch_size, balance=plan.balance, cp=plan.cp, ep=plan.ep,
                       virtual_stages=plan.virtual_stages, distributed_optimizer=plan.distributed_optimizer,
                       recompute=recompute_text(plan), recompute_num_layers=plan.recompute_num_layers)
        writer.writerow(row)
    return buf.getvalue()


def nodes_text(p: Point) -> str:
    return " + ".join(f"{n} {name}" for name, n in sorted(p.estimate.nodes.items())) if p.estimate else ""


def plan_label(p: Point) -> str:
    plan = p.plan
    if not plan:
        return ""
    knobs = "".join(f" {name}{value}" for name, value in (("cp", plan.cp), ("ep", plan.ep), ("v", plan.virtual_stages))
                    if value != 1)
    return f"tp{plan.tp} dp{plan.dp}{knobs} pp{plan.pp} mb{plan.micro_batch_size}\n{nodes_text(p)}"


def budget_text(p: Point, swept: str | None) -> str:
    if swept == "max_time_s":
        return "no limit" if p.budget.max_time_s is None else format_duration(p.budget.max_time_s)
    if swept == "max_cost_usd":
        return "no limit" if p.budget.max_cost_usd is None else format_usd(p.budget.max_cost_usd)
    return p.budget.describe()


def points_table(points: list[Point], title: str, swept: str | None, first: str | None,
                 budget_column: str | None = "budget") -> tuple[Table, list[str]]:
    """The table, and its footnotes: a reason that several rows share (up to the row's own budget, which the budget
    column shows) is printed once below the table and the rows point to it, e.g. "[1]". Times and costs carry the
    precision it takes for different values to read differently. `budget_column`: the budget column's title (None:
    no budget column)."""
    table = Table(title=title)
    columns = ([first] if first else []) + ([budget_column] if budget_column else []) + [
        "status", "time", "cost", "nodes", "tp/dp/pp", "micro-batch", "recompute", "balance", "note"]
    for col in columns:
        table.add_column(col, justify="right" if col in ("time", "cost", "micro-batch") else "left")
    shared = [_shared_reason(p, swept) for p in points]
    counts = {r: shared.count(r) for r in shared if r}
    footnotes: list[str] = []
    priced = [p for p in points if p.plan is not None and p.estimate is not None]
    times = dict(zip(map(id, priced), distinct_durations([p.estimate.training_time_s for p in priced])))
    costs = dict(zip(map(id, priced), distinct_usd([p.estimate.cost_usd for p in priced])))
    for p, common in zip(points, shared):
        row = [p.label] if first else []
        row += ([budget_text(p, swept)] if budget_column else []) + [p.result.status]
        if p.plan is not None and p.estimate is not None:
            row += [times[id(p)], costs[id(p)], nodes_text(p),
                    degrees_text(p.plan),
                    str(p.plan.micro_batch_size), recompute_text(p.plan), p.plan.balance]
        else:
            row += ["", "", "", "", "", "", ""]
        note = p.reason or ("re-used" if p.how == "reused" else "")
        if common and counts[common] > 1:
            if common not in footnotes:
                footnotes.append(common)
            note = f"[{footnotes.index(common) + 1}]"
        if p.result.status == "feasible":
            unproven = f"gap {p.result.gap:.1%}" if p.result.gap is not None else p.result.message
            note = "; ".join(x for x in (unproven, note) if x)
        row.append(note)
        table.add_row(*row, style=None if p.plan is not None else "dim")
    return table, [f"[{i + 1}] {text}" for i, text in enumerate(footnotes)]


def _shared_reason(p: Point, swept: str | None) -> str:
    """The point's reason with its own budget replaced by "the budget" (so rows that differ only there share it)."""
    if not p.reason or swept not in ("max_time_s", "max_cost_usd"):
        return ""
    return p.reason.replace(f"within {budget_text(p, swept)}", "within the budget").replace(
        f"at most {budget_text(p, swept)}", "at most the budget")


def plot_points(points: list[Point], path: Path, title: str, *, frontier: bool = False) -> None:
    """Cost against training time, each point labelled by its plan; a step line through a frontier; one colour
    per label (cluster) when points carry labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_plan = [p for p in points if p.estimate is not None]
    if not with_plan:
        raise InfeasibleError(f"--plot {path}: no point has a plan to draw")
    days = max(p.estimate.training_time_s for p in with_plan) >= 2 * 86400
    unit, scale = ("days", 86400.0) if days else ("hours", 3600.0)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    groups: dict[str, list[Point]] = {}
    for p in with_plan:
        groups.setdefault(p.label, []).append(p)
    xs_all = [p.estimate.training_time_s / scale for p in with_plan]
    ys_all = [p.estimate.cost_usd for p in with_plan]
    drawn: dict[tuple[float, float], list[str]] = {}  # position -> the labels with a marker there
    labelled: list[tuple[float, float]] = []  # annotated positions, in axes-independent units (days/hours, USD)
    for label, group in groups.items():
        group = sorted(group, key=lambda p: p.estimate.training_time_s)
        xs = [p.estimate.training_time_s / scale for p in group]
        ys = [p.estimate.cost_usd for p in group]
        if frontier:
            ax.step(xs, ys, where="post", color="tab:blue", alpha=0.4, label="Pareto frontier")
        color = None
        for p, x, y in zip(group, xs, ys):
            key = (round(x, 6), round(y, 2))
            here = drawn.setdefault(key, [])
            if label in here:
                continue  # the same label's point again (sweep budgets with one optimum): drawn once
            under = len(here)
            here.append(label)
            # a point where another label's already is: a ring around it, so that every label stays visible
            (line,) = ax.plot([x], [y], "o", markersize=6 + 5 * under, color=color,
                              markerfacecolor="none" if under else None, markeredgewidth=1.5 if under else None,
                              label=(label or None) if color is None else None, zorder=3 - 0.01 * under)
            color = line.get_color()
            if under:
                continue  # its label is there already
            labelled.append((x, y))
            ax.annotate(plan_label(p), (x, y), textcoords="offset points", fontsize=7,
                        xytext=_label_offset(x, y, labelled[:-1], ax_ranges=(xs_all, ys_all)))
    ax.set_xlabel(f"training time ({unit})")
    ax.set_ylabel("cost (USD)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("${x:,.0f}"))
    ax.margins(x=0.12, y=0.15)  # room for the labels of the outermost points
    if frontier or any(groups):
        # outside the axes, so that it covers no point; one entry per label (the frontier's step line once)
        handles, names = ax.get_legend_handles_labels()
        unique = dict(zip(names, handles))
        ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  borderaxespad=0.0)
    fig.tight_layout()
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise SpecError(f"--plot {path}: folder {path.parent} does not exist")
    fig.savefig(path)
    plt.close(fig)


def _label_offset(x: float, y: float, placed: list[tuple[float, float]], *, ax_ranges) -> tuple[int, int]:
    """Offset in points of a point's label: up and right, or down and right when a label already placed lies within
    a few percent of the axes above it (the frontier's neighbouring points; labels are two lines, about 20 points
    tall), alternating so that a run of close points does not stack its labels on one another."""
    xs, ys = ax_ranges
    dx = (max(xs) - min(xs)) or 1.0
    dy = (max(ys) - min(ys)) or 1.0
    near = [(px, py) for px, py in placed if abs(px - x) / dx < 0.18 and abs(py - y) / dy < 0.08]
    return (6, -22) if len(near) % 2 else (6, 4)


def check_outputs(csv_path: Path | None, plot_path: Path | None) -> None:
    """--csv and --plot are writable files of a known type: checked before any solve."""
    check_output_file(csv_path, "--csv")
    check_output_file(plot_path, "--plot", suffixes=PLOT_SUFFIXES)


def emit(points: list[Point], *, as_json: bool, csv_path: Path | None, plot_path: Path | None, title: str,
         swept: str | None = None, first: str | None = None, frontier: bool = False,
         budget_column: str | None = "budget", left_out: dict[str, dict[str, str]] | None = None) -> None:
    """Table, JSON, CSV and plot of the points. left_out: per cluster name, the node types the profile leaves out
    (profile_coverage), for the JSON."""
    if csv_path is not None:
        write_atomic(csv_path, points_csv(points))
    # every point infeasible: the table and its reasons still print (exit 0, as without --plot), then a warning
    drawable = any(p.estimate is not None for p in points)
    if plot_path is not None and drawable:
        plot_points(points, plot_path, title, frontier=frontier)
    if as_json:
        stdout.out(dumps([point_json(p, (left_out or {}).get(p.problem.cluster.name)) for p in points]), end="",
                   highlight=False)
    else:
        table, footnotes = points_table(points, title, swept, first, budget_column)
        stdout.print(table)
        for line in footnotes:
            stdout.print(line, highlight=False, markup=False)
    for what, path in (("CSV", csv_path), ("plot", plot_path if drawable else None)):
        if path is not None:
            stderr.print(f"wrote {what} {path}", highlight=False, markup=False)
    if plot_path is not None and not drawable:
        stderr.print(f"[yellow]warning:[/yellow] --plot {plot_path}: no point has a plan to draw; nothing written",
                     highlight=False)


class ProgressBar:
    """A rich progress bar on stderr fed by the library's tick(done, total, what)."""

    def __init__(self, description: str, quiet: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = None if quiet or not stderr.is_terminal else Progress(  # as SolveProgress
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("[dim]{task.fields[what]}"), console=stderr, transient=True)
        self.description = description
        self.task = None

    def __enter__(self):
        if self.progress is not None:
            self.progress.__enter__()
            self.task = self.progress.add_task(self.description, total=None, what="")
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def tick(self, done: int, total: int | None, what: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=total, what=what)


# ---- commands -----------------------------------------------------------------------------------------------

def _problem(model, cluster, profile, edits, global_batch_size, iterations, tokens, memory_headroom=None,
             target=None, flash_attention=None):
    return problem_from_options(model, cluster, profile, global_batch_size, iterations, tokens, edits,
                                memory_headroom=memory_headroom, target=target, flash_attention=flash_attention)


@app.command("whatif")
def whatif_command(
    model: ModelOpt,
    cluster: Annotated[
        Optional[str],
        typer.Option("--cluster", "-c", help="Cluster catalog name (`optsearch catalog clusters`) or a YAML/JSON path."),
    ] = None,
    sweep: Annotated[
        Optional[str],
        typer.Option("--sweep", help="Sweep one budget: max-time=FROM..TO:POINTS (e.g. 2d..30d:12), "
                                     "max-cost=FROM..TO:POINTS (e.g. 50000..500000:10), or a list max-time=2d,7d."),
    ] = None,
    compare_clusters: Annotated[
        Optional[str],
        typer.Option("--compare-clusters", help="Comma-separated clusters: the same job and budget (or sweep) on each."),
    ] = None,
    marginal: Annotated[
        bool, typer.Option("--marginal", help="Re-solve with one node more and one node fewer of each type; each "
                                         "summary line names a side not proven optimal (status, gap).")
    ] = False,
    minimize: Annotated[
        Optional[str],
        typer.Option("--minimize", metavar="[cost|time]", help="cost or time; default: cost under a time sweep, time under a cost sweep, "
                                        "else cost."),
    ] = None,
    max_time: MaxTimeOpt = None,
    max_cost: MaxCostOpt = None,
    max_gpus: MaxGpusOpt = None,
    max_usd_per_hour: MaxRateOpt = None,
    edits: SetOpt = None,
    target: TargetOpt = "megatron",
    solver: SolverOpt = "cpsat",
    time_limit: PerSolveLimitOpt = None,
    profile: ProfileOpt = "analytic",
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    memory_headroom: HeadroomOpt = None,
    flash_attention: FlashAttentionOpt = None,
    csv_path: CsvOpt = None,
    plot: PlotOpt = None,
    as_json: JsonListOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """What-if analysis: the optimal plan across a budget sweep, on several clusters, or with one node more or fewer.

    Infeasible points are shown with the reason and do not stop the sweep. Work is re-used between sweep points
    (exactly: see docs/whatif.md).
    """
    from optsearch import whatif

    check_outputs(csv_path, plot)
    modes = [n for n, v in (("--sweep", sweep), ("--compare-clusters", compare_clusters), ("--marginal", marginal))
             if v]
    if not modes:
        raise SpecError("give --sweep, --compare-clusters or --marginal (see optsearch whatif --help)")
    if marginal and len(modes) > 1:
        raise SpecError(f"--marginal works on one cluster and one budget; drop {', '.join(modes[1:])}")
    if compare_clusters is not None and cluster is not None:
        raise SpecError("give either --cluster or --compare-clusters, not both")
    if compare_clusters is None and cluster is None:
        raise SpecError("missing --cluster")
    spec: Sweep | None = parse_sweep(sweep) if sweep else None
    objective = minimize or (spec.objective if spec else "cost")
    budget = budget_from_options(objective, max_time, max_cost, max_gpus, max_usd_per_hour)
    if spec is not None and getattr(budget, spec.limit) is not None:
        flag = "--max-time" if spec.limit == "max_time_s" else "--max-cost"
        raise SpecError(f"--sweep {sweep}: sweeps the limit {flag} sets; drop {flag}")
    kw = dict(solver=solver, time_limit_s=time_limit)
    swept = spec.limit if spec else None
    if compare_clusters is not None:
        names = [c.strip() for c in compare_clusters.split(",") if c.strip()]
        if len(names) < 2:
            raise SpecError(f"--compare-clusters = {compare_clusters!r}: give at least two clusters, comma-separated")
        problems = [_problem(model, c, profile, edits, global_batch_size, iterations, tokens, memory_headroom, target,
                             flash_attention)
                    for c in names]
        points = []
        left_out = {}
        with ProgressBar("clusters", quiet or as_json) as bar:
            for i, problem in enumerate(problems):
                bar.tick(i, len(problems), problem.cluster.name)
                options = space_from_target(target, problem)
                left_out[problem.cluster.name] = profile_coverage(problem, options)
                points += whatif.compare_clusters([problem], budget, spec, options=options, **kw)
            bar.tick(len(problems), len(problems), "")
        title = f"{problems[0].model.name}: {budget.describe()} on {', '.join(names)}"
        emit(points, as_json=as_json, csv_path=csv_path, plot_path=plot, title=title, swept=swept, first="cluster",
             left_out=left_out)
        return
    problem = _problem(model, cluster, profile, edits, global_batch_size, iterations, tokens, memory_headroom, target,
                       flash_attention)
    kw["options"] = space_from_target(target, problem)
    # exit 2 when it covers no node type; a warning for those left out, and in the JSON
    left_out = {problem.cluster.name: profile_coverage(problem, kw["options"])}
    if marginal:
        with ProgressBar("marginal", quiet or as_json) as bar:
            base, changes = whatif.marginal(problem, budget, tick=bar.tick, **kw)
        if base.plan is None:
            raise InfeasibleError(base.reason or f"no plan: {base.result.status}")
        emit([base, *changes], as_json=as_json, csv_path=csv_path, plot_path=plot, first="change", left_out=left_out,
             title=f"{problem.model.name} on {problem.cluster.name}: one node more or fewer ({budget.describe()})")
        if not as_json:
            for c in changes:
                stdout.print(describe_change(c, base), highlight=False, markup=False)
        return
    with ProgressBar("sweep", quiet or as_json) as bar:
        points = whatif.sweep(problem, budget, spec, tick=bar.tick, **kw)
    emit(points, as_json=as_json, csv_path=csv_path, plot_path=plot, swept=swept, left_out=left_out,
         title=f"{problem.model.name} on {problem.cluster.name}: minimize {objective}, sweep {sweep}")


@app.command("pareto")
def pareto_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    max_time: MaxTimeOpt = None,
    max_cost: MaxCostOpt = None,
    max_gpus: MaxGpusOpt = None,
    max_usd_per_hour: MaxRateOpt = None,
    edits: SetOpt = None,
    target: TargetOpt = "megatron",
    solver: SolverOpt = "cpsat",
    time_limit: PerSolveLimitOpt = None,
    profile: ProfileOpt = "analytic",
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    memory_headroom: HeadroomOpt = None,
    flash_attention: FlashAttentionOpt = None,
    csv_path: CsvOpt = None,
    plot: PlotOpt = None,
    as_json: ParetoJsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The exact Pareto frontier of (training time, USD cost): every non-dominated plan, fastest first.

    Prints a table, one row per plan, its times and costs precise enough to tell rows apart; --json: a JSON array.

    Epsilon-constraint over the exact solver (docs/whatif.md says why it is exact); exit 1 when no plan exists.
    """
    from optsearch import whatif

    check_outputs(csv_path, plot)
    budget = budget_from_options("time", max_time, max_cost, max_gpus, max_usd_per_hour)
    problem = _problem(model, cluster, profile, edits, global_batch_size, iterations, tokens, memory_headroom, target,
                       flash_attention)
    options = space_from_target(target, problem)
    left_out = {problem.cluster.name: profile_coverage(problem, options)}
    with ProgressBar("frontier points", quiet or as_json) as bar:
        points = whatif.pareto(problem, budget, solver=solver, time_limit_s=time_limit, options=options, tick=bar.tick)
    if not points:
        from optsearch.infeasible import no_plan_reason

        raise InfeasibleError(no_plan_reason(problem, budget, solver=solver, options=options,
                                             time_limit_s=time_limit))
    # no budget column: each point's deadline is the search's own step, not a budget the user set (the title says those)
    emit(points, as_json=as_json, csv_path=csv_path, plot_path=plot, frontier=True, swept="max_time_s",
         budget_column=None, left_out=left_out,
         title=f"{problem.model.name} on {problem.cluster.name}: Pareto frontier of training time and cost"
               + "".join(f", {limit}" for limit in budget.describe().split(", ")[1:]))
    if not quiet and any(p.result.status != "optimal" for p in points):
        stderr.print("[yellow]some solves stopped at --time-limit: the points are feasible plans, not a proven "
                     "frontier[/yellow]")
