"""`optsearch compare`: the exact solver beside the DP baselines and brute force, on one problem and budget."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from optsearch.cli import app
from optsearch.cli.options import (
    ClusterOpt, GlobalBatchOpt, IterationsOpt, ModelOpt, ProfileOpt, TargetOpt, TokensOpt,
    problem_from_options, profile_coverage, space_from_target, HeadroomOpt, FlashAttentionOpt,
)
from optsearch.cli.solve_cmd import (
    MaxCostOpt, MaxGpusOpt, MaxRateOpt, MaxTimeOpt, MinimizeOpt, budget_from_options,
)
from optsearch.compare import DEFAULT_METHODS, METHODS, Comparison, compare, comparison_json, parse_methods
from optsearch.coverage import scoped_message
from optsearch.errors import InfeasibleError
from optsearch.infeasible import no_plan_reason
from optsearch.report import degrees_text, dumps, recompute_text, stderr, stdout
from optsearch.units import format_duration, format_usd


@app.command("compare")
def compare_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    minimize: MinimizeOpt = "cost",
    max_time: MaxTimeOpt = None,
    max_cost: MaxCostOpt = None,
    max_gpus: MaxGpusOpt = None,
    max_usd_per_hour: MaxRateOpt = None,
    methods: Annotated[
        str, typer.Option("--methods", help=f"Comma-separated methods to run, in order: {', '.join(METHODS)}. "
                                            "exhaustive (brute force) runs only when named: it refuses instances "
                                            "with more than --max-plans plans, which is most real ones.")
    ] = ",".join(DEFAULT_METHODS),
    time_limit: Annotated[
        Optional[float],
        typer.Option("--time-limit", min=0.01, max=1e7,
                     help="Seconds each method may run; a method stopped by it says so."),
    ] = None,
    max_plans: Annotated[
        Optional[int],
        typer.Option("--max-plans", min=1, max=10**9, help="exhaustive refuses instances with more plans than this (default 200,000)."),
    ] = None,
    profile: ProfileOpt = "analytic",
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    target: TargetOpt = "megatron",
    memory_headroom: HeadroomOpt = None,
    flash_attention: FlashAttentionOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per method (with solve --json's "
                                                         "message and left_out_node_types).")] = False,
) -> None:
    """Run the solvers and the baselines on one problem: status, objective, plan, search time, gap to the best.

    dp is the FASOP-style DP search (node-count grid, cyclic rotations of the node order), dp-amp the AMP-style one
    (the whole cluster in a fixed order); both search the same knobs as the exact solver (the --target's space:
    recomputation, block recomputation, cp, v, ep, the distributed optimizer). dp-published and dp-amp-published
    search only what the published tools do (no recomputation, cp = ep = v = 1) and say what they leave out; see
    docs/baselines.md. Exit code 1 when no method finds a plan; where an exact method or brute force proved that no
    plan meets the budgets, the message is solve's (the binding budget and its nearest feasible value).
    """
    problem = problem_from_options(model, cluster, profile, global_batch_size, iterations, tokens,
                                   memory_headroom=memory_headroom, target=target,
                                   flash_attention=flash_attention)
    budget = budget_from_options(minimize, max_time, max_cost, max_gpus, max_usd_per_hour)
    chosen = parse_methods(methods)
    options = space_from_target(target, problem)
    left_out = profile_coverage(problem, options)  # exit 2 when it covers none; a warning naming those it leaves out

    def done(result) -> None:
        stderr.print(f"[dim]{result.method}: {result.status} in {result.solve_time_s:.2f} s[/dim]", highlight=False)

    rows = compare(problem, budget, chosen, time_limit_s=time_limit, options=options, max_plans=max_plans,
                   on_done=done)
    if as_json:
        objects = comparison_json(rows)
        for obj in objects:  # as solve --json: the coverage note in the message, the node types left out by name
            obj["message"] = scoped_message(obj["status"], obj["message"], left_out, problem.profile.name)
            obj["left_out_node_types"] = left_out
        stdout.out(dumps(objects), end="", highlight=False)
    else:
        stdout.print(comparison_table(rows, title=f"{problem.model.name} on {problem.cluster.name}: "
                                                  f"{budget.describe()}"))
        for row in rows:
            if (row.result.status in ("timeout", "refused", "infeasible") or "time limit" in row.result.message
                    or row.result.method.endswith("-published")):
                stdout.print(f"{row.result.method}: {row.result.status}: {row.result.message or 'no plan'}",
                             highlight=False)
    if all(row.result.plan is None for row in rows):
        proven = [row.result.method for row in rows
                  if row.result.status == "infeasible" and row.result.method in PROVING_METHODS]
        if proven:  # the same line as solve's (optsearch.infeasible), by an exact backend
            exact = next((m for m in proven if m in ("cbc", "cpsat")), "cpsat")
            raise InfeasibleError(no_plan_reason(problem, budget, solver=exact, options=options,
                                                 time_limit_s=time_limit))
        raise InfeasibleError("no method found a plan that fits and meets the limits: " + "; ".join(
            f"{row.result.method} {row.result.status}" + (f" ({row.result.message})" if row.result.message else "")
            for row in rows))


# Methods whose "infeasible" is a proof (the exact backends and brute force; a DP's is not: it searches a subset).
PROVING_METHODS = ("cbc", "cpsat", "exhaustive")


def _value(result) -> str:
    if result.objective_value is None:
        return "-"
    return format_usd(result.objective_value) if result.objective == "cost" else format_duration(result.objective_value)


def comparison_table(rows: list[Comparison], title: str) -> Table:
    table = Table(title=title)  # notes on timeouts and refusals are printed below it
    for col in ("method", "status", "objective", "gap to best", "search time", "nodes", "tp/dp/pp", "micro-batch",
                "recompute", "balance"):
        table.add_column(col, justify="right" if col in ("objective", "gap to best", "search time") else "left")
    for row in rows:
        r = row.result
        gap = "-" if row.gap_to_best is None else f"{row.gap_to_best:.4%}"
        if r.plan is not None and r.estimate is not None:
            nodes = ", ".join(f"{n} x {name}" for name, n in sorted(r.estimate.nodes.items()))
            degrees = degrees_text(r.plan)
            mbs = f"{r.plan.micro_batch_size} (x{r.estimate.num_micro_batches})"
            recompute = recompute_text(r.plan)
            balance = r.plan.balance
        else:
            nodes = degrees = mbs = recompute = balance = "-"
        table.add_row(r.method, r.status, _value(r), gap, f"{r.solve_time_s:.2f} s", nodes, degrees, mbs, recompute,
                      balance)
    return table

