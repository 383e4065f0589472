"""Options shared by the commands that take a model and a cluster."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated, Optional

import typer

from optsearch.errors import InfeasibleError, SpecError
from optsearch.problem import Problem, build_problem

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Model catalog name (`optsearch catalog models`) or a YAML/JSON path.")
]
ClusterOpt = Annotated[
    str, typer.Option("--cluster", "-c", help="Cluster catalog name (`optsearch catalog clusters`) or a YAML/JSON path.")
]
ProfileOpt = Annotated[
    str,
    typer.Option(
        "--profile",
        "-p",
        help="Per-layer timings: 'analytic' (roofline from datasheets, the default) or a profile CSV/YAML path.",
    ),
]
# With a plan file: given beside it, these replace what the file records (and a difference is said on stderr).
PlanModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help="Model catalog name or a YAML/JSON path. With a plan file: default the model "
                                       "the file records (a different one given here is said on stderr)."),
]
PlanClusterOpt = Annotated[
    Optional[str],
    typer.Option("--cluster", "-c", help="Cluster catalog name or a YAML/JSON path. With a plan file: default the "
                                         "cluster the file records."),
]
PlanProfileOpt = Annotated[
    Optional[str],
    typer.Option("--profile", "-p", help="Per-layer timings: 'analytic' (the default) or a profile CSV/YAML path. "
                                         "With a plan file: default the profile the file records."),
]
# Upper limits: far beyond any training run (the spec fields have the same ones, optsearch/spec/job.py).
GlobalBatchOpt = Annotated[
    Optional[int],
    typer.Option("--global-batch-size", min=1, max=1_000_000, help="Override the job's global batch size."),
]
IterationsOpt = Annotated[
    Optional[int],
    typer.Option("--iterations", min=1, max=10**10, help="Override the training length in optimizer steps."),
]
TokensOpt = Annotated[
    Optional[int], typer.Option("--tokens", min=1, max=10**16, help="Override the training length in tokens.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]

# ---- a plan given by hand (`estimate` and `launch` without a plan file; estimate_cmd.hand_plan builds it) --------
DEGREE_MAX = 1_000_000  # tp, dp, pp, cp, ep, v and micro-batch: far beyond any cluster
_NO_FILE = "Without a plan file: "
TpOpt = Annotated[
    Optional[int], typer.Option(min=1, max=DEGREE_MAX, help=_NO_FILE + "tensor-parallel degree (same on every stage).")
]
DpOpt = Annotated[
    Optional[int], typer.Option(min=1, max=DEGREE_MAX, help=_NO_FILE + "data-parallel degree (same on every stage).")
]
PpOpt = Annotated[
    Optional[int], typer.Option(min=1, max=DEGREE_MAX, help="Pipeline stages (checked against the stages given or "
                                                            "the plan file's).")
]
MicroBatchOpt = Annotated[
    Optional[int], typer.Option("--micro-batch-size", min=1, max=DEGREE_MAX, help=_NO_FILE + "sequences per micro-batch.")
]
StagesOpt = Annotated[
    Optional[str],
    typer.Option(help=_NO_FILE + "stages in pipeline order: NODE_TYPE:LAYERS[:RECOMPUTE],... e.g. a100:12,a10:12:full"),
]
BalanceOpt = Annotated[
    Optional[str], typer.Option(help=_NO_FILE + "FASOP-fork partition, layers per stage, e.g. 0-11-8-8-8-8-5-0.")
]
LayoutOpt = Annotated[
    Optional[str],
    typer.Option(help=_NO_FILE + "upstream Megatron-LM --pipeline-model-parallel-layout, e.g. 'E|t*11|(t*8|)*4t*5|L'."),
]
NodeOrderOpt = Annotated[
    Optional[str],
    typer.Option(help="With --balance or --layout: node type per stage: one for all, one per stage, or runs like "
                      "a100*2,a10*6. Not needed on a cluster of one node type."),
]


def _recompute_help() -> str:
    from optsearch.plan import RECOMPUTE_MODES

    return f"With --balance or --layout: recomputation on every stage ({', '.join(RECOMPUTE_MODES)})."


RecomputeOpt = Annotated[str, typer.Option(help=_recompute_help())]
CpOpt = Annotated[
    Optional[int], typer.Option("--cp", min=1, max=DEGREE_MAX, help=_NO_FILE + "context-parallel degree (default 1): "
                                "each stage's sequence split over cp GPUs, tp x cp x dp GPUs per stage.")
]
EpOpt = Annotated[
    Optional[int], typer.Option("--ep", min=1, max=DEGREE_MAX, help=_NO_FILE + "expert-parallel size (mixture-of-"
                                "experts models; Megatron's --expert-model-parallel-size). Default 1."),
]
VirtualStagesOpt = Annotated[
    Optional[int], typer.Option("--virtual-stages", min=1, max=DEGREE_MAX,
                                help=_NO_FILE + "interleaved pipeline, V model chunks per stage (Megatron's virtual "
                                     "pipeline size). --stages and --balance give each stage's layers, a multiple of "
                                     "V; --layout gives V x pp virtual stages, chunk k of stage r at position k x pp + "
                                     "r, equal on a stage. Default 1."),
]
RecomputeNumLayersOpt = Annotated[
    Optional[int], typer.Option("--recompute-num-layers", min=1, max=DEGREE_MAX,
                                help=_NO_FILE + "block recomputation (--recompute-method block): the first N layers of "
                                     "every stage fully recomputed, the others not (a stage of N or fewer layers: "
                                     "all); N at most the most layers on a stage; --recompute may be left out or "
                                     "say full."),
]
DistributedOptimizerOpt = Annotated[
    Optional[bool],
    typer.Option("--distributed-optimizer/--no-distributed-optimizer",
                 help=_NO_FILE + "Megatron's distributed optimizer (--use-distributed-optimizer: optimizer states "
                                 "sharded over the dp x cp ranks). Default: on wherever dp x cp > 1 unless the job "
                                 "sets job.distributed_optimizer = false (costmodel.distributed_optimizer_on), what "
                                 "`solve` chooses except under --overlap-grad-reduce, where it may choose off "
                                 "(its plan then says no 'distributed optimizer': give --no-distributed-optimizer). "
                                 "Against what the job forces: refused.",
                 show_default=False),
]
def _headroom(value: float | None) -> float | None:
    # Checked here rather than with min/max: click's range check lets nan through to a "<= 0.9" message.
    if value is not None and not 0.0 <= value <= 0.9:
        raise SpecError(f"--memory-headroom = {str(value)!r}: must be a number from 0 to 0.9")  # as every other option
    return value


HeadroomOpt = Annotated[
    Optional[float],
    typer.Option("--memory-headroom", callback=_headroom,
                 help="Share (0 to 0.9) of each GPU's usable memory a plan must leave free (allocator fragmentation, transient "
                      "buffers); default 0.10. 0 packs memory to the brim. See docs/cost-model.md, section 9f."),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Edit the cluster, job or model, repeatable: node_types.NAME.FIELD=VALUE "
                               "(count = num_nodes_available), job.FIELD=VALUE, model.FIELD=VALUE, cluster.FIELD=VALUE."),
]
FlashAttentionOpt = Annotated[
    Optional[bool],
    typer.Option("--flash-attention/--no-flash-attention",
                 help="Upstream Megatron-LM runs Transformer Engine's flash attention by default (--attention-backend "
                      "auto: flash or cuDNN fused where the GPU has compute capability 8.0+ and the head dimension is "
                      "a multiple of 8 up to 256), so the default prices it there: no s x s attention scores stored "
                      "or moved, and the launch says --attention-backend flash. --no-flash-attention prices the "
                      "scores (stored under recompute none, moved every layer) and the launch says "
                      "--attention-backend unfused. The FASOP fork (--target fasop) has none: off. See "
                      "docs/cost-model.md section 14, \"Flash attention\".",
                 show_default=False),
]


OverlapGradReduceOpt = Annotated[
    Optional[bool],
    typer.Option("--overlap-grad-reduce/--no-overlap-grad-reduce",
                 help="Upstream Megatron-LM target: the plan runs Megatron's --overlap-grad-reduce wherever there is a "
                      "gradient exchange on the 1F1B schedule (dp x cp > 1, no interleaving, one layer kind), priced "
                      "as bucketed behind the last micro-batch's backward (docs/cost-model.md section 7c) and emitted "
                      "by launch. It never costs time or memory under the model, so it is the default; "
                      "--no-overlap-grad-reduce prices and launches the reduce exposed. With it come upstream "
                      "main's --overlap-param-gather (one-stage plans with the distributed optimizer) and "
                      "--ddp-average-in-collective (dp x cp > 1), which never lose either (docs/cost-model.md 7f, "
                      "8c); --no-overlap-grad-reduce turns those off too. See docs/targets.md, "
                      "\"Communication overlaps\".",
                 show_default=False),
]


PipelinedParamGatherOpt = Annotated[
    bool,
    typer.Option("--pipelined-param-gather",
                 help="Also try Megatron's --overlap-param-gather on pipelined plans (pp > 1, no interleaving, with "
                      "the distributed optimizer and --overlap-grad-reduce), priced at upstream main's dispatch: each "
                      "later stage's gather waits for its first micro-batch, so it can lose and the search tries both "
                      "settings. Off by default: it wins only on pipelines whose first stage holds far more "
                      "parameters than the rest, none of the benchmarked catalog optima takes it, and its candidate "
                      "copies slow the large "
                      "models' proofs. One-stage plans get the flag either way. See docs/cost-model.md 7f, "
                      "\"At pp > 1\".",
                 show_default=False),
]


def _targets_help() -> str:
    from optsearch.targets import FASOP, MEGATRON

    return ("The engine the plan is for; only plans it runs as emitted are searched. "
            + " ".join(t.summary() + "." for t in (MEGATRON, FASOP)) + " See docs/targets.md.")


TargetOpt = Annotated[str, typer.Option("--target", help=_targets_help())]


def space_from_target(target: str, problem: Problem):
    """The search space (SpaceOptions) of the engine target (targets.space_options), refusing models it cannot run, for a
    problem priced as that engine runs attention (targets.engine_problem): context parallelism only on the node types
    that run flash attention (targets.context_parallel_node_types)."""
    from optsearch.targets import get_target, space_options

    return space_options(get_target(target), problem)


def max_cp_note(max_cp: int, target: str, problem: Problem, options) -> str | None:
    """Why --max-cp asks for more than this solve can search, or None. options: the target's space before the cap.
    Like the other --max-* options a cap above what is possible is no error (nothing is left out), but the user
    asked for context-parallel sizes that will not be tried, so solve says why (a warning)."""
    from optsearch.candidates import context_parallel_candidates
    from optsearch.costmodel import context_parallel_error
    from optsearch.targets import context_parallel_attention_error, get_target

    runs = get_target(target).context_parallel_sizes
    searched = context_parallel_candidates(problem, options)
    largest = max(searched, default=1)
    if max_cp <= largest:
        return None
    if max(runs) == 1:
        why = f"the {target} target has no context parallelism"
    elif max_cp > max(runs) and largest == max(runs):
        why = f"the {target} target runs cp {', '.join(map(str, runs))}"
    elif options.context_parallel_sizes == (1,) and context_parallel_attention_error(problem) is not None:
        why = context_parallel_attention_error(problem)
    elif options.context_parallel_sizes == (1,):
        why = ("a measured or imported --profile table is searched at cp 1 only (its times are for the whole "
               "sequence, not s / cp tokens)")
    else:
        bigger = next(c for c in runs if c > largest)
        why = f"cp {bigger}: {context_parallel_error(problem.model, bigger)}"
    return f"--max-cp {max_cp}: the largest context-parallel size searched is {largest}; {why}"


def context_parallel_types_note(problem: Problem, options) -> str | None:
    """One line for solve when cp > 1 is searched on some of the cluster's node types only (targets.
    context_parallel_space: SpaceOptions.context_parallel_node_types, the types that run flash attention), naming
    them and why the others have cp 1 only; None where cp > 1 is not searched or every type has it."""
    from optsearch.candidates import context_parallel_candidates
    from optsearch.targets import context_parallel_attention_error

    types = options.context_parallel_node_types
    if types is None or max(context_parallel_candidates(problem, options), default=1) <= 1:
        return None
    others = [n.name for n in problem.cluster.node_types if n.name not in types]
    if not others:
        return None
    why = "; ".join(context_parallel_attention_error(problem, [n]) or f"node type {n} is left out" for n in others)
    return (f"cp > 1 is searched on {', '.join(types) or 'no node type'} only ({why}); "
            f"plans on {', '.join(others)} use cp 1")


def profile_coverage(problem: Problem, options=None) -> dict[str, str]:
    """Check the profile covers the cluster's node types before any search (optsearch.coverage): none covered is a
    ProfileError (exit 2); node types left out are said on stderr as a warning (always: it limits what the answer
    proves, it is no progress note) and returned, node type -> why."""
    from rich.markup import escape

    from optsearch.coverage import check_profile_coverage, coverage_note
    from optsearch.report import stderr

    left_out = check_profile_coverage(problem, options)
    if left_out:
        stderr.print(f"[yellow]warning:[/yellow] {escape(coverage_note(left_out, problem.profile.name))}; the answer "
                     "holds over the other node types only", highlight=False)
    return left_out


def problem_from_options(
    model: str,
    cluster: str,
    profile: str,
    global_batch_size: int | None,
    iterations: int | None,
    tokens: int | None,
    edits: list[str] | None = None,
    memory_headroom: float | None = None,
    target: str | None = None,
    flash_attention: bool | None = None,
    overlap_grad_reduce: bool | None = None,
    param_gather_pipelined: bool = False,
) -> Problem:
    """The problem the options describe; `--set` edits (optsearch.edits) apply before the job overrides. With a
    target, priced with that engine's attention (targets.engine_problem; flash_attention: --[no-]flash-attention)."""
    if edits:
        from optsearch.edits import edited_problem

        problem = edited_problem(model, cluster, edits, profile=profile, global_batch_size=global_batch_size,
                                 iterations=iterations, tokens=tokens)
    else:
        problem = build_problem(
            model, cluster, profile=profile, global_batch_size=global_batch_size, iterations=iterations, tokens=tokens
        )
    if memory_headroom is not None:
        problem = replace(problem, memory_headroom=memory_headroom)
    if target is not None:
        from optsearch.targets import engine_problem

        problem = engine_problem(target, problem, flash_attention, overlap_grad_reduce, param_gather_pipelined)
    elif param_gather_pipelined:
        raise SpecError("--pipelined-param-gather needs a target (upstream Megatron-LM: --target megatron)")
    return problem


class OutOfTime(InfeasibleError):
    """--time-limit ran out outside the solver (exit code 1, like a solve that found no plan in time)."""


@contextmanager
def time_limit_covers_setup(time_limit_s: float | None, option: str = "--time-limit"):
    """--time-limit bounds the whole command, not only the solver: the solver gets what is left after reading the
    specs (`left()`), and a set-up that runs past the limit (a Python loop over an enormous spec the limits let
    through) is stopped by an alarm a grace period later, as InfeasibleError (exit 1)."""
    start = time.monotonic()

    def left() -> float | None:
        if time_limit_s is None:
            return None
        remaining = time_limit_s - (time.monotonic() - start)
        if remaining <= 0:
            raise OutOfTime(f"no plan within {option} {time_limit_s:g} s: reading and setting up the problem "
                                  f"took {time.monotonic() - start:.3g} s; raise the limit")
        return remaining

    usable = (time_limit_s is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield left
        return
    grace_s = max(2.0, 0.25 * time_limit_s)

    def on_alarm(signum, frame):
        raise OutOfTime(f"no plan within {option} {time_limit_s:g} s: stopped after "
                              f"{time.monotonic() - start:.3g} s, before the search could finish setting up; raise "
                              "the limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit_s + grace_s)
    try:
        yield left
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
