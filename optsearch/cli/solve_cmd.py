"""`optsearch solve`: the provably optimal plan under cost or time budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.options import (
    ClusterOpt, GlobalBatchOpt, IterationsOpt, JsonOpt, ModelOpt, ProfileOpt, SetOpt, TokensOpt,
    problem_from_options,
)
from optsearch.errors import InfeasibleError, SpecError
from optsearch.report import dumps, solve_json, solve_summary, stderr, stdout, write_atomic
from optsearch.spec.budget import Budget
from optsearch.units import format_usd, parse_duration_s, parse_money_usd

MinimizeOpt = Annotated[str, typer.Option("--minimize", help="What to minimize: cost (USD for the run) or time.")]
MaxTimeOpt = Annotated[
    Optional[str], typer.Option("--max-time", help="Wall-clock budget for the whole training: 90m, 36h, 7d, 1d12h or seconds.")
]
MaxCostOpt = Annotated[Optional[str], typer.Option("--max-cost", help="Dollar budget for the whole training, e.g. 250000.")]
MaxGpusOpt = Annotated[Optional[int], typer.Option("--max-gpus", min=1, help="Use at most this many GPUs.")]
MaxRateOpt = Annotated[Optional[str], typer.Option("--max-usd-per-hour", help="Rent at most this many USD per hour.")]
SolverOpt = Annotated[
    str, typer.Option("--solver", help="cpsat (OR-Tools CP-SAT, the default: fastest in bench/) or cbc (MILP via PuLP's bundled CBC).")
]
TimeLimitOpt = Annotated[
    Optional[float],
    typer.Option("--time-limit", min=0.01, help="Stop after this many seconds; the answer is then 'feasible' with its proven gap."),
]
GapOpt = Annotated[
    float,
    typer.Option("--gap", min=0.0, max=0.99,
                 help="Stop once the plan is proven within this fraction of the optimum (0.01 = 1 %); the answer is "
                      "then 'feasible' with its proven gap. Default 0: prove optimality."),
]


def budget_from_options(minimize: str, max_time: str | None, max_cost: str | None, max_gpus: int | None,
                        max_usd_per_hour: str | None) -> Budget:
    if minimize not in ("cost", "time"):
        raise SpecError(f"--minimize = {minimize!r}: must be cost or time")
    return Budget(
        objective=minimize,  # type: ignore[arg-type]
        max_time_s=parse_duration_s(max_time, option="--max-time") if max_time else None,
        max_cost_usd=parse_money_usd(max_cost, option="--max-cost") if max_cost else None,
        max_gpus=max_gpus,
        max_usd_per_hour=parse_money_usd(max_usd_per_hour, option="--max-usd-per-hour") if max_usd_per_hour else None,
    )


def progress_printer(quiet: bool, every_s: float = 1.0):
    """Progress to stderr: models solved, candidates bounded, incumbent and the proven bound. A line is printed when
    the incumbent improves, after a model solve, or at most once every `every_s` seconds."""
    if quiet:
        return None
    import time

    from optsearch.solver import Progress

    last = {"at": 0.0, "incumbent": None, "explored": 0}

    def show(p: Progress) -> None:
        now = time.monotonic()
        if (p.incumbent == last["incumbent"] and p.explored == last["explored"]
                and now - last["at"] < every_s):
            return
        last.update(at=now, incumbent=p.incumbent, explored=p.explored)
        inc = "none" if p.incumbent is None else f"{p.incumbent:,.6g}"
        stderr.print(f"[dim]{p.bounded} candidates bounded, {p.explored} models solved of {p.total} "
                     f"({p.pruned} pruned by cheap bounds): bound {p.bound:,.6g}, incumbent {inc}[/dim]",
                     highlight=False)

    return show


@app.command("solve")
def solve_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    minimize: MinimizeOpt = "cost",
    max_time: MaxTimeOpt = None,
    max_cost: MaxCostOpt = None,
    max_gpus: MaxGpusOpt = None,
    max_usd_per_hour: MaxRateOpt = None,
    solver: SolverOpt = "cpsat",
    time_limit: TimeLimitOpt = None,
    gap: GapOpt = 0.0,
    profile: ProfileOpt = "analytic",
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    edits: SetOpt = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Write the result JSON here (atomically; no timing, so byte-identical across runs). "
                                   "`estimate --plan` and `launch` read it."),
    ] = None,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
) -> None:
    """Find the plan that is optimal under the cost model, and prove it.

    Chooses the nodes to rent, the pipeline stages (node type, layers, recomputation), tp, dp and micro-batch size.
    Exit code 1 when no plan meets the budgets (the message names the binding budget), 2 on bad input.
    """
    from optsearch.solver import explain_infeasible, process_age_s, solve

    problem = problem_from_options(model, cluster, profile, global_batch_size, iterations, tokens, edits)
    budget = budget_from_options(minimize, max_time, max_cost, max_gpus, max_usd_per_hour)
    if out is not None and not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise SpecError(f"--out {out}: folder {out.parent} does not exist")
    # --time-limit bounds the whole command: the start-up already spent is taken off it, and 5 % is kept for the
    # report after the solve
    left_s = None if time_limit is None else max(0.0, 0.95 * time_limit - process_age_s())
    result = solve(problem, budget, solver=solver, time_limit_s=left_s, gap=gap,
                   progress=progress_printer(quiet or as_json))
    if result.plan is None:
        if result.status == "timeout":
            raise InfeasibleError(f"no plan found within --time-limit {time_limit:g} s; raise the limit")
        raise InfeasibleError(explain_infeasible(problem, budget, solver=solver, time_limit_s=time_limit))
    payload = solve_json(result, problem)
    if out is not None:
        # The file carries no timing, so the same inputs write a byte-identical file.
        write_atomic(out, dumps({k: v for k, v in payload.items() if k != "solve_time_s"}))
    if as_json:
        stdout.out(dumps(payload), end="", highlight=False)
        return
    for renderable in solve_summary(result, problem, budget):
        stdout.print(renderable)
    if out is not None:
        stderr.print(f"wrote {out}")
    if result.status != "optimal":
        stderr.print(f"[yellow]not proven optimal: {result.message}; best bound {format_usd(result.bound) if result.objective == 'cost' and result.bound else result.bound}[/yellow]")
