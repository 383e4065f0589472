"""`optsearch solve`: the provably optimal plan under cost or time budgets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.options import (
    ClusterOpt, GlobalBatchOpt, IterationsOpt, JsonOpt, ModelOpt, ProfileOpt, SetOpt, TokensOpt,
    OutOfTime, TargetOpt, HeadroomOpt, FlashAttentionOpt, OverlapGradReduceOpt, PipelinedParamGatherOpt, problem_from_options, space_from_target, time_limit_covers_setup,
)
from optsearch.cli.options import context_parallel_types_note, max_cp_note, profile_coverage
from optsearch.errors import InfeasibleError, SpecError
from optsearch.report import check_output_file, dumps, solve_json, solve_summary, stderr, stdout, write_atomic
from optsearch.spec.base import validate
from optsearch.spec.budget import Budget
from optsearch.units import format_duration, format_usd, parse_duration_s, parse_money_usd

MinimizeOpt = Annotated[str, typer.Option("--minimize", metavar="[cost|time]", help="What to minimize: cost (USD for the run) or time.")]
MaxTimeOpt = Annotated[
    Optional[str], typer.Option("--max-time", help="Wall-clock budget for the whole training: 90m, 36h, 7d, 1d12h or seconds.")
]
MaxCostOpt = Annotated[Optional[str], typer.Option("--max-cost", help="Dollar budget for the whole training, e.g. 250000.")]
MaxGpusOpt = Annotated[
    Optional[int], typer.Option("--max-gpus", min=1, max=10_000_000,
                                help="Use at most this many GPUs (when no plan fits within it, the error names the "
                                     "fewest GPUs a plan needs).")
]
MaxRateOpt = Annotated[Optional[str], typer.Option("--max-usd-per-hour", help="Rent at most this many USD per hour.")]
SolverOpt = Annotated[
    str, typer.Option("--solver", metavar="[cpsat|cbc]", help="cpsat (OR-Tools CP-SAT, the default: fastest in bench/) or cbc (MILP via PuLP's bundled CBC).")
]
TimeLimitOpt = Annotated[
    Optional[float],
    typer.Option("--time-limit", min=0.01, max=1e7,
                 help="Stop after this many seconds, reading the specs and setting up included; the answer is then "
                      "'feasible' with its proven gap."),
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
    # `is not None`: an empty --max-time '' is an error, not "no limit"
    return validate(Budget, {
        "objective": minimize,
        "max_time_s": parse_duration_s(max_time, option="--max-time") if max_time is not None else None,
        "max_cost_usd": parse_money_usd(max_cost, option="--max-cost") if max_cost is not None else None,
        "max_gpus": max_gpus,
        "max_usd_per_hour": (parse_money_usd(max_usd_per_hour, option="--max-usd-per-hour")
                             if max_usd_per_hour is not None else None),
    }, "budget")


class SolveProgress:
    """A rich progress display on stderr, in the user's terms: plan shapes (tp, dp, micro-batch, pipeline depth and
    node types) examined, ruled out by quick bounds, the best plan so far and the proven gap (how far the best plan
    so far can be from the optimum). A no-op when quiet."""

    def __init__(self, objective: str, quiet: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.objective = objective
        # Not on a file or pipe: rich draws nothing there but ends its transient display with an empty line, which
        # put a blank line before a one-line error.
        self.progress = None if quiet or not stderr.is_terminal else Progress(
            TextColumn("plan shapes examined"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"), console=stderr, transient=True)
        self.task = None

    def __enter__(self):
        if self.progress is not None:
            self.progress.__enter__()
            self.task = self.progress.add_task("", total=None, status="")
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def value(self, x: float) -> str:
        return format_usd(x) if self.objective == "cost" else format_duration(x)

    def status(self, p) -> str:
        """'2,935 ruled out by quick bounds, best so far $37,947, proven gap 0.22 %'."""
        parts = [f"{p.pruned:,} ruled out by quick bounds", f"{p.explored:,} solved exactly"]
        if p.incumbent is None:
            parts.append("no plan yet")
        else:
            parts.append(f"best so far {self.value(p.incumbent)}")
            if p.bound is not None and p.incumbent > 0:
                parts.append(f"proven gap {max(0.0, 1 - p.bound / p.incumbent):.2%}")
        return ", ".join(parts)

    def __call__(self, p) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=p.bounded, total=max(p.total, p.bounded),
                                 status=self.status(p))


def parse_sizes(text: str, option: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): positive integers."""
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SpecError(f"{option} = {text!r}: expected positive integers joined by ',', e.g. 1,2,4") from None
    if not sizes or any(x < 1 for x in sizes):
        raise SpecError(f"{option} = {text!r}: sizes must be at least 1")
    return sizes


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
    target: TargetOpt = "megatron",
    memory_headroom: HeadroomOpt = None,
    flash_attention: FlashAttentionOpt = None,
    overlap_grad_reduce: OverlapGradReduceOpt = None,
    pipelined_param_gather: PipelinedParamGatherOpt = False,
    max_cp: Annotated[
        Optional[int],
        typer.Option("--max-cp", min=1, max=1024,
                     help="Largest context-parallel size searched (default: the target's, 8 for megatron, 1 for fasop; "
                          "1 turns context parallelism off). A measured or imported --profile table searches cp 1 only: "
                          "it holds times at the full sequence, which cannot price s / cp tokens; so do encoder-only "
                          "(BERT), encoder-decoder and mixture-of-experts models. Upstream runs cp > 1 with flash "
                          "attention only: a cp > 1 plan uses only the node types whose GPUs run it (compute "
                          "capability 8.0+, head dimension a multiple of 8); where none does, cp 1 only. A value above what "
                          "is searched is no error; a warning says why."),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write the result JSON here (atomically), with the problem it was solved for "
                                   "(specs, their sha256, job, edits, budget), so that `estimate --plan`, `launch` and "
                                   "`calibrate` need nothing else. It carries no timing: a proven optimum (or a solve "
                                   "stopped by --gap) writes a byte-identical file from the same inputs; a solve "
                                   "stopped by --time-limit may stop at another plan or gap from run to run."),
    ] = None,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    expert_parallel: Annotated[
        Optional[str],
        typer.Option("--expert-parallel", metavar="SIZES",
                     help="Mixture-of-experts models: the expert-parallel sizes (ep) the search may choose, e.g. 1 "
                          "(no expert parallelism) or 1,2,4,8. Default: every ep that divides dp and the experts."),
    ] = None,
) -> None:
    """Find the plan that is optimal under the cost model, and prove it.

    Chooses the nodes to rent, the pipeline stages (node type, layers, recomputation), tp, dp and micro-batch size.
    Exit code 1 when no plan meets the budgets (the message names the binding budget), 2 on bad input.
    """
    from optsearch.planfile import problem_record
    from optsearch.infeasible import no_plan_reason
    from optsearch.solver import process_age_s, solve

    budget = budget_from_options(minimize, max_time, max_cost, max_gpus, max_usd_per_hour)
    check_output_file(out, "--out")  # before any work
    with time_limit_covers_setup(time_limit) as left:
        problem = problem_from_options(model, cluster, profile, global_batch_size, iterations, tokens, edits,
                                       memory_headroom=memory_headroom, target=target, flash_attention=flash_attention,
                                       overlap_grad_reduce=overlap_grad_reduce,
                                       param_gather_pipelined=pipelined_param_gather)
        options = space_from_target(target, problem)
        if expert_parallel is not None:
            options = replace(options, expert_parallel_sizes=parse_sizes(expert_parallel, "--expert-parallel"))
            if not problem.model.is_moe:  # like --max-cp above what can run: no error, but say it does nothing
                stderr.print(f"[yellow]warning:[/yellow] --expert-parallel {expert_parallel}: {problem.model.name} has "
                             f"no experts (a dense model); the option changes nothing", highlight=False)
        if max_cp is not None:
            note = max_cp_note(max_cp, target, problem, options)
            if note is not None:
                stderr.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
            options = replace(options, context_parallel_sizes=tuple(
                c for c in options.context_parallel_sizes if c <= max_cp))
        cp_note = context_parallel_types_note(problem, options)
        if cp_note is not None and not quiet:
            stderr.print(f"note: {cp_note}", highlight=False, markup=False)
        left_out = profile_coverage(problem, options)  # exit 2 before any solving when it covers none
        # --time-limit bounds the whole command: the start-up already spent (interpreter and imports included) is
        # taken off it, and 5 % is kept for the report after the solve
        left_s = None if time_limit is None else max(0.0, min(left(), 0.95 * time_limit - process_age_s()))
        with SolveProgress(budget.objective, quiet or as_json) as progress:
            result = solve(problem, budget, solver=solver, time_limit_s=left_s, gap=gap, options=options,
                           progress=progress)
        if result.plan is None:
            if result.status == "timeout":
                reason = f"no plan found within --time-limit {time_limit:g} s; raise the limit"
            else:
                try:
                    reason = no_plan_reason(problem, budget, solver=solver, options=options, time_limit_s=left())
                except OutOfTime:
                    reason = (f"no plan meets the budgets ({budget.describe()}); finding the one that binds ran past "
                              f"--time-limit {time_limit:g} s")
            if as_json:  # stdout still carries one JSON object; --out stays unwritten
                stdout.out(dumps({"status": result.status, "objective": budget.objective, "plan": None,
                                  "reason": reason}), end="", highlight=False)
            raise InfeasibleError(reason)
    scope = ""
    if left_out:  # the proof holds over the node types searched, no further
        from optsearch.coverage import scoped_message

        scope = " over the node types the profile covers" if result.status == "optimal" else ""
        result.message = scoped_message(result.status, result.message, left_out, problem.profile.name)
    payload = solve_json(result, problem)
    payload["left_out_node_types"] = left_out
    payload["problem"] = problem_record(problem, model_ref=model, cluster_ref=cluster, profile_ref=profile,
                                        edits=edits, budget=budget, target=target)
    if out is not None:
        # The file carries no timing, so the same inputs write a byte-identical file.
        write_atomic(out, dumps({k: v for k, v in payload.items() if k not in ("solve_time_s", "first_plan_s")}))
    if as_json:
        stdout.out(dumps(payload), end="", highlight=False)
        return
    for renderable in solve_summary(result, problem, budget, scope=scope):
        stdout.print(renderable)
    if out is not None:
        stderr.print(f"wrote {out}")
    if result.status != "optimal":
        stderr.print(f"[yellow]not proven optimal: {result.message}; best bound {bound_text(result)}[/yellow]")


def bound_text(result) -> str:
    """The solver's lower bound in the objective's unit: dollars, or a duration (the time objective is seconds)."""
    if result.bound is None:
        return "none"
    return format_usd(result.bound) if result.objective == "cost" else format_duration(result.bound)
