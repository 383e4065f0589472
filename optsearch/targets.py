"""Engine targets: what each training engine can run, as a small declared capability set.

A plan is only worth proving optimal if the engine it is meant for runs it as emitted. Each target says which
recomputation it can express, which models it has arguments for, whether the node order along the pipeline is free,
and how many GPUs per node its launcher starts. `space_options` turns a target into the search space (SpaceOptions)
that solve, whatif, pareto, compare and the brute-force baseline all search; `check_model` refuses a model the target
cannot train; `megatron.launch_files` emits the plan for it.

megatron: upstream NVIDIA/Megatron-LM, main branch. Context parallelism --context-parallel-size 1, 2, 4 or 8
    (megatron/training/arguments.py: the world size divides by tp x pp x cp; the sequence by 2 cp). `--recompute-granularity`, `--recompute-method` and
    `--recompute-num-layers` apply to every pipeline stage alike (megatron/training/arguments.py; the transformer
    block reads one config): one mode for all stages, or block recomputation of the first N layers of every stage.
    Decoder-only models run with pretrain_gpt.py; encoder-only (BERT, ModelSpec.encoder_only) with
    examples/bert/pretrain_bert.py, which builds learned absolute positions and dense layers (bert_layer_specs) and
    splits no sequence over context-parallel ranks, so cp = 1 (costmodel.context_parallel_error); encoder-decoder (T5)
    with examples/t5/pretrain_t5.py, which raises "Pipeline parallelism is not supported for T5", so pp = 1. The node order is free: torchrun.sh and the hostfile
    give every node its rank, and each node its own --nproc-per-node.
fasop: FASOP's fork (github.com/AvatarHwang/FASOP, Megatron-LM-2, 2023). The same recompute flags, read the same way
    (megatron/model/transformer.py). Its run script (_01_run_inter.sh) has arguments for three models only, chosen by
    MODEL (gpt2: 48 layers, hidden 1600, 16 heads, sequence 1024; Bert: 24, 1024, 16, 512; T5: 24 + 24, hidden 1024, 32
    heads of 128, ffn 3072, sequence 512), and --balance splits the layers, for T5 too (stages before
    --pipeline-model-parallel-split-rank run the encoder, so with pp > 1 no stage may hold encoder and decoder layers:
    encoder_decoder_split, searched as SpaceOptions.kinds_split_at_stages). Its Slurm scripts fix the order of the nodes: the master
    job's node (the A100 node, hgx partition) is node rank 0 and the slave job's nodes (A10) follow
    (_02_hetero_master_job.sh, _02_hetero_slave_job.sh), so the node types run in the cluster file's order (a100
    before a10 in fasop-a100-a10). One NPROC_PER_NODE serves every node. No context parallelism (its Megatron-LM has
    no --context-parallel-size): cp = 1. No interleaved pipeline: the fork's
    ParallelTransformer builds balance[pipeline rank] layers in every model chunk (megatron/model/transformer.py), so
    with --num-layers-per-virtual-pipeline-stage each chunk would build the rank's whole share, and its run script
    passes no such flag.
megatron interleaves: v model chunks per rank (targets.VIRTUAL_STAGES), emitted as a --pipeline-model-parallel-layout
    of v x pp stages (megatron.partition_args).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from optsearch.candidates import SpaceOptions
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.problem import Problem
from optsearch.spec import ModelSpec

TargetName = Literal["megatron", "fasop"]
TARGETS: tuple[TargetName, ...] = get_args(TargetName)
DEFAULT_TARGET: TargetName = "megatron"

RecomputeGranularity = Literal["per-stage", "one-mode", "one-mode-or-block"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FasopModel:
    """One model the FASOP fork's run script has arguments for (MODEL=name)."""

    name: str  # the fork's MODEL value
    num_layers: int
    encoder_layers: int | None  # encoder-decoder models: the encoder's share
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    ffn_hidden_size: int  # what the script passes (--ffn-hidden-size, else Megatron's 4 x hidden)


# Megatron-LM-2/_00_conf.sh (NUM_LAYERS, HIDDEN_SIZE) and _01_run_inter.sh (MODEL_ARGS) of FASOP's repository.
FASOP_MODELS: tuple[FasopModel, ...] = (
    FasopModel(name="gpt2", num_layers=48, encoder_layers=None, hidden_size=1600, num_attention_heads=16,
               seq_length=1024, ffn_hidden_size=6400),
    FasopModel(name="Bert", num_layers=24, encoder_layers=None, hidden_size=1024, num_attention_heads=16,
               seq_length=512, ffn_hidden_size=4096),
    FasopModel(name="T5", num_layers=48, encoder_layers=24, hidden_size=1024, num_attention_heads=32,
               seq_length=512, ffn_hidden_size=3072),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    name: TargetName
    description: str
    recompute: RecomputeGranularity  # one-mode: one --recompute-* setting for every stage
    node_order_free: bool  # False: node types along the pipeline in the cluster file's order
    same_gpus_per_node: bool  # one --nproc-per-node for every node
    encoder_decoder_max_pp: int | None  # None: any pp
    encoder_decoder_split: bool = False  # pp > 1: every stage wholly encoder or decoder (a split rank)
    # Context-parallel sizes the engine runs (issue 16); the search takes those the model allows
    # (candidates.context_parallel_candidates).
    context_parallel_sizes: tuple[int, ...] = (1,)
    virtual_stages: tuple[int, ...] = (1,)  # interleaved pipeline: model chunks per rank it runs ((1,): none)

    # Mixture-of-experts models with expert parallelism (--expert-model-parallel-size); the fork has none
    # (fasop_model refuses MoE models, check_model).
    expert_parallel: bool = True

    def summary(self) -> str:
        """Every capability in one line: recomputation, models, node order, GPUs per node, cp, v, ep, the optimizer."""
        order = "free node order" if self.node_order_free else "node types in the cluster's order"
        gpn = "one GPU count per node for all nodes" if self.same_gpus_per_node else "any GPUs per node"
        rc = {"per-stage": "recomputation per stage", "one-mode": "one recomputation mode for all stages",
              "one-mode-or-block": "one recomputation mode for all stages (or block: first N layers of each)"}
        if self.encoder_decoder_max_pp is not None:
            t5 = f"encoder-decoder (T5) with pp <= {self.encoder_decoder_max_pp}"
        elif self.encoder_decoder_split:
            t5 = "encoder-decoder (T5) with every stage wholly encoder or decoder"
        else:
            t5 = "encoder-decoder (T5) with any split"
        models = (f"only its models {', '.join(m.name for m in FASOP_MODELS)}" if self.name == "fasop"
                  else "decoder-only models, encoder-only (BERT) with cp = 1")
        cp = ("context parallelism " + "/".join(map(str, self.context_parallel_sizes))
              if len(self.context_parallel_sizes) > 1 else "no context parallelism")
        v = ("interleaved pipeline v = " + "/".join(map(str, self.virtual_stages))
             if len(self.virtual_stages) > 1 else "no interleaved pipeline")
        ep = "mixture of experts with expert parallelism" if self.expert_parallel else "no mixture of experts"
        return (f"{self.name}: {self.description}; {models}; {t5}; {rc[self.recompute]}; {order}; {gpn}; {cp}; {v}; "
                f"{ep}; distributed optimizer wherever dp x cp > 1")


# The interleaved pipeline sizes searched for upstream (--pipeline-model-parallel-layout with v x pp stages). Each
# further v is another set of candidates; the bubble shrinks as 1 / v while the sends grow as v, so the gain from
# v = 4 to larger v is at most a quarter of the bubble (docs/knobs.md, "Interleaved pipeline").
VIRTUAL_STAGES: tuple[int, ...] = (1, 2, 3, 4)
MEGATRON = Target(
    name="megatron", description="upstream NVIDIA/Megatron-LM (main)", recompute="one-mode-or-block",
    node_order_free=True, same_gpus_per_node=False, encoder_decoder_max_pp=1,
    context_parallel_sizes=(1, 2, 4, 8), virtual_stages=VIRTUAL_STAGES,
)
FASOP = Target(
    name="fasop", description="FASOP's Megatron-LM fork (AvatarHwang/FASOP, Megatron-LM-2)",
    recompute="one-mode-or-block", node_order_free=False, same_gpus_per_node=True, encoder_decoder_max_pp=None,
    encoder_decoder_split=True, expert_parallel=False,
)
_BY_NAME = {t.name: t for t in (MEGATRON, FASOP)}


def get_target(name: str) -> Target:
    if name not in _BY_NAME:
        raise SpecError(f"--target = {name!r}: must be one of {', '.join(TARGETS)}")
    return _BY_NAME[name]


def is_encoder_decoder(model: ModelSpec) -> bool:
    return any(k.cross_attention for k in model.kinds)


def fasop_model(model: ModelSpec) -> FasopModel:
    """The fork's MODEL whose arguments build this model, or UnsupportedPlanError naming the first difference."""
    if model.is_moe:
        raise UnsupportedPlanError(
            f"model {model.name}: mixture of experts: the FASOP fork's Megatron-LM-2 has only a Switch MLP "
            "(--num-experts, top-1 routing, every expert on every rank, run one after another: no expert "
            "parallelism or top-k) and its run script passes no expert arguments; plan and launch it for upstream "
            "Megatron-LM instead (--target megatron)"
        )
    kinds = model.kinds
    enc = kinds[0].num_layers if is_encoder_decoder(model) else None
    wanted = dict(num_layers=model.num_layers, encoder_layers=enc, hidden_size=model.hidden_size,
                  num_attention_heads=model.num_attention_heads, seq_length=model.seq_length)
    shape_ok = (len(kinds) == 1 and enc is None) or (len(kinds) == 2 and enc is not None)
    same_family = [m for m in FASOP_MODELS if (m.encoder_layers is None) == (enc is None)]
    for m in same_family:
        if shape_ok and all(getattr(m, k) == v for k, v in wanted.items()):
            if (model.gated_mlp or model.norm != "layernorm" or model.position_embedding != "learned"
                    or model.kv_heads != model.num_attention_heads or not model.bias):
                break
            if (m.name == "Bert") != model.encoder_only:  # MODEL=Bert runs the fork's BERT script, the others not
                trains = "an encoder-only BERT" if m.name == "Bert" else "a causal decoder"
                raise UnsupportedPlanError(
                    f"model {model.name}: encoder_only = {str(model.encoder_only).lower()} but the FASOP fork's "
                    f"MODEL={m.name} of this shape trains {trains} (_01_run_inter.sh); plan and launch it for "
                    "upstream Megatron-LM instead (--target megatron)"
                )
            return m
    known = "; ".join(f"MODEL={m.name}: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} "
                      f"heads, sequence {m.seq_length}" for m in FASOP_MODELS)
    raise UnsupportedPlanError(
        f"model {model.name}: the FASOP fork's run script (_01_run_inter.sh) has arguments for three models only "
        f"({known}; learned positions, LayerNorm, biases, no gated MLP or grouped queries); plan and launch it for "
        "upstream Megatron-LM instead (--target megatron, --format megatron)"
    )


def encoder_only_error(model: ModelSpec) -> str | None:
    """Why upstream's examples/bert/pretrain_bert.py cannot build this encoder-only model, or None (not encoder-only,
    or buildable). It passes no position_embedding_type to BertModel (learned absolute positions only) and builds its
    layers from bert_layer_specs (a dense MLP, no experts)."""
    if not model.encoder_only:
        return None
    if model.is_moe:
        return ("encoder-only model with experts: upstream's examples/bert/pretrain_bert.py builds dense layers "
                "(bert_layer_specs has no mixture-of-experts MLP)")
    if model.position_embedding != "learned":
        return (f"encoder-only model with {model.position_embedding} position embeddings: upstream's "
                "examples/bert/pretrain_bert.py builds BertModel with learned absolute positions only")
    return None


def check_model(target: Target, problem: Problem) -> None:
    """Refuse a model the target has no arguments for (UnsupportedPlanError, exit 2)."""
    if target.name == "fasop":
        fasop_model(problem.model)
    why = encoder_only_error(problem.model) if target.name == "megatron" else None
    if why is not None:
        raise UnsupportedPlanError(f"model {problem.model.name}: {why}")


def engine_problem(target: Target | str, problem: Problem, flash_attention: bool | None = None,
                   overlap_grad_reduce: bool | None = None, param_gather_pipelined: bool = False) -> Problem:
    """The problem priced with the target engine's attention. Upstream Megatron-LM runs Transformer Engine's
    attention by default (--transformer-impl transformer_engine, --attention-backend auto: flash or cuDNN fused
    attention where the GPU and head size allow, docs/cost-model.md section 14, "Flash attention"), and the launch
    says so (megatron.attention_backend_args): flash attention on unless flash_attention is False (the launch then
    says --attention-backend unfused). The FASOP fork (Megatron-LM-2, 2023) has no flash attention: off; asking for
    it is a SpecError. Megatron's --overlap-grad-reduce: on for upstream Megatron-LM unless overlap_grad_reduce is
    False (Problem.overlap_grad_reduce; the FASOP fork's launch does not emit it: off, and asking for it an error).
    With it, upstream main's other gradient-path options the search sets where they never lose: --overlap-param-gather
    (Problem.overlap_param_gather, docs/cost-model.md 7f) and --ddp-average-in-collective
    (Problem.ddp_average_in_collective, 8c); overlap_grad_reduce = False turns all three off (the gradient path of an
    engine without them, e.g. the README's FASOP run priced by hand). param_gather_pipelined: also try
    --overlap-param-gather on pp > 1 plans (Problem.param_gather_pipelined; it needs the grad overlap).
    """
    from dataclasses import replace

    from optsearch.problem import with_flash_attention

    name = target if isinstance(target, str) else target.name
    if param_gather_pipelined and (name == "fasop" or overlap_grad_reduce is False):
        raise SpecError("--pipelined-param-gather needs upstream Megatron-LM's --overlap-grad-reduce (Megatron asserts "
                        "it for --overlap-param-gather): drop --pipelined-param-gather, or --no-overlap-grad-reduce / "
                        "--target fasop")
    if name == "fasop":
        if overlap_grad_reduce:
            raise SpecError("--overlap-grad-reduce with --target fasop: optsearch's FASOP launch does not emit it; "
                            "drop --overlap-grad-reduce")
        if flash_attention:
            raise SpecError("--flash-attention with --target fasop: the FASOP fork (Megatron-LM-2) has no flash "
                            "attention; drop --flash-attention")
        return with_flash_attention(problem, False)
    get_target(name)
    problem = replace(problem, overlap_grad_reduce=overlap_grad_reduce is not False,
                      overlap_param_gather=overlap_grad_reduce is not False,  # --overlap-param-gather needs the former
                      ddp_average_in_collective=overlap_grad_reduce is not False,  # never costs (costmodel 8c)
                      param_gather_pipelined=param_gather_pipelined)  # opt-in (Problem.param_gather_pipelined)
    return with_flash_attention(problem, flash_attention is not False)


def context_parallel_attention_error(problem: Problem, node_types=None) -> str | None:
    """Why upstream cannot run context parallelism with the attention the problem prices on these node types (default:
    all of the cluster's), or None. Only Transformer Engine's flash and cuDNN fused attention split a sequence over cp
    ranks: its get_attention_backend disables UnfusedDotProductAttention under context parallelism ("it does not
    support context parallelism", transformer_engine/pytorch/attention/dot_product_attention/utils.py), and
    Megatron-Core's local DotProductAttention asserts context_parallel_size == 1
    (megatron/core/transformer/dot_product_attention.py). So cp > 1 needs flash attention on every stage
    (costmodel.flash_attention_on)."""
    from optsearch.costmodel import flash_attention_on

    names = node_types if node_types is not None else [n.name for n in problem.cluster.node_types]
    without = [n for n in names if not flash_attention_on(problem, n)]
    if not without:
        return None
    if not problem.flash_attention:
        return ("the attention is priced unfused (--no-flash-attention, or a target without flash attention), and "
                "Transformer Engine's unfused attention has no context parallelism")
    from optsearch.profile.analytic import flash_attention_error

    reason = flash_attention_error(problem.model, problem.gpu_of(without[0]))
    return (f"node type {without[0]} runs no flash attention ({reason}), and Transformer Engine's unfused attention "
            "has no context parallelism")


def space_options(target: Target, problem: Problem, base: SpaceOptions = SpaceOptions()) -> SpaceOptions:
    """The search space the target runs: base narrowed by the target's capabilities (check_model first), with
    context parallelism only on the node types whose attention (as the problem prices it) has it
    (context_parallel_space). The problem should be priced as the engine runs attention (engine_problem, or
    target_space for both at once): on a problem without flash attention, upstream's target searches cp = 1 only."""
    check_model(target, problem)
    options = base
    if target.recompute != "per-stage":
        options = replace(options, uniform_recompute=True)
    if target.recompute == "one-mode-or-block":
        options = replace(options, block_recompute=True)
    if not target.node_order_free:
        options = replace(options, node_type_order=tuple(n.name for n in problem.cluster.node_types))
    if target.same_gpus_per_node:
        options = replace(options, same_gpus_per_node=True)
    if target.encoder_decoder_split and is_encoder_decoder(problem.model):
        options = replace(options, kinds_split_at_stages=True)
    if options.context_parallel_sizes == (1,):  # the base leaves cp open: the target's sizes
        options = replace(options, context_parallel_sizes=target.context_parallel_sizes)
    else:  # the base names sizes: those the target runs
        options = replace(options, context_parallel_sizes=tuple(
            c for c in options.context_parallel_sizes if c in target.context_parallel_sizes) or (1,))
    if options.context_parallel_sizes != (1,):
        options = context_parallel_space(problem, options)
    if _measured_table(problem):
        # A table measured (or imported) at the model's full sequence cannot price a rank's s / cp tokens: dividing
        # its times by cp also divides fixed per-kernel and host costs (docs/cost-model.md 16a), and an imported AMP
        # table made solve pick cp 2 from times that hold several ms of host time per layer. Only the analytic
        # profile, whose terms follow the token count, searches context parallelism.
        options = replace(options, context_parallel_sizes=(1,))
    if options.virtual_stages == (1,) and target.virtual_stages != (1,):
        options = replace(options, virtual_stages=target.virtual_stages)
    if target.encoder_decoder_max_pp is not None and is_encoder_decoder(problem.model):
        most = options.max_stages or problem.model.num_layers + 2
        options = replace(options, max_stages=min(most, target.encoder_decoder_max_pp))
    return options


def check_context_parallel_attention(problem: Problem, plan, where: str = "plan") -> None:
    """UnsupportedPlanError (exit 2) for a cp > 1 plan with a stage on a node type where upstream has no attention
    backend with context parallelism (context_parallel_attention_error over the plan's node types): launch refuses it
    (megatron.megatron_args, with the same message for where = "plan") and estimate refuses to price it."""
    if plan.cp <= 1:
        return
    why = context_parallel_attention_error(problem, sorted({s.node_type for s in plan.stages}))
    if why is not None:
        raise UnsupportedPlanError(f"{where}: cp = {plan.cp}: {why}; re-plan with --max-cp 1")


def context_parallel_node_types(problem: Problem) -> tuple[str, ...]:
    """The cluster's node types on which upstream runs context parallelism with the attention the problem prices
    (context_parallel_attention_error: flash attention there), in cluster order."""
    return tuple(n.name for n in problem.cluster.node_types
                 if context_parallel_attention_error(problem, [n.name]) is None)


def context_parallel_space(problem: Problem, options: SpaceOptions) -> SpaceOptions:
    """The space with cp > 1 only where upstream has an attention backend for it (issue 15): cp is one plan-wide
    value, so a cp > 1 plan may hold stages only on node types that run flash attention
    (SpaceOptions.context_parallel_node_types); where none does, cp = 1 alone. Every type runs it: unchanged."""
    types = context_parallel_node_types(problem)
    if not types:
        return replace(options, context_parallel_sizes=(1,))
    if len(types) == len(problem.cluster.node_types):
        return options
    if options.context_parallel_node_types is not None:
        types = tuple(t for t in types if t in options.context_parallel_node_types)
    return replace(options, context_parallel_node_types=types)


def target_space(target: Target | str, problem: Problem, flash_attention: bool | None = None,
                 base: SpaceOptions = SpaceOptions()) -> tuple[Problem, SpaceOptions]:
    """What `optsearch solve --target NAME` searches, for library callers: the problem priced with the engine's
    attention (engine_problem; flash_attention as --[no-]flash-attention) and the space the target runs on it
    (space_options, context parallelism where that attention allows it). build_problem alone prices no flash
    attention and SpaceOptions() is the generic per-stage space: neither is a target's."""
    t = get_target(target) if isinstance(target, str) else target
    priced = engine_problem(t, problem, flash_attention)
    return priced, space_options(t, priced, base)


def _measured_table(problem: Problem) -> bool:
    """Whether the problem's per-layer times come from a measured or imported table (not the analytic profile, nor a
    table `optsearch calibrate` derived from it: prices_context_parallel)."""
    return not prices_context_parallel(problem.profile)


def prices_context_parallel(profile: object) -> bool:
    """Whether costmodel.cp_layer_step_s may divide the profile's times by cp (a rank's s / cp tokens).

    True for the analytic profile (its terms follow the token count) and for a table whose every row is the analytic
    profile times a compute factor per GPU (`optsearch calibrate` on the analytic profile, metadata
    `derived_from: analytic`: the factor multiplies the analytic shape, which divides by cp as the analytic profile
    does). False for a measured or imported table: it holds times at the full sequence, fixed per-kernel and host
    costs included, which do not divide by cp. A calibrated (scaled) profile follows its base."""
    from optsearch.profile import ProfileTable
    from optsearch.profile.table import analytic_derived

    while not isinstance(profile, ProfileTable) and hasattr(profile, "base"):  # calibrate.ScaledProfile
        profile = profile.base
    return not isinstance(profile, ProfileTable) or analytic_derived(profile)


def context_parallel_profile_error(problem: Problem, plan) -> str | None:
    """Why the problem's profile cannot price the plan's context parallelism, or None (cp = 1, or a profile that
    prices s / cp tokens). estimate, launch, calibrate and validate refuse such a plan (exit 2), as solve searches
    cp = 1 only with such a table (space_options)."""
    if plan.cp <= 1 or prices_context_parallel(problem.profile):
        return None
    s = problem.model.seq_length
    return (f"cp = {plan.cp} with profile {problem.profile.name}: a measured or imported table holds times for the "
            f"full sequence of {s} tokens and cannot price a rank's s / cp = {s / plan.cp:g} tokens (its fixed "
            "per-kernel and host times do not divide by cp); price a cp > 1 plan with --profile analytic or a table "
            "`optsearch calibrate` fitted on it, or give a plan with cp = 1")


def check_context_parallel_profile(problem: Problem, plan, where: str = "plan") -> None:
    """ProfileError (exit 2) when context_parallel_profile_error says why."""
    from optsearch.errors import ProfileError

    why = context_parallel_profile_error(problem, plan)
    if why is not None:
        raise ProfileError(f"{where}: {why}")
