"""The discrete choices every search method shares, and the one definition of the search space.

The search space (solver, exhaustive and DP baselines alike):
  * tp: a power of two dividing the attention heads and the key/value heads, at most the GPUs per node of every
    node type used (tensor parallelism stays inside a node);
  * dp >= 1 and micro-batch b from MICRO_BATCH_SIZES with dp x b dividing the global batch;
  * ep (mixture-of-experts models only; else 1) dividing dp and every expert layer's expert count, as upstream's
    validation requires (ep_candidates);
  * pp stages in order, each with a node type, a layer count (>= 1, except that the first and last stage may
    hold 0 layers: only the embedding or only the head) and a recomputation mode;
  * whole nodes: with w = tp x dp GPUs per stage, a node type is usable only if w is a multiple of its GPUs per
    node (a stage fills w / gpn nodes) or divides it (gpn / w consecutive stages share a node); every node
    rented is filled. (`optsearch estimate` also prices plans outside this space, e.g. half-used nodes.)
  * nodes rented per type <= available; every stage fits in GPU memory; the budgets hold.
An engine target (targets.py) narrows the space to what that engine runs: one recomputation mode on every stage
that holds layers (uniform_recompute), node types along the pipeline in a fixed order (node_type_order), one number
of GPUs per node on every node used (same_gpus_per_node), and at most max_stages stages.
Interleaved pipeline (virtual_stages): one v for the whole plan from the allowed set; v > 1 only where
interleaving_allowed (pp > 1, micro-batches a multiple of pp, one layer kind) and every stage's layers a multiple of v.
A (gpu, layer kind, tp, b) missing from the profile makes that node type unusable for that candidate.
Context parallelism (cp > 1, plan-wide): only on the node types context_parallel_node_types names, where set (the
megatron target: the types that run flash attention).

The library's default, SpaceOptions(), is the generic space (no engine target: recomputation per stage, no cp, no
interleaving, no block recomputation), priced on a problem as build_problem makes it (no flash attention). What
`optsearch solve --target megatron` searches is targets.target_space (the problem priced with upstream's attention,
targets.engine_problem, and the space targets.space_options derives from it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optsearch.plan import RECOMPUTE_MODES, Plan, Recompute, Stage
from optsearch.problem import Problem
from optsearch.spec import NodeTypeSpec
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND

MICRO_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpaceOptions:
    micro_batch_sizes: tuple[int, ...] = MICRO_BATCH_SIZES
    recompute_modes: tuple[Recompute, ...] = RECOMPUTE_MODES
    max_stages: int | None = None  # default: layers + 2
    # One recomputation mode on every stage that holds layers (Megatron-LM applies --recompute-* to all stages);
    # stages without layers recompute nothing. False: each stage picks its own mode (no engine runs that as is).
    uniform_recompute: bool = False
    # Node types must appear along the pipeline in this order (types not named: not used); None: any order.
    node_type_order: tuple[str, ...] | None = None
    # Every node type used has the same GPUs per node (a launcher with one --nproc-per-node for all nodes).
    same_gpus_per_node: bool = False
    # Block recomputation (plan.recompute_num_layers = N >= 1: the first N layers of every stage fully recomputed,
    # the rest none), a plan-wide alternative to the modes; only with uniform_recompute (the target's one setting).
    block_recompute: bool = False
    # With pp > 1 no stage holds layers of two kinds (FASOP's fork runs each stage wholly encoder or decoder: stages
    # below --pipeline-model-parallel-split-rank run the encoder).
    kinds_split_at_stages: bool = False
    # Expert-parallel sizes the search may choose (mixture-of-experts models); None: every size upstream allows.
    expert_parallel_sizes: tuple[int, ...] | None = None
    # Context-parallel sizes searched (issue 16): (1,) = none; the megatron target adds 2, 4, 8 where the model
    # allows them (context_parallel_candidates).
    context_parallel_sizes: tuple[int, ...] = (1,)
    # Interleaved pipeline: the model chunks per pipeline rank v the search may choose (plan-wide); (1,): none.
    virtual_stages: tuple[int, ...] = (1,)
    # The node types that may hold a stage of a cp > 1 plan (node_uses); None: every type. The megatron target sets
    # it to the types that run flash attention (targets.space_options): upstream's unfused attention has no context
    # parallelism, and cp is one plan-wide value, so a cp > 1 plan runs on those types only (issue 15).
    context_parallel_node_types: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeUse:
    """How a usable node type is used at w GPUs per stage: a block of `stages_per_block` stages fills
    `nodes_per_block` whole nodes."""

    node: NodeTypeSpec
    stages_per_block: int
    nodes_per_block: int

    @property
    def name(self) -> str:
        return self.node.name


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def tp_candidates(problem: Problem) -> list[int]:
    model = problem.model
    largest = max(n.gpus_per_node for n in problem.cluster.node_types)
    return [
        t for t in range(1, largest + 1)
        if _is_power_of_two(t) and model.num_attention_heads % t == 0 and model.kv_heads % t == 0
    ]


def ep_candidates(problem: Problem, tp: int, dp: int, options: SpaceOptions | None = None) -> list[int]:
    """Expert-parallel sizes for (tp, dp): [1] for a dense model; for a mixture of experts every ep that divides dp and
    every kind's expert count, where upstream trains the layout at all (costmodel.expert_parallel_error: tp > 1 needs
    sequence parallelism, so with it off an MoE model has no ep at tp > 1)."""
    from optsearch.costmodel import expert_parallel_error

    model = problem.model
    if not model.is_moe:
        return [1]
    allowed = options.expert_parallel_sizes if options is not None else None
    return [e for e in range(1, dp + 1) if expert_parallel_error(model, problem.job, tp, dp, e) is None
            and (allowed is None or e in allowed)]


def micro_batch_candidates(problem: Problem, options: SpaceOptions) -> list[int]:
    return [b for b in options.micro_batch_sizes if problem.job.global_batch_size % b == 0]


def dp_candidates(problem: Problem, tp: int, micro_batch_size: int, max_gpus: int | None = None,
                  cp: int = 1) -> list[int]:
    """dp such that dp x b divides the global batch and tp x cp x dp fits the cluster's GPUs."""
    total = sum(n.gpus_per_node * n.num_nodes_available for n in problem.cluster.node_types)
    if max_gpus is not None:
        total = min(total, max_gpus)
    per = problem.job.global_batch_size // micro_batch_size
    return [d for d in range(1, per + 1) if per % d == 0 and tp * cp * d <= total]


def context_parallel_candidates(problem: Problem, options: SpaceOptions) -> list[int]:
    """The options' cp sizes that Megatron-LM and the cost model run on this model (costmodel.context_parallel_error:
    the sequence a multiple of 2 cp; no encoder-decoder model)."""
    from optsearch.costmodel import context_parallel_error

    return [c for c in options.context_parallel_sizes if context_parallel_error(problem.model, c) is None]


def profile_covers(problem: Problem, gpu: str, tp: int, micro_batch_size: int) -> bool:
    kinds = [EMBEDDING_KIND, HEAD_KIND, *(k.name for k in problem.model.kinds)]
    return all(problem.profile.has(gpu, kind, tp, micro_batch_size) for kind in kinds)


def node_uses(problem: Problem, tp: int, dp: int, micro_batch_size: int, cp: int = 1,
              options: SpaceOptions | None = None) -> list[NodeUse]:
    """Node types usable at (tp, dp, b, cp), in cluster order, with their whole-node block shape (w = tp x cp x dp).
    With cp > 1, only the options' context_parallel_node_types (where set)."""
    w = tp * cp * dp
    cp_types = options.context_parallel_node_types if options is not None and cp > 1 else None
    out = []
    for node in problem.cluster.node_types:
        gpn = node.gpus_per_node
        if tp > gpn or node.num_nodes_available == 0:
            continue
        if cp_types is not None and node.name not in cp_types:
            continue
        if w % gpn == 0:
            use = NodeUse(node=node, stages_per_block=1, nodes_per_block=w // gpn)
        elif gpn % w == 0:
            use = NodeUse(node=node, stages_per_block=gpn // w, nodes_per_block=1)
        else:
            continue
        if profile_covers(problem, node.gpu, tp, micro_batch_size):
            out.append(use)
    return out


def max_stages(problem: Problem, options: SpaceOptions) -> int:
    return options.max_stages or problem.model.num_layers + 2


def type_sequence_allowed(problem: Problem, types: tuple[str, ...], options: SpaceOptions) -> bool:
    """The target's rules on the node types along the pipeline: their order, and one GPUs-per-node count."""
    if options.node_type_order is not None:
        rank = {name: i for i, name in enumerate(options.node_type_order)}
        if any(t not in rank for t in types) or any(rank[a] > rank[b] for a, b in zip(types, types[1:])):
            return False
    if options.same_gpus_per_node and len({problem.node(t).gpus_per_node for t in types}) > 1:
        return False
    return True


def one_mode_variants(plan: Plan, options: SpaceOptions) -> list[Plan]:
    """The plan itself where its recomputation is allowed; else, with uniform_recompute, the plan with one mode on
    every stage that holds layers, for each mode from the most recomputing stage's on (a quick plan of the per-stage
    heuristic made runnable: more recomputation never needs more memory in the cost model's terms, but may be slower,
    so the caller prices them in order and keeps the first that fits)."""
    if recompute_allowed(plan, options) or not options.uniform_recompute:
        return [plan]
    modes = options.recompute_modes
    used = [modes.index(s.recompute) for s in plan.stages if s.num_layers > 0 and s.recompute in modes]
    start = max(used, default=0)
    return [replace(plan, stages=tuple(Stage(node_type=s.node_type, num_layers=s.num_layers,
                                    recompute=mode if s.num_layers > 0 else modes[0]) for s in plan.stages))
            for mode in modes[start:]]


def kinds_split_allowed(problem: Problem, counts: list[int]) -> bool:
    """pp = 1, or no stage holds layers of two kinds (layers in model order: a stage's layers are consecutive)."""
    if len(counts) <= 1:
        return True
    start = 0
    for n in counts:
        if n > 0 and problem.model.kind_of_layer(start).name != problem.model.kind_of_layer(start + n - 1).name:
            return False
        start += n
    return True


def block_recompute_enabled(options: SpaceOptions) -> bool:
    """Block recomputation is in the space: the target allows it, runs one setting on every stage, and the mode list
    holds none (the layers block leaves alone) and full (the ones it recomputes)."""
    return (options.block_recompute and options.uniform_recompute and "full" in options.recompute_modes
            and options.recompute_modes[0] == "none")


def recompute_allowed(plan: Plan, options: SpaceOptions) -> bool:
    """Every stage's mode is allowed; with uniform_recompute, stages with layers share one mode, empty ones none."""
    if plan.recompute_num_layers is not None:
        return (block_recompute_enabled(options) and plan.recompute_num_layers >= 1
                and all(s.recompute == ("full" if s.num_layers > 0 else "none") for s in plan.stages))
    if any(s.recompute not in options.recompute_modes for s in plan.stages):
        return False
    if not options.uniform_recompute:
        return True
    if any(s.num_layers == 0 and s.recompute != options.recompute_modes[0] for s in plan.stages):
        return False
    return len({s.recompute for s in plan.stages if s.num_layers > 0}) <= 1


def interleaving_allowed(problem: Problem, pp: int, dp: int, micro_batch_size: int, v: int) -> bool:
    """v = 1, or v > 1 where Megatron-LM's interleaved schedule runs it and some split has every stage's layers a
    multiple of v (costmodel.check_interleaving): pp > 1, m a multiple of pp, one layer kind, L a multiple of v."""
    if v == 1:
        return True
    m = problem.job.global_batch_size // (dp * micro_batch_size)
    model = problem.model
    return v > 1 and pp > 1 and m % pp == 0 and len(model.kinds) == 1 and model.num_layers % v == 0


def in_search_space(problem: Problem, plan: Plan, options: SpaceOptions = SpaceOptions()) -> bool:
    """True when the plan is one the search methods consider (whole nodes, usable types, allowed degrees)."""
    if plan.tp not in tp_candidates(problem) or plan.micro_batch_size not in micro_batch_candidates(problem, options):
        return False
    v = plan.virtual_stages
    if v not in options.virtual_stages or not interleaving_allowed(problem, plan.pp, plan.dp, plan.micro_batch_size, v):
        return False
    if any(s.num_layers % v for s in plan.stages):
        return False
    if v > 1 and plan.recompute_num_layers is not None:  # Megatron applies N per model chunk: not modelled
        return False
    if plan.ep not in ep_candidates(problem, plan.tp, plan.dp, options):
        return False
    if plan.cp not in context_parallel_candidates(problem, options):
        return False
    from optsearch.costmodel import (
        ddp_average_on, distributed_optimizer_choices, overlap_grad_reduce_on, overlap_param_gather_settings,
    )

    if plan.distributed_optimizer not in distributed_optimizer_choices(problem.job, plan.dp, plan.cp):
        return False
    # --overlap-grad-reduce: the search's own setting only (an interleaved variant of a v = 1 plan must not keep its
    # flag: launch refuses it). The distributed optimizer: either setting of the space (under the overlap the search
    # tries both, costmodel.distributed_optimizer_settings; elsewhere on, which never loses)
    if plan.overlap_grad_reduce != overlap_grad_reduce_on(problem, plan.dp, plan.cp, v):
        return False
    # --overlap-param-gather and --ddp-average-in-collective: on only where the search may set them
    # (costmodel.overlap_param_gather_on, ddp_average_on); off is in the space too (dominated, as brute force checks)
    # (at pp > 1 both, costmodel.overlap_param_gather_settings, priced at upstream main's dispatch only)
    if plan.overlap_param_gather and True not in overlap_param_gather_settings(problem, plan.dp, plan.cp, v, plan.pp,
                                                                              plan.distributed_optimizer):
        return False
    if plan.overlap_param_gather and plan.pp > 1 and plan.param_gather_dispatch != "main":
        return False
    if plan.ddp_average_in_collective and not ddp_average_on(problem, plan.dp, plan.cp):
        return False
    uses = {u.name: u for u in node_uses(problem, plan.tp, plan.dp, plan.micro_batch_size, plan.cp, options)}
    if any(s.node_type not in uses for s in plan.stages) or not recompute_allowed(plan, options):
        return False
    if not type_sequence_allowed(problem, tuple(s.node_type for s in plan.stages), options):
        return False
    if any(s.num_layers == 0 for s in plan.stages[1:-1]) or plan.pp > max_stages(problem, options):
        return False
    if options.kinds_split_at_stages and not kinds_split_allowed(problem, [s.num_layers for s in plan.stages]):
        return False
    # Runs of one node type must fill whole blocks.
    run_type, run_len = None, 0
    for stage in (*plan.stages, None):
        name = stage.node_type if stage is not None else None
        if name != run_type:
            if run_type is not None and run_len % uses[run_type].stages_per_block:
                return False
            run_type, run_len = name, 0
        run_len += 1
    return True
