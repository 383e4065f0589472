"""Options shared by the commands that take a model and a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Optional

import typer

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
GlobalBatchOpt = Annotated[
    Optional[int], typer.Option("--global-batch-size", min=1, help="Override the job's global batch size.")
]
IterationsOpt = Annotated[
    Optional[int], typer.Option("--iterations", min=1, help="Override the training length in optimizer steps.")
]
TokensOpt = Annotated[Optional[int], typer.Option("--tokens", min=1, help="Override the training length in tokens.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
HeadroomOpt = Annotated[
    Optional[float],
    typer.Option("--memory-headroom", min=0.0, max=0.9,
                 help="Share of each GPU's usable memory a plan must leave free (allocator fragmentation, transient "
                      "buffers); default 0.10. 0 packs memory to the brim. See docs/cost-model.md, section 9f."),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Edit the cluster, job or model, repeatable: node_types.NAME.FIELD=VALUE "
                               "(count = num_nodes_available), job.FIELD=VALUE, model.FIELD=VALUE, cluster.FIELD=VALUE."),
]
TargetOpt = Annotated[
    str,
    typer.Option("--target", help="The engine the plan is for; only plans it runs as emitted are searched. megatron: "
                                  "upstream Megatron-LM main (one recomputation mode for all stages, T5 without "
                                  "pipeline parallelism); fasop: FASOP's fork (its three models, node types in the "
                                  "cluster's order, one GPU count per node). See docs/launch.md."),
]


def space_from_target(target: str, problem: Problem):
    """The search space (SpaceOptions) of the engine target (optsearch.targets), refusing models it cannot run."""
    from optsearch.targets import get_target, space_options

    return space_options(get_target(target), problem)


def problem_from_options(
    model: str,
    cluster: str,
    profile: str,
    global_batch_size: int | None,
    iterations: int | None,
    tokens: int | None,
    edits: list[str] | None = None,
    memory_headroom: float | None = None,
) -> Problem:
    """The problem the options describe; `--set` edits (optsearch.edits) apply before the job overrides."""
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
    return problem
