"""`optsearch estimate`: price one plan given by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.options import (
    BalanceOpt, CpOpt, DistributedOptimizerOpt, DpOpt, EpOpt, GlobalBatchOpt, HeadroomOpt, IterationsOpt,
    JsonOpt, LayoutOpt, MicroBatchOpt, NodeOrderOpt, PlanClusterOpt, PlanModelOpt, PlanProfileOpt, PpOpt,
    RecomputeNumLayersOpt, RecomputeOpt, StagesOpt, TokensOpt, TpOpt, VirtualStagesOpt,
    FlashAttentionOpt, OverlapGradReduceOpt, problem_from_options,
)
from optsearch.costmodel import context_parallel_error, distributed_optimizer_on, estimate
from optsearch.errors import InfeasibleError, OptsearchError, SpecError, UnsupportedPlanError
from optsearch.plan import RECOMPUTE_MODES, Plan, load_plan, parse_balance, parse_stages
from optsearch.report import dumps, estimate_table, stderr, stdout, totals_table
from optsearch.targets import check_context_parallel_attention, check_context_parallel_profile, engine_problem

MAX_LAYOUT_EXPANSION = 1_000_000

EstimateTargetOpt = Annotated[
    Optional[str],
    typer.Option("--target", help="The engine the plan runs on, which sets how attention is priced: megatron "
                                  "(upstream Megatron-LM, the default: flash attention where Transformer Engine runs "
                                  "it) or fasop (the FASOP fork: none). With a plan file: default the target it "
                                  "records."),
]


@app.command("estimate")
def estimate_command(
    model: PlanModelOpt = None,
    cluster: PlanClusterOpt = None,
    profile: PlanProfileOpt = None,
    tp: TpOpt = None,
    dp: DpOpt = None,
    pp: PpOpt = None,
    micro_batch_size: MicroBatchOpt = None,
    stages: StagesOpt = None,
    balance: BalanceOpt = None,
    layout: LayoutOpt = None,
    node_order: NodeOrderOpt = None,
    recompute: RecomputeOpt = "none",
    cp: CpOpt = None,
    plan_file: Annotated[
        Optional[Path],
        typer.Option("--plan", help="A plan JSON file (as written by `solve --out`): priced on the model, cluster, "
                                    "profile and job it records, unless given here."),
    ] = None,
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    memory_headroom: HeadroomOpt = None,
    as_json: JsonOpt = False,
    ep: EpOpt = None,
    virtual_stages: VirtualStagesOpt = None,
    recompute_num_layers: RecomputeNumLayersOpt = None,
    distributed_optimizer: DistributedOptimizerOpt = None,
    target: EstimateTargetOpt = None,
    flash_attention: FlashAttentionOpt = None,
    overlap_grad_reduce: OverlapGradReduceOpt = None,
) -> None:
    """Price one plan: per-stage compute, p2p, gradient reduce (over dp x cp) and memory; iteration time, training
    time and USD.

    Exit code 1 when a stage does not fit in GPU memory by this estimate (the table or JSON is printed first, then
    one error line naming the worst stage; `launch` refuses such a plan), 2 on bad input, and 2 with nothing printed
    for a plan upstream Megatron-LM cannot run as `launch` refuses it: cp > 1 with a stage on a GPU (or head size)
    without flash attention, where upstream has no attention backend with context parallelism.
    """
    knobs = dict(tp=tp, dp=dp, micro_batch_size=micro_batch_size, stages=stages, balance=balance, layout=layout,
                 node_order=node_order, recompute=recompute, cp=cp, ep=ep, virtual_stages=virtual_stages,
                 recompute_num_layers=recompute_num_layers, distributed_optimizer=distributed_optimizer)
    if plan_file is not None:
        given = hand_plan_flags_given(knobs)
        if given:
            raise SpecError(f"--plan {plan_file}: the file gives the plan; drop {', '.join(given)}")
        plan, problem = plan_and_problem(plan_file, model, cluster, profile, global_batch_size, iterations, tokens)
        if pp is not None and pp != plan.pp:
            raise SpecError(f"--pp = {pp} but {plan_file} has {plan.pp} stages")
        if memory_headroom is not None:
            problem = replace(problem, memory_headroom=memory_headroom)
        if target is not None or flash_attention is not None or overlap_grad_reduce is not None:
            problem = engine_problem(target or recorded_target(plan_file), problem, flash_attention,
                                     overlap_grad_reduce)
        if overlap_grad_reduce is not None:  # else the file's own setting
            plan = with_search_overlap(problem, plan)
    else:
        require_model_and_cluster(model, cluster, "without --plan")
        problem = problem_from_options(model, cluster, profile or "analytic", global_batch_size, iterations, tokens,
                                       memory_headroom=memory_headroom, target=target or "megatron",
                                       flash_attention=flash_attention, overlap_grad_reduce=overlap_grad_reduce)
        plan = hand_plan(problem, pp=pp, **knobs)
    where = str(plan_file) if plan_file is not None else f"--cp {plan.cp}"
    check_context_parallel_profile(problem, plan, where)
    if context_parallel_error(problem.model, plan.cp) is None:  # else estimate names the model's rule
        try:  # as launch refuses it: nothing printed; a hand plan's advice is to drop its --cp, as launch's
            check_context_parallel_attention(problem, plan, where)
        except UnsupportedPlanError as ex:
            if plan_file is not None:
                raise
            raise UnsupportedPlanError(hand_plan_advice(str(ex), plan.cp)) from None
    est = estimate(problem, plan)
    if as_json:
        stdout.out(dumps({"plan": plan.to_dict(), **est.to_dict()}), end="", highlight=False)
    else:
        stdout.print(estimate_table(plan, est))
        stdout.print(totals_table(est))
    if not est.fits:  # as launch, which refuses the plan: exit 1 after the numbers
        from optsearch.megatron import memory_check

        raise InfeasibleError(f"does not fit in GPU memory: {memory_check(problem, plan)}; `launch` refuses this "
                              "plan (--allow-no-fit writes it anyway)")


def recorded_target(plan_file: Path) -> str:
    """The target a plan file was solved for (`problem.target`), megatron when it records none."""
    from optsearch.planfile import read_plan_file

    record = read_plan_file(plan_file).get("problem")
    target = record.get("target") if isinstance(record, dict) else None
    return target if isinstance(target, str) else "megatron"


# The hand-plan flags (options.py) a plan file replaces, in the order a refusal names them.
HAND_PLAN_FLAGS = (("--stages", "stages"), ("--balance", "balance"), ("--layout", "layout"), ("--tp", "tp"),
                   ("--dp", "dp"), ("--micro-batch-size", "micro_batch_size"), ("--node-order", "node_order"),
                   ("--ep", "ep"), ("--cp", "cp"), ("--virtual-stages", "virtual_stages"),
                   ("--recompute-num-layers", "recompute_num_layers"))


def hand_plan_flags_given(knobs: dict) -> list[str]:
    """The hand-plan flags given (beside a plan file they are refused: the file gives the plan)."""
    given = [flag for flag, key in HAND_PLAN_FLAGS if knobs[key] is not None]
    if knobs["recompute"] != "none":
        given.append("--recompute")
    if knobs["distributed_optimizer"] is not None:
        given.append("--distributed-optimizer" if knobs["distributed_optimizer"] else "--no-distributed-optimizer")
    return given


def hand_plan(problem, *, pp=None, tp=None, dp=None, micro_batch_size=None, stages=None, balance=None, layout=None,
              node_order=None, recompute="none", cp=None, ep=None, virtual_stages=None, recompute_num_layers=None,
              distributed_optimizer=None) -> Plan:
    """The plan `estimate` and `launch` are given by hand (the options of options.py). The distributed optimizer
    defaults to the search's choice for the job, dp and cp (costmodel.distributed_optimizer_on), so a plan given with
    the knobs `solve` chose is the plan it wrote; a setting against what the job forces is refused."""
    plan = _plan_from_options(tp, dp, pp, micro_batch_size, stages, balance, node_order, recompute, None,
                              layout=layout, cluster=problem.cluster, cp=cp,
                              virtual_stages=virtual_stages, recompute_num_layers=recompute_num_layers)
    dist = _distributed_optimizer(problem.job, plan.dp, plan.cp, distributed_optimizer)
    _check_block_range(problem, plan, "--recompute-num-layers ")
    return with_search_overlap(problem, replace(plan, distributed_optimizer=dist, **({"ep": ep} if ep is not None else {})))


def with_search_overlap(problem, plan: Plan) -> Plan:
    """The plan with --overlap-grad-reduce as the search sets it for the problem (costmodel.overlap_grad_reduce_on:
    on for the megatron target where valid unless --no-overlap-grad-reduce), so a hand plan with solve's knobs is the
    plan solve wrote."""
    from optsearch.costmodel import ddp_average_on, overlap_grad_reduce_on, overlap_param_gather_on

    on = overlap_grad_reduce_on(problem, plan.dp, plan.cp, plan.virtual_stages)
    gather = overlap_param_gather_on(problem, plan.dp, plan.cp, plan.virtual_stages, plan.pp,
                                     plan.distributed_optimizer)  # --overlap-param-gather too (section 7f)
    return replace(plan, overlap_grad_reduce=on, overlap_param_gather=(plan.overlap_param_gather and on) or gather,
                   ddp_average_in_collective=ddp_average_on(problem, plan.dp, plan.cp))


def _check_block_range(problem, plan: Plan, name: str) -> None:
    """Refuse block recomputation's N above the most layers of one kind on any stage (costmodel.block_recompute_error;
    once the stages cover the model, else check_plan names that first)."""
    from optsearch.costmodel import block_recompute_error

    if plan.recompute_num_layers is None or sum(s.num_layers for s in plan.stages) != problem.model.num_layers:
        return
    why = block_recompute_error(problem.model, plan)
    if why is not None:
        raise SpecError(f"{name}{why}")


def _distributed_optimizer(job, dp: int, cp: int, given: bool | None) -> bool:
    chosen = distributed_optimizer_on(job, dp, cp)
    if given is None:
        return chosen
    if given and job.distributed_optimizer is False:
        raise SpecError("--distributed-optimizer: the job sets distributed_optimizer = false (off for every plan); "
                        "drop one of them")
    if not given and job.distributed_optimizer is True and dp * cp > 1:
        raise SpecError(f"--no-distributed-optimizer: the job sets distributed_optimizer = true (on wherever dp x cp "
                        f"> 1; here dp {dp} x cp {cp}); drop one of them")
    return given


def require_model_and_cluster(model: str | None, cluster: str | None, when: str) -> None:
    missing = [n for n, v in (("--model", model), ("--cluster", cluster)) if v is None]
    if missing:
        raise SpecError(f"missing {' and '.join(missing)} ({when}; a plan file written by `solve --out` records them)")


def plan_and_problem(plan_file: Path, model, cluster, profile, global_batch_size=None, iterations=None, tokens=None,
                     plan_reader=None):
    """The plan in a plan file and the problem it is priced on (optsearch.planfile): the recorded one, or the --model
    / --cluster / --profile given (a difference from the recorded one is said on stderr). Its derived fields (nodes,
    balance, num_micro_batches, stages[].gpu) must agree with its stages."""
    from optsearch.planfile import check_derived_fields, load_plan_file, problem_for_plan

    plan, data = load_plan_file(plan_file, plan_reader) if plan_reader else load_plan_file(plan_file)

    def warn(line: str) -> None:
        stderr.print(f"[yellow]warning:[/yellow] {line}", highlight=False)

    problem, replaced = problem_for_plan(data, str(plan_file), model=model, cluster=cluster, profile=profile,
                                         global_batch_size=global_batch_size, iterations=iterations, tokens=tokens,
                                         warn=warn)
    check_derived_fields(data, plan, problem, str(plan_file), replaced)
    _check_block_range(problem, plan, f"{plan_file}: recompute_num_layers = ")
    return plan, problem


def _plan_from_options(tp, dp, pp, mbs, stages, balance, node_order, recompute, plan_file, layout=None,
                       cluster=None, cp=None, virtual_stages=None, recompute_num_layers=None) -> Plan:
    """The plan the options give. With --balance or --layout on a cluster of one node type, --node-order defaults to
    that type. --virtual-stages V: interleaved (a --layout then lists V x pp virtual stages); --recompute-num-layers N:
    block recomputation, "full" on every stage with layers."""
    v = virtual_stages or 1
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
        if stages is not None:
            stray = [n for n, v in (("--node-order", node_order), ("--recompute", recompute != "none")) if v]
            if stray:
                raise SpecError(f"{', '.join(stray)} goes with --balance or --layout; --stages gives each stage's node "
                                "type and recomputation (NODE_TYPE:LAYERS[:RECOMPUTE])")
        if balance is not None or layout is not None:
            if node_order is None and cluster is not None and len(cluster.node_types) == 1:
                node_order = cluster.node_types[0].name
            if node_order is None:
                raise SpecError(f"{given[0]} needs --node-order (the node type of each stage)")
            if recompute not in RECOMPUTE_MODES:
                raise SpecError(f"--recompute = {recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
            if layout is not None:
                import re

                from optsearch.megatron import layout_stages

                # bound the expansion before it is made ('t*10**14' filled memory)
                counts = [int(n) for n in re.findall(r"\*\s*(\d+)", layout)]
                if _layout_expansion_chars(layout) > MAX_LAYOUT_EXPANSION:
                    raise SpecError(f"--layout = {layout!r}: repeat counts {counts} could expand to more than "
                                    f"{MAX_LAYOUT_EXPANSION:,} layers")

                parsed = (layout_stages(layout, node_order, recompute) if v == 1  # type: ignore[arg-type]
                          else _interleaved_layout_stages(layout, node_order, recompute, v))
            else:
                parsed = parse_balance(balance, node_order, recompute)  # type: ignore[arg-type]
        else:
            parsed = parse_stages(stages)  # type: ignore[arg-type]
        parsed = _knob_stages(parsed, v, recompute_num_layers, recompute)
        # the distributed optimizer: set by hand_plan (the search's choice or --distributed-optimizer)
        plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=parsed, cp=cp or 1, virtual_stages=v, recompute_num_layers=recompute_num_layers)
    if pp is not None and pp != plan.pp:
        raise SpecError(f"--pp = {pp} but {plan.pp} stages were given")
    return plan


def _interleaved_layout_stages(layout: str, node_order: str, recompute, v: int):
    """A --layout of v x pp virtual stages (upstream's order: chunk k of rank r at k pp + r) -> the pp stages, each
    holding its v equal chunks."""
    from optsearch.megatron import _fold_chunks, parse_layout

    counts = parse_layout(layout, option="--layout")
    if len(counts) % v:
        raise SpecError(f"--layout = {layout!r}: {len(counts)} virtual stages; with --virtual-stages {v} it must list "
                        f"{v} x pp of them (chunk k of stage r at position k x pp + r)")
    try:
        folded = _fold_chunks(counts, len(counts) // v)
    except OptsearchError as err:
        raise SpecError(str(err).replace("megatron arguments: --pipeline-model-parallel-layout gives",
                                         f"--layout = {layout!r}:")) from None
    try:
        return parse_balance("-".join(map(str, folded)), node_order, recompute)
    except SpecError as err:
        raise SpecError(str(err).replace("--balance", "--layout")) from None


def _knob_stages(stages, v: int, recompute_num_layers: int | None, recompute):
    """Check the stages against --virtual-stages and --recompute-num-layers (one line naming the flag and the rule);
    under block recomputation every stage with layers says full, an empty one none."""
    if v > 1:
        for i, stage in enumerate(stages):
            if stage.num_layers % v:
                raise SpecError(f"--virtual-stages {v}: stage {i} holds {stage.num_layers} layers, not a multiple of "
                                f"{v} (each stage's layers split into {v} equal chunks)")
    if recompute_num_layers is None:
        return stages
    if v > 1:
        raise SpecError(f"--recompute-num-layers {recompute_num_layers} with --virtual-stages {v}: Megatron-LM applies "
                        "block recomputation to each model chunk, which optsearch does not price; drop one of them")
    if recompute not in ("none", "full"):
        raise SpecError(f"--recompute-num-layers {recompute_num_layers} with --recompute {recompute}: block "
                        "recomputation is full recomputation of the first N layers of every stage; drop --recompute "
                        "or say full")
    for i, stage in enumerate(stages):
        if stage.num_layers > 0 and stage.recompute == "selective":
            raise SpecError(f"--recompute-num-layers {recompute_num_layers}: stage {i} says selective; block "
                            "recomputation is full recomputation of the first N layers of every stage")
    return tuple(replace(s, recompute="full" if s.num_layers > 0 else "none") for s in stages)


def _layout_expansion_chars(layout: str) -> int:
    """Characters the layout unrolls to (megatron.parse_layout's two passes: '(...)*n', then 'x*n'), computed without
    unrolling more than MAX_LAYOUT_EXPANSION characters; more than that is returned as soon as it is known. (The
    product of all repeat counts, used before, refused layouts of many short repeated stages, such as the v x pp
    virtual stages of an interleaved plan.)"""
    from optsearch.megatron import _CHAR_REPEAT, _PAREN_REPEAT

    text = layout.strip().replace(",", "").replace(" ", "")
    for pattern in (_PAREN_REPEAT, _CHAR_REPEAT):
        size = len(text) + sum(len(m.group(1)) * int(m.group(2)) - len(m.group(0)) for m in pattern.finditer(text))
        if size > MAX_LAYOUT_EXPANSION:
            return size
        text = pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)
    return len(text)


def hand_plan_advice(message: str, cp: int) -> str:
    """A refusal's advice for a hand-given plan: its cp is the user's --cp, so the solver's re-plan advice becomes
    dropping it."""
    for advice in ("re-plan with --max-cp 1", "re-plan with --target fasop (cp = 1)"):
        message = message.replace(advice, f"drop --cp {cp}")
    return message
