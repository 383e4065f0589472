"""`optsearch launch`: turn a plan into the Megatron-LM arguments and launch scripts that run it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from optsearch.cli import app
from optsearch.cli.estimate_cmd import _plan_from_options, plan_and_problem, require_model_and_cluster
from optsearch.cli.options import GlobalBatchOpt, IterationsOpt, PlanClusterOpt, PlanModelOpt, PlanProfileOpt, TokensOpt
from optsearch.errors import SpecError
from optsearch.megatron import DEFAULT_MASTER_PORT, LAUNCH_FORMATS, launch_files, plan_for_launch
from optsearch.plan import RECOMPUTE_MODES
from optsearch.problem import build_problem
from optsearch.report import _umask, check_output_folder, stderr, stdout, write_atomic

FORMAT_HELP = (
    "megatron: upstream Megatron-LM main arguments (megatron_args.sh; plans of `solve --target megatron`); fasop: the "
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
    fmt: Annotated[str, typer.Option("--format", "-f", help=FORMAT_HELP)] = "megatron",
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write the files into this folder (created if missing; files replaced "
                                         "atomically). Without it, print them to stdout."),
    ] = None,
    tp: Annotated[Optional[int], typer.Option(min=1, help="Without PLAN.json: tensor-parallel degree.")] = None,
    dp: Annotated[Optional[int], typer.Option(min=1, help="Without PLAN.json: data-parallel degree.")] = None,
    micro_batch_size: Annotated[
        Optional[int], typer.Option(min=1, help="Without PLAN.json: sequences per micro-batch.")
    ] = None,
    stages: Annotated[
        Optional[str], typer.Option(help="Without PLAN.json: stages as NODE_TYPE:LAYERS[:RECOMPUTE],...")
    ] = None,
    balance: Annotated[
        Optional[str], typer.Option(help="Without PLAN.json: FASOP-fork partition, e.g. 0-11-8-8-8-8-5-0.")
    ] = None,
    layout: Annotated[
        Optional[str],
        typer.Option(help="Without PLAN.json: upstream --pipeline-model-parallel-layout, e.g. 'E|t*11|(t*8|)*4t*5|L'."),
    ] = None,
    node_order: Annotated[
        Optional[str], typer.Option(help="With --balance or --layout: node type per stage (a10, or a100*1,a10*7).")
    ] = None,
    recompute: Annotated[
        str, typer.Option(help=f"With --balance or --layout: recomputation on every stage ({', '.join(RECOMPUTE_MODES)}).")
    ] = "none",
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
    ep: Annotated[
        Optional[int], typer.Option("--ep", min=1, max=1_000_000,
                                    help="Without PLAN.json: expert-parallel size (mixture-of-experts models; "
                                         "Megatron's --expert-model-parallel-size). Default 1."),
    ] = None,
) -> None:
    """Emit what launches the plan on Megatron-LM: arguments, partition strings, torchrun and Slurm scripts."""
    if fmt not in LAUNCH_FORMATS:
        raise SpecError(f"--format = {fmt!r}: must be one of {', '.join(LAUNCH_FORMATS)}")
    check_output_folder(out, "--out")  # before any work
    if plan_file is not None:
        given = [n for n, v in (("--tp", tp), ("--dp", dp), ("--micro-batch-size", micro_batch_size),
                                ("--stages", stages), ("--balance", balance), ("--layout", layout),
                                ("--node-order", node_order), ("--ep", ep)) if v is not None]
        if given:
            raise SpecError(f"{plan_file}: the plan file gives the plan; drop {', '.join(given)}")
        plan, problem = plan_and_problem(plan_file, model, cluster, profile, global_batch_size, iterations, tokens,
                                         plan_reader=plan_for_launch)
    else:
        require_model_and_cluster(model, cluster, "without PLAN.json")
        problem = build_problem(model, cluster, profile=profile or "analytic", global_batch_size=global_batch_size,
                                iterations=iterations, tokens=tokens)
        plan = _plan_from_options(tp, dp, None, micro_batch_size, stages, balance, node_order, recompute, None,
                                  layout=layout, cluster=problem.cluster, job=problem.job)
        if ep is not None:
            plan = replace(plan, ep=ep)
    files, notes = launch_files(problem, plan, fmt, allow_recompute_superset=recompute_superset,
                                master_port=master_port, allow_no_fit=allow_no_fit)
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
