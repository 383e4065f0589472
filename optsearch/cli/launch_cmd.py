"""`optsearch launch`: turn a plan into the Megatron-LM arguments and launch scripts that run it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.estimate_cmd import (
    hand_plan, hand_plan_advice, hand_plan_flags_given, plan_and_problem, require_model_and_cluster, with_search_overlap,
)
from optsearch.cli.options import (
    BalanceOpt, CpOpt, DistributedOptimizerOpt, DpOpt, EpOpt, GlobalBatchOpt, IterationsOpt, LayoutOpt, MicroBatchOpt,
    NodeOrderOpt, PlanClusterOpt, PlanModelOpt, PlanProfileOpt, PpOpt, RecomputeNumLayersOpt, RecomputeOpt, StagesOpt,
    TokensOpt, TpOpt, VirtualStagesOpt, FlashAttentionOpt, OverlapGradReduceOpt,
)
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.megatron import DEFAULT_MASTER_PORT, LAUNCH_FORMATS, launch_files, plan_for_launch
from optsearch.problem import build_problem
from optsearch.report import _umask, check_output_folder, stderr, stdout, write_atomic
from optsearch.targets import check_context_parallel_profile, engine_problem

FORMAT_HELP = (
    "megatron: upstream Megatron-LM main arguments (megatron_args.sh; plans of `solve --target megatron`; a bf16 job "
    "with a stage on a GPU older than compute capability 8.0, which has no bf16, gets --fp16 and a note); fasop: the "
    "FASOP fork's _00_conf.sh settings with MODEL, NPROC_PER_NODE, the node order and --balance (fasop_conf.sh; plans "
    "of `solve --target fasop`); torchrun: megatron_args.sh + torchrun.sh (one torchrun line per node) + hostfile; "
    "slurm: megatron_args.sh + torchrun.sh + job.sbatch (one hetjob component per run of same-type stages)."
)


@app.command("launch")
def launch_command(
    plan_file: Annotated[
        Optional[Path], typer.Argument(metavar="[PLAN.json]", help="A plan JSON file (as written by `solve --out`).")
    ] = None,
    model: PlanModelOpt = None,
    cluster: PlanClusterOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar=f"[{'|'.join(LAUNCH_FORMATS)}]", help=FORMAT_HELP)] = "megatron",
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write the files into this folder (created if missing; files replaced "
                                         "atomically). Without it, print them to stdout."),
    ] = None,
    tp: TpOpt = None,
    dp: DpOpt = None,
    pp: PpOpt = None,
    micro_batch_size: MicroBatchOpt = None,
    stages: StagesOpt = None,
    balance: BalanceOpt = None,
    layout: LayoutOpt = None,
    node_order: NodeOrderOpt = None,
    recompute: RecomputeOpt = "none",
    recompute_superset: Annotated[
        bool,
        typer.Option(help="If stages mix recomputation modes (Megatron-LM sets one for all), launch the least "
                          "recomputation covering every stage instead of refusing."),
    ] = False,
    allow_no_fit: Annotated[
        bool,
        typer.Option("--allow-no-fit", help="Write the files even when optsearch's own estimate says a stage does not "
                                            "fit in GPU memory (refused otherwise); a warning goes into them."),
    ] = False,
    master_port: Annotated[
        int, typer.Option(min=1, max=65535, help="torchrun --master-port (torchrun and slurm formats).")
    ] = DEFAULT_MASTER_PORT,
    profile: PlanProfileOpt = None,
    global_batch_size: GlobalBatchOpt = None,
    iterations: IterationsOpt = None,
    tokens: TokensOpt = None,
    ep: EpOpt = None,
    cp: CpOpt = None,
    virtual_stages: VirtualStagesOpt = None,
    recompute_num_layers: RecomputeNumLayersOpt = None,
    distributed_optimizer: DistributedOptimizerOpt = None,
    flash_attention: FlashAttentionOpt = None,
    overlap_grad_reduce: OverlapGradReduceOpt = None,
) -> None:
    """Emit what launches the plan on Megatron-LM: arguments, partition strings, torchrun and Slurm scripts."""
    if fmt not in LAUNCH_FORMATS:
        raise SpecError(f"--format = {fmt!r}: must be one of {', '.join(LAUNCH_FORMATS)}")
    check_output_folder(out, "--out")  # before any work
    knobs = dict(tp=tp, dp=dp, micro_batch_size=micro_batch_size, stages=stages, balance=balance, layout=layout,
                 node_order=node_order, recompute=recompute, cp=cp, ep=ep, virtual_stages=virtual_stages,
                 recompute_num_layers=recompute_num_layers, distributed_optimizer=distributed_optimizer)
    if plan_file is not None:
        given = hand_plan_flags_given(knobs)
        if given:
            raise SpecError(f"{plan_file}: the plan file gives the plan; drop {', '.join(given)}")
        plan, problem = plan_and_problem(plan_file, model, cluster, profile, global_batch_size, iterations, tokens,
                                         plan_reader=plan_for_launch)
        if pp is not None and pp != plan.pp:
            raise SpecError(f"--pp = {pp} but {plan_file} has {plan.pp} stages")
        if flash_attention is not None or overlap_grad_reduce is not None:  # else as the file was solved for
            problem = engine_problem("fasop" if fmt == "fasop" else "megatron", problem, flash_attention,
                                     overlap_grad_reduce)
        if overlap_grad_reduce is not None:
            plan = with_search_overlap(problem, plan)
    else:
        require_model_and_cluster(model, cluster, "without PLAN.json")
        problem = build_problem(model, cluster, profile=profile or "analytic", global_batch_size=global_batch_size,
                                iterations=iterations, tokens=tokens)
        problem = engine_problem("fasop" if fmt == "fasop" else "megatron", problem, flash_attention,
                                 overlap_grad_reduce)
        plan = hand_plan(problem, pp=pp, **knobs)
    check_context_parallel_profile(problem, plan, str(plan_file) if plan_file is not None else f"--cp {plan.cp}")
    try:
        files, notes = launch_files(problem, plan, fmt, allow_recompute_superset=recompute_superset,
                                    master_port=master_port, allow_no_fit=allow_no_fit,
                                    out_dir=None if out is None else str(out))
    except UnsupportedPlanError as ex:
        if plan_file is not None:
            raise
        raise UnsupportedPlanError(hand_plan_advice(str(ex), plan.cp)) from None
    if out is None:  # the printed files carry the notes as comments: not again on stderr
        for i, (name, text) in enumerate(files.items()):
            if len(files) > 1:
                stdout.out(("\n" if i else "") + f"# ==> {name} <==", highlight=False)
            stdout.out(text, end="", highlight=False)
        return
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out}: exists and is not a folder")
    for note in notes:
        stderr.print(f"note: {note}", highlight=False, markup=False)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = out / name
        write_atomic(path, text)
        if name.endswith((".sh", ".sbatch")):  # scripts are executable, as far as the umask lets them be
            os.chmod(path, 0o777 & ~_umask())
        stderr.print(f"wrote {path}", highlight=False, markup=False)
