"""`optsearch estimate`: price one plan given by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.options import (
    ClusterOpt, GlobalBatchOpt, IterationsOpt, JsonOpt, ModelOpt, ProfileOpt, TokensOpt, problem_from_options,
    HeadroomOpt,
)
from optsearch.costmodel import estimate
from optsearch.errors import SpecError
from optsearch.plan import RECOMPUTE_MODES, Plan, load_plan, parse_balance, parse_stages
from optsearch.report import dumps, estimate_table, stdout, totals_table


@app.command("estimate")
def estimate_command(
    model: ModelOpt,
    cluster: ClusterOpt,
    profile: ProfileOpt = "analytic",
    tp: Annotated[Optional[int], typer.Option(min=1, help="Tensor-parallel degree (same on every stage).")] = None,
    dp: Annotated[Optional[int], typer.Option(min=1, help="Data-parallel degree (same on every stage).")] = None,
    pp: Annotated[Optional[int], typer.Option(min=1, help="Pipeline stages (checked against the stages given).")] = None,
    micro_batch_size: Annotated[Optional[int], typer.Option(min=1, help="Sequences per micro-batch.")] = None,
    stages: Annotated[
        Optional[str],
        typer.Option(help="Stages in pipeline order: NODE_TYPE:LAYERS[:RECOMPUTE],... e.g. a100:12,a10:12:full"),
    ] = None,
    balance: Annotated[
        Optional[str], typer.Option(help="FASOP-fork partition, layers per stage, e.g. 0-11-8-8-8-8-5-0.")
    ] = None,
    layout: Annotated[
        Optional[str],
        typer.Option(help="Upstream Megatron-LM --pipeline-model-parallel-layout, e.g. 'E|t*11|(t*8|)*4t*5|L'."),
    ] = None,
    node_order: Annotated[
        Optional[str],
        typer.Option(
            help="With --balance or --layout: node type per stage: one for all, one per stage, or runs like a100*2,a10*6."
        ),
    ] = None,
    recompute: Annotated[
        str, typer.Option(help=f"With --balance or --layout: recomputation on every stage ({', '.join(RECOMPUTE_MODES)}).")
    ] = "none",
    plan_file: Annotated[
        Optional[Path], typer.Option("--plan", help="A plan JSON file (as written by `solve --out`).")
    ] = None,
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    memory_headroom: HeadroomOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price one plan: per-stage compute, p2p, DP all-reduce and memory; iteration time, training time and USD."""
    problem = problem_from_options(model, cluster, profile, global_batch_size, iterations, tokens,
                                   memory_headroom=memory_headroom)
    plan = _plan_from_options(tp, dp, pp, micro_batch_size, stages, balance, node_order, recompute, plan_file,
                              layout=layout)
    est = estimate(problem, plan)
    if as_json:
        stdout.out(dumps({"plan": plan.to_dict(), **est.to_dict()}), end="", highlight=False)
        return
    stdout.print(estimate_table(plan, est))
    stdout.print(totals_table(est))


def _plan_from_options(tp, dp, pp, mbs, stages, balance, node_order, recompute, plan_file, layout=None) -> Plan:
    given = [n for n, v in (("--stages", stages), ("--balance", balance), ("--layout", layout), ("--plan", plan_file)) if v]
    if len(given) != 1:
        raise SpecError(
            "give the stages with exactly one of --stages, --balance or --layout (with --node-order) or --plan"
        )
    if plan_file is not None:
        plan = load_plan(plan_file)
        overrides = {k: v for k, v in (("tp", tp), ("dp", dp), ("micro_batch_size", mbs)) if v is not None}
        if overrides:
            raise SpecError(f"--plan: give tp, dp and micro-batch size in the file, not as options ({', '.join(overrides)})")
    else:
        missing = [n for n, v in (("--tp", tp), ("--dp", dp), ("--micro-batch-size", mbs)) if v is None]
        if missing:
            raise SpecError(f"missing {', '.join(missing)} (needed with --stages, --balance or --layout)")
        if balance is not None or layout is not None:
            if node_order is None:
                raise SpecError(f"{given[0]} needs --node-order (the node type of each stage)")
            if recompute not in RECOMPUTE_MODES:
                raise SpecError(f"--recompute = {recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
            if layout is not None:
                from optsearch.megatron import layout_stages

                parsed = layout_stages(layout, node_order, recompute)  # type: ignore[arg-type]
            else:
                parsed = parse_balance(balance, node_order, recompute)  # type: ignore[arg-type]
        else:
            parsed = parse_stages(stages)  # type: ignore[arg-type]
        plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=parsed)
    if pp is not None and pp != plan.pp:
        raise SpecError(f"--pp = {pp} but {plan.pp} stages were given")
    return plan
