"""Plan -> Megatron-LM: command-line arguments, partition strings, torchrun and Slurm launch scripts; and back.

Everything here is a pure function of a (Problem, Plan). Output targets upstream Megatron-LM (Megatron-Core
training scripts `pretrain_gpt.py` / `examples/bert/pretrain_bert.py` / `examples/t5/pretrain_t5.py`) or FASOP's
fork (targets.py declares what each runs); every upstream flag was checked against the sources named in MEGATRON_LM_SOURCES (docs/launch.md keeps the
flag table) and is run through upstream's own parse_args and validate_args by tests/test_megatron_parse.py where a
checkout is at hand. A plan the engine cannot run raises UnsupportedPlanError with the reason, never a silently
different launch.

Rank order. Megatron's default order is tensor fastest, then data, then pipeline ('tp-cp-ep-dp-pp'), so pipeline
stage i holds global ranks [i w, (i + 1) w), w = tp x dp. torchrun numbers global ranks node by node in node-rank
order, so listing the nodes of each run of same-type stages on fresh nodes of that type (the packing
costmodel.place prices) puts every stage on the node type the plan chose.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from optsearch.costmodel import check_plan, estimate, place, sequence_parallel_on
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.plan import Plan, Recompute, Stage, parse_balance, plan_from_dict
from optsearch.problem import Problem
from optsearch.spec import ModelSpec
from optsearch.targets import FASOP, encoder_only_error, fasop_model, is_encoder_decoder, space_options

# The upstream files the flags, defaults and rules below were read from: NVIDIA/Megatron-LM, main branch at commit
# MEGATRON_LM_COMMIT (2026-08-22); each file's value is the last commit on main that changed it (all are ancestors
# of MEGATRON_LM_COMMIT: `git merge-base --is-ancestor`).
MEGATRON_LM_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_LM_SOURCES = {
    "megatron/training/arguments.py": "d96d76c068191a6d3bb448ab561822120c9527ba",
    "megatron/core/transformer/pipeline_parallel_layer_layout.py": "db57c152e672e99bfdb0b57a93d3bad479c1b559",
    "megatron/core/transformer/transformer_config.py": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
    "examples/t5/pretrain_t5.py": "223e244f5e172d5d94dd256b7b5beb180bf680ca",
    "examples/llama/train_llama3_8b_h100_fp8.sh": "779c5b748dbcf00ad9e36d539c576b404ab4abe9",
}
MEGATRON_LM_TARGET = (f"NVIDIA/Megatron-LM main at {MEGATRON_LM_COMMIT[:12]} (Megatron-Core >= 0.13; "
                      "--pipeline-model-parallel-layout needs it)")
FASOP_FORK = "github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance)"
T5_ENTRY = "examples/t5/pretrain_t5.py"  # moved from the repository root to examples/t5/ upstream
GPT_ENTRY = "pretrain_gpt.py"
# Encoder-only models (ModelSpec.encoder_only): moved from the repository root to examples/bert/ upstream; read at
# MEGATRON_LM_COMMIT (its own last commit was not recorded: the checkout read had no git history)
BERT_ENTRY = "examples/bert/pretrain_bert.py"

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron-LM's default --make-vocab-size-divisible-by
DEFAULT_MASTER_PORT = 6000

LaunchFormat = Literal["megatron", "fasop", "torchrun", "slurm"]
LAUNCH_FORMATS: tuple[LaunchFormat, ...] = get_args(LaunchFormat)

ARGS_FILE = "megatron_args.sh"
FASOP_FILE = "fasop_conf.sh"
TORCHRUN_FILE = "torchrun.sh"
HOSTFILE = "hostfile"
SBATCH_FILE = "job.sbatch"


# ---- records -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronArgs:
    """A Megatron-LM command line for one plan: the training script, its arguments, and what the user must know."""

    entry: str  # pretrain_gpt.py, examples/bert/pretrain_bert.py or examples/t5/pretrain_t5.py
    args: tuple[str, ...]
    notes: tuple[str, ...]  # one line each: padded vocabulary, recompute superset, ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchNode:
    """One node of the launch, in node-rank order."""

    node_rank: int
    node_type: str
    run: int  # index of the run of consecutive same-type stages it serves
    host: str  # placeholder host name, e.g. a100-0
    nproc: int  # GPUs (processes) used on this node
    first_rank: int  # global rank of its local rank 0
    stages: tuple[int, ...]  # pipeline stages with ranks on this node


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmComponent:
    """One `#SBATCH hetjob` component: a run of consecutive same-type stages on fresh nodes of one type."""

    node_type: str
    nodes: tuple[LaunchNode, ...]
    gpus_per_node: int


# ---- partition strings -------------------------------------------------------------------------------------


def format_layout(layers_per_stage: Sequence[int]) -> str:
    """Layers per stage -> upstream --pipeline-model-parallel-layout, e.g. [0, 11, 8, 8, 8, 8, 5, 0] ->
    'E|t*11|(t*8|)*4t*5|L' (E embedding, t transformer layer, L loss/LM head, '|' ends a stage)."""
    counts = list(layers_per_stage)
    if not counts:
        raise SpecError("layout: needs at least one stage")
    pp = len(counts)

    def stage(i: int) -> str:
        n = counts[i]
        body = "" if n == 0 else "t" if n == 1 else f"t*{n}"
        return ("E" if i == 0 else "") + body + ("L" if i == pp - 1 else "")

    parts: list[str] = []
    i = 0
    while i < pp:
        j = i
        # group identical plain middle stages (neither E nor L) as (X|)*k
        while 0 < i < pp - 1 and j + 1 < pp - 1 and counts[j + 1] == counts[i]:
            j += 1
        text = stage(i)
        if j > i and text:
            parts.append(f"({text}|)*{j - i + 1}")
        else:
            parts.extend(stage(k) + ("|" if k < pp - 1 else "") for k in range(i, j + 1))
        i = j + 1
    return "".join(parts)


_PAREN_REPEAT = re.compile(r"\(([^)]+)\)\*(\d+)")
_CHAR_REPEAT = re.compile(r"(.)\*(\d+)")


def parse_layout(text: str, *, option: str = "--layout") -> tuple[int, ...]:
    """Upstream --pipeline-model-parallel-layout -> transformer layers per pipeline stage.

    Same grammar as PipelineParallelLayerLayout.parse_str_to_list: commas are cosmetic, '(...)*n' then 'x*n'
    unroll, '|' splits stages. Accepts what optsearch can launch: E first, L last, t between, one stage per
    pipeline rank (no virtual pipeline stages, no MTP layers).
    """
    raw = text.strip()
    expanded = raw.replace(",", "").replace(" ", "")
    for pattern in (_PAREN_REPEAT, _CHAR_REPEAT):
        expanded = pattern.sub(lambda m: m.group(1) * int(m.group(2)), expanded)
    bad = sorted(set(expanded) - set("EtL|"))
    if bad:
        extra = " (m is an MTP layer, which optsearch does not plan)" if "m" in bad else ""
        raise SpecError(
            f"{option} = {raw!r}: unexpected characters {''.join(bad)!r}{extra}; "
            "use E (embedding), t (transformer layer), L (loss), '|' between stages, x*n and (...)*n repeats"
        )
    stages = expanded.split("|")
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise SpecError(f"{option} = {raw!r}: E (the embedding) must come exactly once, first")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise SpecError(f"{option} = {raw!r}: L (the loss / LM head) must come exactly once, last")
    if not stages[0].startswith("E") or not stages[-1].endswith("L"):
        raise SpecError(f"{option} = {raw!r}: E must open the first stage and L close the last")
    return tuple(s.count("t") for s in stages)


def layout_stages(layout: str, node_order: str, recompute: Recompute = "none") -> tuple[Stage, ...]:
    """An upstream layout string plus a node order (as for --balance) -> stages."""
    counts = parse_layout(layout)
    try:
        return parse_balance("-".join(map(str, counts)), node_order, recompute)
    except SpecError as err:
        raise SpecError(str(err).replace("--balance", "--layout")) from None


# ---- what Megatron-LM can run ------------------------------------------------------------------------------


def padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = MAKE_VOCAB_SIZE_DIVISIBLE_BY) -> int:
    """Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by x tp (tokenizer code,
    _vocab_size_with_padding)."""
    multiple = divisible_by * tp
    return math.ceil(vocab_size / multiple) * multiple


def is_llama_family(model: ModelSpec) -> bool:
    """Llama-style: gated (SwiGLU) MLP, RMSNorm, rotary positions, no biases."""
    return model.gated_mlp and model.norm == "rmsnorm" and model.position_embedding == "rotary" and not model.bias


def _check_model_kinds(model: ModelSpec) -> None:
    kinds = model.kinds
    if len(kinds) == 1 and not kinds[0].cross_attention:
        return
    if len(kinds) == 2 and not kinds[0].cross_attention and kinds[1].cross_attention:
        return
    names = ", ".join(f"{k.name}{' (cross-attention)' if k.cross_attention else ''}" for k in kinds)
    raise UnsupportedPlanError(
        f"model {model.name}: layer kinds {names}: Megatron-LM's training scripts run one kind of layer "
        "(pretrain_gpt.py, pretrain_bert.py) or an encoder followed by a cross-attending decoder (pretrain_t5.py)"
    )


def check_launchable(problem: Problem, plan: Plan) -> None:
    """Raise UnsupportedPlanError when Megatron-LM cannot run the plan (SpecError when the plan does not fit the
    model/cluster/job at all)."""
    model = problem.model
    _check_model_kinds(model)
    why = encoder_only_error(model)
    if why is not None:
        raise UnsupportedPlanError(f"model {model.name}: {why}")
    if model.num_attention_heads % plan.tp:
        raise UnsupportedPlanError(
            f"plan: tp = {plan.tp} does not divide num_attention_heads {model.num_attention_heads}: "
            "Megatron-LM splits attention heads evenly over the tensor-parallel ranks"
        )
    if model.kv_heads % plan.tp:
        raise UnsupportedPlanError(
            f"plan: tp = {plan.tp} does not divide the {model.kv_heads} key/value heads (--num-query-groups): "
            "Megatron-LM splits query groups evenly over the tensor-parallel ranks"
        )
    if model.ffn_hidden_size % plan.tp:
        raise UnsupportedPlanError(
            f"plan: tp = {plan.tp} does not divide ffn_hidden_size {model.ffn_hidden_size}: "
            "Megatron-LM's column-parallel MLP splits it evenly"
        )
    check_plan(problem, plan)
    for i, stage in enumerate(plan.stages):
        gpn = problem.node(stage.node_type).gpus_per_node
        if gpn % plan.tp:
            raise UnsupportedPlanError(
                f"plan: tp = {plan.tp} does not divide the {gpn} GPUs per node of {stage.node_type} (stage {i}): "
                "some tensor-parallel groups would straddle two nodes"
            )


# ---- recomputation -----------------------------------------------------------------------------------------


def _stage_ranges(indices: Sequence[int]) -> str:
    out: list[str] = []
    for i in indices:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def recompute_args(plan: Plan, *, allow_superset: bool = False) -> tuple[list[str], list[str]]:
    """The plan's recomputation as Megatron flags (applied to every stage) -> (args, notes).

    One mode on every stage that holds layers is exact. Mixed modes have no upstream spelling: refused, or with
    allow_superset the least recomputation that covers every stage (never more memory, more time than priced).
    """
    modes = {s.recompute for s in plan.stages if s.num_layers > 0}
    if plan.recompute_num_layers is not None and modes == {"full"}:  # block: exact, the first N of every stage
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                str(plan.recompute_num_layers)], []
    full_uniform = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if modes <= {"none"}:
        return [], []
    if modes == {"selective"}:
        return ["--recompute-granularity", "selective"], []
    if modes == {"full"}:
        return full_uniform, []
    by_mode = {m: [i for i, s in enumerate(plan.stages) if s.num_layers > 0 and s.recompute == m] for m in modes}
    mix = "; ".join(f"{m} on stages {_stage_ranges(idx)}" for m, idx in sorted(by_mode.items()))
    if modes == {"none", "selective"}:
        superset, args = "selective recomputation on every stage", ["--recompute-granularity", "selective"]
    elif modes == {"none", "full"}:
        n = max(plan.stages[i].num_layers for i in by_mode["full"])
        superset = f"full recomputation of the first {n} layers of every stage (--recompute-method block)"
        args = ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)]
    else:
        superset, args = "full recomputation on every stage", full_uniform
    if not allow_superset:
        raise UnsupportedPlanError(
            f"plan: stages mix recomputation modes ({mix}) but Megatron-LM applies --recompute-granularity, "
            f"--recompute-method and --recompute-num-layers to every stage alike; re-plan with one mode, or pass "
            f"--recompute-superset to launch with {superset} (more recomputation than priced: slower, never more memory)"
        )
    return args, [f"recompute superset: the plan mixes {mix}; launched with {superset}, slower than estimated"]


# ---- Megatron-LM arguments ---------------------------------------------------------------------------------


def chunk_layers(plan: Plan) -> list[int]:
    """Layers of every virtual stage in upstream's layout order: chunk k of pipeline rank r at index k pp + r (a
    rank's layers split into v equal chunks; PipelineParallelLayerLayout reads stage vpp_rank x pp + pp_rank)."""
    v = plan.virtual_stages
    return [s.num_layers // v for _ in range(v) for s in plan.stages]


def partition_args(plan: Plan) -> list[str]:
    """The pipeline split in the plainest upstream spelling: none when even, first/last stage sizes when only the
    end stages differ (both must hold layers), else --pipeline-model-parallel-layout. Interleaved (v > 1): always a
    layout of v x pp virtual stages (chunk_layers), which sets the virtual pipeline size v and puts the embedding in
    rank 0's first chunk and the loss in the last rank's last chunk."""
    if plan.virtual_stages > 1:
        return ["--pipeline-model-parallel-layout", format_layout(chunk_layers(plan))]
    counts = [s.num_layers for s in plan.stages]
    pp = len(counts)
    if pp == 1 or len(set(counts)) == 1:
        return []
    middle = counts[1:-1]
    if len(set(middle)) <= 1 and counts[0] > 0 and counts[-1] > 0:
        args: list[str] = []
        if pp == 2:
            return ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if counts[0] != middle[0]:
            args += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if counts[-1] != middle[0]:
            args += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
        return args
    return ["--pipeline-model-parallel-layout", format_layout(counts)]


def _model_args(model: ModelSpec, plan: Plan) -> list[str]:
    args: list[str] = []
    if is_encoder_decoder(model):
        enc, dec = model.kinds
        args += ["--encoder-num-layers", str(enc.num_layers), "--decoder-num-layers", str(dec.num_layers)]
    else:
        args += ["--num-layers", str(model.num_layers)]
    args += [
        "--hidden-size", str(model.hidden_size),
        "--ffn-hidden-size", str(model.ffn_hidden_size),
        "--num-attention-heads", str(model.num_attention_heads),
    ]
    if model.kv_heads != model.num_attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    if model.head_dim is not None and model.head_dim * model.num_attention_heads != model.hidden_size:
        args += ["--kv-channels", str(model.head_dim)]
    if is_encoder_decoder(model):
        args += ["--encoder-seq-length", str(model.seq_length), "--decoder-seq-length", str(model.seq_length)]
    else:
        args += ["--seq-length", str(model.seq_length)]
    args += ["--max-position-embeddings", str(model.seq_length)]
    if model.position_embedding == "rotary":
        args += ["--position-embedding-type", "rope"]
    elif model.position_embedding == "relative":
        if not is_encoder_decoder(model):
            raise UnsupportedPlanError(
                f"model {model.name}: relative position embeddings: upstream Megatron-LM has them for T5 only"
            )
        args += ["--position-embedding-type", "relative"]
    if model.gated_mlp:
        args.append("--swiglu")
    if model.norm == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if not model.bias:
        args.append("--disable-bias-linear")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    args += _moe_args(model, plan)
    if is_llama_family(model):
        # Llama trains without dropout (upstream's examples/llama scripts pass both; Megatron's default is 0.1)
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    args += ["--make-vocab-size-divisible-by", str(MAKE_VOCAB_SIZE_DIVISIBLE_BY)]
    return args


def _moe_args(model: ModelSpec, plan: Plan) -> list[str]:
    """Mixture-of-experts flags, as upstream's examples/mixtral/train_mixtral_8x7b_distributed.sh passes them: experts,
    top-k, the alltoall token dispatcher (the all-to-all the cost model prices) and the aux-loss load balancing behind
    its even token spread; --expert-model-parallel-size is the plan's ep (expert tensor parallelism defaults to tp in
    upstream's arguments.py, as priced). --moe-grouped-gemm is left to the user: upstream's validate_args needs an
    Ampere or newer GPU for it, and the cost model prices the experts as plain GEMMs."""
    moe = [k for k in model.kinds if k.is_moe]
    if not moe:
        return []
    if len(moe) != len(model.kinds) or is_encoder_decoder(model):
        raise UnsupportedPlanError(
            f"model {model.name}: expert layers beside dense or cross-attention layers: optsearch emits one "
            "--num-experts for every layer of pretrain_gpt.py (no --moe-layer-freq pattern)"
        )
    kind = moe[0]
    args = ["--num-experts", str(kind.num_experts), "--moe-router-topk", str(kind.moe_router_topk)]
    if model.expert_ffn_size(kind) != model.ffn_hidden_size:
        args += ["--moe-ffn-hidden-size", str(model.expert_ffn_size(kind))]
    args += ["--moe-token-dispatcher-type", "alltoall", "--moe-router-load-balancing-type", "aux_loss",
             "--moe-aux-loss-coeff", "1e-2", "--expert-model-parallel-size", str(plan.ep)]
    return args


def megatron_args(problem: Problem, plan: Plan, *, allow_recompute_superset: bool = False) -> MegatronArgs:
    """The upstream Megatron-LM command line that runs the plan (data and tokenizer arguments are the user's)."""
    check_launchable(problem, plan)
    model, job = problem.model, problem.job
    if is_encoder_decoder(model) and plan.pp > 1:
        raise UnsupportedPlanError(
            f"plan: pp = {plan.pp} for encoder-decoder model {model.name}: upstream {T5_ENTRY} raises "
            "'Pipeline parallelism is not supported for T5' (and --pipeline-model-parallel-layout rejects encoder "
            "layers); re-plan with pp = 1, or use --format fasop for the FASOP fork"
        )
    recompute, notes = recompute_args(plan, allow_superset=allow_recompute_superset)
    precision, precision_note = precision_args(problem, plan)
    args = [
        "--tensor-model-parallel-size", str(plan.tp),
        "--pipeline-model-parallel-size", str(plan.pp),
        *partition_args(plan),
        "--micro-batch-size", str(plan.micro_batch_size),
        "--global-batch-size", str(job.global_batch_size),
        "--train-iters", str(problem.iterations),
        *_model_args(model, plan),
        *precision,
        *recompute,
    ]
    if plan.cp > 1:
        args += ["--context-parallel-size", str(plan.cp)]
    if plan.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if sequence_parallel_on(job, plan.tp):
        args.append("--sequence-parallel")
    if plan.ddp_average_in_collective:  # as priced (costmodel.grad_buffer_passes_s, section 8c)
        args.append("--ddp-average-in-collective")
    overlap, overlap_notes = overlap_args(problem, plan)
    args += overlap
    if plan.cp > 1:
        from optsearch.targets import context_parallel_attention_error

        why = context_parallel_attention_error(problem, sorted({s.node_type for s in plan.stages}))
        if why is not None:
            raise UnsupportedPlanError(f"plan: cp = {plan.cp}: {why}; re-plan with --max-cp 1")
    attention, attention_note = attention_backend_args(problem, plan)
    args += attention
    padded = padded_vocab_size(model.vocab_size, plan.tp)
    notes.insert(0, (
        f"vocabulary: {model.vocab_size} tokens, padded by Megatron-LM to {padded} (a multiple of "
        f"--make-vocab-size-divisible-by {MAKE_VOCAB_SIZE_DIVISIBLE_BY} x tp {plan.tp}); optsearch priced "
        f"{model.vocab_size}"
    ))
    if plan.cp > 1:
        notes.append(f"data parallel: Megatron-LM derives dp = world size / (tp x cp x pp) = {plan.num_gpus} / "
                     f"({plan.tp} x {plan.cp} x {plan.pp}) = {plan.dp}; launch exactly {plan.num_gpus} processes")
    else:
        notes.append(f"data parallel: Megatron-LM derives dp = world size / (tp x pp) = {plan.num_gpus} / "
                     f"({plan.tp} x {plan.pp}) = {plan.dp}; launch exactly {plan.num_gpus} processes")
    if attention_note is not None:
        notes.append(attention_note)
    if precision_note is not None:
        notes.append(precision_note)
    notes += overlap_notes
    if model.is_moe:
        notes.append(f"experts: ep = {plan.ep}, expert data parallel = dp / ep = {plan.dp // plan.ep}; optsearch "
                     "priced an even token spread over the experts and plain expert GEMMs (upstream's Mixtral example "
                     "adds --moe-grouped-gemm on Ampere or newer GPUs)")
    if model.encoder_only:
        h = model.hidden_size  # token types 2h, pooler h^2 + h, binary head 2h + 2, LM-head transform h^2 + 3h
        extra = 2 * h * h + 8 * h + 2
        notes.append(f"BERT: {BERT_ENTRY} adds token-type embeddings, a pooler and the sentence-order head by default "
                     "(--bert-no-binary-head drops them) and the masked-LM head's dense transform, which optsearch "
                     f"does not price ({extra / 1e6:.1f}M parameters); its tokenizer defaults to "
                     "BertWordPieceLowerCase (give --vocab-file)")
    entry = T5_ENTRY if is_encoder_decoder(model) else BERT_ENTRY if model.encoder_only else GPT_ENTRY
    return MegatronArgs(entry=entry, args=tuple(args), notes=tuple(notes))


def overlap_args(problem: Problem, plan: Plan) -> tuple[list[str], list[str]]:
    """Megatron-LM's communication overlaps as the plan's fields say (docs/targets.md "Communication overlaps"),
    and notes. Refuses what the cost model would not price as upstream runs it: the bucketed overlaps on the
    interleaved schedule (costmodel sections 7c and 7d price them on 1F1B only), --tp-comm-overlap where
    costmodel.tp_comm_overlap_error says so."""
    args: list[str] = []
    notes: list[str] = []
    if (plan.overlap_grad_reduce or plan.overlap_param_gather) and plan.virtual_stages > 1:
        raise UnsupportedPlanError(
            f"plan: overlap_grad_reduce / overlap_param_gather with virtual_stages = {plan.virtual_stages}: optsearch "
            "prices the bucketed overlaps on the non-interleaved schedule only (docs/cost-model.md sections 7c, 7d); "
            "drop them from the plan or re-plan without interleaving")
    if plan.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
    if plan.overlap_param_gather:  # plan_from_dict has checked upstream's rule: distributed optimizer + grad overlap
        args.append("--overlap-param-gather")
        if plan.pp > 1 and plan.param_gather_dispatch == "core_r0.8.0":
            notes.append("--overlap-param-gather: priced as Megatron-Core core_r0.8.0 dispatches the gather (every "
                         "stage's first bucket at zero_grad, docs/cost-model.md section 7d); upstream main dispatches "
                         "a later stage's gather at its first forward, so with pp > 1 the estimate is optimistic")
        elif plan.pp > 1:
            notes.append("--overlap-param-gather: priced as upstream main (d98e8a64) dispatches the gather (a later "
                         "stage's at its first forward, docs/cost-model.md section 7f); Megatron-Core core_r0.8.0 "
                         "dispatches every stage's first bucket at zero_grad (plan field param_gather_dispatch)")
    if plan.tp_comm_overlap:
        if plan.tp == 1:  # upstream turns sequence parallelism off at tp = 1 and then refuses --tp-comm-overlap
            notes.append("tp_comm_overlap: tp = 1 has no tensor-parallel collective to overlap; --tp-comm-overlap not "
                         "emitted (upstream would refuse it without sequence parallelism)")
        else:
            from optsearch.costmodel import GPU_SM_COUNT, tp_comm_overlap_error

            why = tp_comm_overlap_error(problem, plan)
            unknown = sorted({problem.gpu_of(s.node_type).name for s in plan.stages} - set(GPU_SM_COUNT))
            if why is None and unknown:
                why = (f"no SM count for GPU {unknown[0]!r} (known: {', '.join(sorted(GPU_SM_COUNT))}), so the "
                       "userbuffers' share of the GPU is not priced")
            if why is not None:
                raise UnsupportedPlanError(f"plan: tp_comm_overlap: {why}")
            args.append("--tp-comm-overlap")
            notes.append("--tp-comm-overlap: Transformer Engine's userbuffers (the default --transformer-impl "
                         "transformer_engine; upstream's initialize.py raises without it) with its default "
                         "configuration (no --tp-comm-overlap-cfg), as priced (docs/cost-model.md section 3c)")
    return args, notes


# bf16 tensor cores start with Ampere (compute capability 8.0; NVIDIA's A100 whitepaper): Volta (7.0) and Turing (7.5)
# run 16-bit products on fp16 tensor cores only (the catalog's V100 and T4 entries: "no BF16; fp16 only").
BF16_MIN_COMPUTE_CAPABILITY = 8.0


def precision_args(problem: Problem, plan: Plan) -> tuple[list[str], str | None]:
    """--fp16 or --bf16 as the job says, and --fp16 with a note for a bf16 job whose plan puts a stage on a GPU of
    compute capability below 8.0 (no bf16 tensor cores; a GPU spec without compute_capability is not judged). The
    cost model prices fp16 and bf16 products at the same 16-bit tensor-core rate (sustained_fp16_tflop_per_s); what the
    precision changes in its pricing is the gradient dtype (JobSpec.gradients_in_fp32: bf16's default fp32 gradients),
    so the switched launch adds --accumulate-allreduce-grads-in-fp32 where the job was priced with fp32 gradients
    (Megatron turns it on for bf16 by itself, not for fp16), as does an fp16 job priced with them."""
    job = problem.job
    fp32_grads = ["--accumulate-allreduce-grads-in-fp32"] if job.gradients_in_fp32 else []
    if job.precision == "fp16":
        return ["--fp16", *fp32_grads], None
    old = sorted({f"{s.node_type} ({problem.gpu_of(s.node_type).name}, compute capability "
                  f"{problem.gpu_of(s.node_type).compute_capability:.1f})" for s in plan.stages
                  if (problem.gpu_of(s.node_type).compute_capability or BF16_MIN_COMPUTE_CAPABILITY)
                  < BF16_MIN_COMPUTE_CAPABILITY})
    if not old:
        return ["--bf16"], None
    grads = (", with --accumulate-allreduce-grads-in-fp32 for the fp32 gradients it priced" if fp32_grads else "")
    return ["--fp16", *fp32_grads], (
        f"precision: --fp16, not the job's bf16: {', '.join(old)} {'has' if len(old) == 1 else 'have'} no bf16 tensor cores (bf16 needs compute "
        f"capability 8.0); optsearch priced the products at the GPU's fp16 tensor-core rate{grads}; fp16 adds "
        "Megatron's dynamic loss scaling")


def attention_backend_args(problem: Problem, plan: Plan) -> tuple[list[str], str | None]:
    """--attention-backend as priced, and a note when it is auto. Upstream's default is auto (Transformer Engine picks
    flash or cuDNN fused attention where the GPU and head size allow, else its unfused attention), so the launch
    states the backend the cost model priced (costmodel.flash_attention_on per node type): flash where every stage's
    GPU runs it, unfused where none does or the problem turned it off (--no-flash-attention), and auto for a plan
    mixing both, which runs each rank's best backend, as priced."""
    from optsearch.costmodel import flash_attention_on

    on = {flash_attention_on(problem, s.node_type) for s in plan.stages}
    if on == {True}:
        return ["--attention-backend", "flash"], None
    if on == {False}:
        return ["--attention-backend", "unfused"], None
    runs = sorted({s.node_type for s in plan.stages if flash_attention_on(problem, s.node_type)})
    return ["--attention-backend", "auto"], (
        f"attention: --attention-backend auto, Transformer Engine's flash attention on {', '.join(runs)} and its "
        "unfused attention (s x s scores stored) on the other node types, as optsearch priced them")


def _option_values(tokens: Sequence[str]) -> dict[str, str | None]:
    """'--name value' and '--flag' tokens -> {name: value or None}."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise SpecError(f"megatron arguments: {tok!r} is not an option")
        name, eq, value = tok.partition("=")
        if eq:
            out[name] = value
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[name] = tokens[i + 1]
            i += 1
        else:
            out[name] = None
        i += 1
    return out


def plan_from_megatron_args(tokens: Sequence[str], *, node_order: str, dp: int) -> Plan:
    """Parse the parallel settings of a Megatron-LM command line back into a plan.

    Megatron-LM's arguments do not name node types or dp (dp comes from the world size): give them as for
    `estimate --balance`. Recomputation with --recompute-method block is read as full where no stage holds more than
    --recompute-num-layers layers, else as a block plan (recompute_num_layers).
    """
    opts = _option_values(tokens)

    def integer(name: str, default: int | None = None) -> int:
        value = opts.get(name)
        if value is None:
            if default is None:
                raise SpecError(f"megatron arguments: {name} is missing")
            return default
        try:
            return int(value)
        except ValueError:
            raise SpecError(f"megatron arguments: {name} = {value!r}: not an integer") from None

    tp = integer("--tensor-model-parallel-size", 1)
    pp = integer("--pipeline-model-parallel-size", 1)
    mbs = integer("--micro-batch-size")
    if "--num-layers" in opts:
        total = integer("--num-layers")
    else:
        total = integer("--encoder-num-layers") + integer("--decoder-num-layers")
    virtual = 1
    if "--pipeline-model-parallel-layout" in opts:
        counts = list(parse_layout(opts["--pipeline-model-parallel-layout"] or "", option="--pipeline-model-parallel-layout"))
        if len(counts) > pp and pp > 0 and len(counts) % pp == 0:  # interleaved: v x pp virtual stages
            counts, virtual = _fold_chunks(counts, pp), len(counts) // pp
    elif "--decoder-first-pipeline-num-layers" in opts or "--decoder-last-pipeline-num-layers" in opts:
        first = integer("--decoder-first-pipeline-num-layers", 0) if "--decoder-first-pipeline-num-layers" in opts else None
        last = integer("--decoder-last-pipeline-num-layers", 0) if "--decoder-last-pipeline-num-layers" in opts else None
        middle_stages = pp - (first is not None) - (last is not None)
        rest = total - (first or 0) - (last or 0)
        if middle_stages < 0 or (middle_stages and rest % middle_stages) or (not middle_stages and rest):
            raise SpecError(f"megatron arguments: first/last stage layers do not split {total} layers over {pp} stages")
        each = rest // middle_stages if middle_stages else 0
        counts = ([first] if first is not None else []) + [each] * middle_stages + ([last] if last is not None else [])
    else:
        if total % pp:
            raise SpecError(f"megatron arguments: {total} layers do not split evenly over {pp} stages")
        counts = [total // pp] * pp
    if len(counts) != pp:
        raise SpecError(f"megatron arguments: the partition has {len(counts)} stages but pp = {pp}")
    granularity = opts.get("--recompute-granularity")
    modes: list[Recompute]
    block = None
    if granularity is None:
        modes = ["none"] * pp
    elif granularity == "selective":
        modes = ["selective"] * pp
    elif granularity == "full":
        method, n = opts.get("--recompute-method"), integer("--recompute-num-layers")
        if method == "uniform" and n == 1:
            modes = ["full"] * pp
        elif method == "block":
            if virtual > 1 and any(c // virtual > n and n > 0 for c in counts):  # per model chunk
                raise UnsupportedPlanError(
                    f"megatron arguments: --recompute-method block --recompute-num-layers {n} with "
                    f"{virtual} model chunks per rank recomputes part of each chunk; optsearch does not plan block "
                    "recomputation with an interleaved pipeline")
            partial = [i for i, c in enumerate(counts) if c > n and n > 0]
            if partial:  # the first n layers of every stage: a block plan
                block = n
            modes = ["full" if n > 0 else "none"] * pp
        else:
            raise UnsupportedPlanError(
                f"megatron arguments: --recompute-method {method} --recompute-num-layers {n}: optsearch reads full "
                "recomputation as uniform with 1 layer, or block"
            )
    else:
        raise SpecError(f"megatron arguments: --recompute-granularity {granularity!r}: expected full or selective")
    stages = parse_balance("-".join(map(str, counts)), node_order)
    stages = tuple(Stage(node_type=s.node_type, num_layers=s.num_layers, recompute=m) for s, m in zip(stages, modes))
    if block is not None:  # block recomputation: every stage with layers "full", an empty one "none"
        stages = tuple(replace(s, recompute="full" if s.num_layers > 0 else "none") for s in stages)
    cp = integer("--context-parallel-size", 1)
    return Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages, ep=integer("--expert-model-parallel-size", 1), cp=cp,
                distributed_optimizer="--use-distributed-optimizer" in opts, virtual_stages=virtual,
                recompute_num_layers=block, overlap_grad_reduce="--overlap-grad-reduce" in opts,
                overlap_param_gather="--overlap-param-gather" in opts, tp_comm_overlap="--tp-comm-overlap" in opts)


def _fold_chunks(chunks: Sequence[int], pp: int) -> list[int]:
    """Virtual-stage layer counts (layout order) -> layers per pipeline rank; optsearch plans equal chunks per rank."""
    v = len(chunks) // pp
    per_rank = [[chunks[k * pp + r] for k in range(v)] for r in range(pp)]
    uneven = [r for r, cs in enumerate(per_rank) if len(set(cs)) > 1]
    if uneven:
        raise UnsupportedPlanError(
            f"megatron arguments: --pipeline-model-parallel-layout gives rank {uneven[0]} chunks of "
            f"{'-'.join(map(str, per_rank[uneven[0]]))} layers; optsearch plans equal chunks on every rank"
        )
    return [sum(cs) for cs in per_rank]


# ---- the FASOP fork ----------------------------------------------------------------------------------------


def fasop_node_jobs(problem: Problem, plan: Plan) -> tuple[tuple[str, int], ...]:
    """(node type, nodes) of each Slurm job of the fork, in node-rank order: its master job's nodes first (node rank
    0 on), then its slave job's. Refuses a plan the fork's scripts cannot place (UnsupportedPlanError).

    The fork has no flag for the node order: _02_hetero_master_job.sh starts node rank 0 (the A100 node) and
    _02_hetero_slave_job.sh ranks its nodes 1, 2, ... in host-list order. So the plan's node types must form at most
    two runs along the pipeline, in the order the cluster file lists them (a100 before a10 in fasop-a100-a10, as the
    fork's scripts have it), and one NPROC_PER_NODE must serve every node."""
    order = space_options(FASOP, problem).node_type_order or ()
    runs = [plan.stages[i].node_type for i, _ in _runs(plan)]
    if len(runs) > 2 or len(set(runs)) != len(runs) or [t for t in order if t in runs] != runs:
        raise UnsupportedPlanError(
            f"plan: node types along the pipeline {' -> '.join(runs)}: the FASOP fork's scripts fix the node order "
            f"(the master job's node, the A100 node of FASOP's cluster, is node rank 0; the slave job's nodes follow), "
            f"so they run at most two node types, in the cluster's order ({', '.join(order)}); it has no flag for "
            "another order. Re-plan with `solve --target fasop`"
        )
    gpns = {problem.node(t).gpus_per_node for t in runs}
    if len(gpns) > 1:
        raise UnsupportedPlanError(
            f"plan: node types {', '.join(runs)} have {' and '.join(map(str, sorted(gpns)))} GPUs per node; the FASOP "
            "fork starts NPROC_PER_NODE processes on every node (one value). Re-plan with `solve --target fasop`"
        )
    counts: dict[str, int] = {}
    for n in launch_nodes(problem, plan):
        if n.nproc != problem.node(n.node_type).gpus_per_node:
            raise UnsupportedPlanError(
                f"plan: node {n.host} would run {n.nproc} of its {problem.node(n.node_type).gpus_per_node} GPUs; the "
                "FASOP fork starts NPROC_PER_NODE processes on every node, so every node must be full"
            )
        counts[n.node_type] = counts.get(n.node_type, 0) + 1
    return tuple((t, counts[t]) for t in runs)


def fasop_settings(problem: Problem, plan: Plan, *, allow_recompute_superset: bool = False) -> tuple[str, list[str]]:
    """The FASOP fork's settings (its _00_conf.sh variables) and arguments -> (text, notes).

    The fork takes the split as --balance (transformer layers per stage, '-'-joined), for encoder-decoder models too:
    stages below --pipeline-model-parallel-split-rank run the encoder, and each takes its --balance entry
    (Megatron-LM-2/megatron/model/transformer.py; its own example is T5 with 11-13-11-13 and split rank 2).
    """
    check_launchable(problem, plan)
    overlaps = [k for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                            "ddp_average_in_collective") if getattr(plan, k)]
    if overlaps:
        raise UnsupportedPlanError(
            f"plan: {', '.join(overlaps)}: optsearch's FASOP launch does not emit Megatron's overlap flags, so the "
            "fork would run the plan slower than priced; re-plan with --target fasop, or launch for upstream "
            "(--format megatron)")
    if plan.virtual_stages > 1:
        raise UnsupportedPlanError(
            f"plan: virtual_stages = {plan.virtual_stages}: the FASOP fork builds balance[rank] layers in every model "
            "chunk (megatron/model/transformer.py), so it cannot run an interleaved pipeline; re-plan with "
            "--target fasop, or launch for upstream (--format megatron)"
        )
    model = problem.model
    fork_model = fasop_model(model)
    if plan.cp > 1:
        raise UnsupportedPlanError(
            f"plan: cp = {plan.cp}: the FASOP fork (Megatron-LM of 2023) has no context parallelism; re-plan with "
            "--target fasop (cp = 1), or launch it for upstream Megatron-LM (--format megatron)"
        )
    if problem.flash_attention:
        from optsearch.costmodel import flash_attention_on

        if any(flash_attention_on(problem, s.node_type) for s in plan.stages):
            raise UnsupportedPlanError(
                "plan: priced with flash attention (upstream Megatron-LM's default), which the FASOP fork lacks; "
                "re-plan with --target fasop or --no-flash-attention, or launch for upstream (--format megatron)"
            )
    jobs = fasop_node_jobs(problem, plan)
    recompute, notes = recompute_args(plan, allow_superset=allow_recompute_superset)
    if model.ffn_hidden_size != fork_model.ffn_hidden_size:
        notes.append(
            f"ffn width: the fork's run script builds MODEL={fork_model.name} with ffn {fork_model.ffn_hidden_size}, "
            f"this plan was priced with {model.name}'s {model.ffn_hidden_size}; edit --ffn-hidden-size in "
            "_01_run_inter.sh to run what was priced"
        )
    args = [
        "--tensor-model-parallel-size", str(plan.tp),
        "--pipeline-model-parallel-size", str(plan.pp),
        "--micro-batch-size", str(plan.micro_batch_size),
        "--global-batch-size", str(problem.job.global_batch_size),
        "--balance", plan.balance,
    ]
    split_rank: int | None = None
    if is_encoder_decoder(model) and plan.pp > 1:
        enc = model.kinds[0]
        counts = [s.num_layers for s in plan.stages]
        prefix = [sum(counts[: i + 1]) for i in range(plan.pp)]
        if enc.num_layers not in prefix or prefix.index(enc.num_layers) + 1 >= plan.pp:
            raise UnsupportedPlanError(
                f"plan: partition {plan.balance}: no stage boundary falls between the {enc.num_layers} encoder and "
                f"the decoder layers of {model.name}; the FASOP fork runs each stage wholly encoder or decoder "
                "(--pipeline-model-parallel-split-rank)"
            )
        split_rank = prefix.index(enc.num_layers) + 1
        args += ["--pipeline-model-parallel-split-rank", str(split_rank)]
    args += recompute
    if plan.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if sequence_parallel_on(problem.job, plan.tp):
        args.append("--sequence-parallel")  # the fork's 2023 Megatron-LM has it (megatron/arguments.py)
    nodes = launch_nodes(problem, plan)
    nproc = problem.node(jobs[0][0]).gpus_per_node
    lines = [
        f"# FASOP fork settings for {_plan_summary(problem, plan)}",
        f"# Fork: {FASOP_FORK}.",
        "# These are the variables of the fork's Megatron-LM-2/_00_conf.sh (set them there: its if-block on MODEL",
        "# sets HIDDEN_SIZE and NUM_LAYERS); its run script _01_run_inter.sh passes the model's arguments and",
        "# --balance $PARTITION; FASOP_ARGS below lists every parallel argument the plan needs.",
        *(f"# note: {n}" for n in notes),
        "# Node order (the fork has no flag for it; its Slurm scripts fix it):",
    ]
    first = 0
    for k, (node_type, count) in enumerate(jobs):
        script = ("_02_homo_job.sh" if len(jobs) == 1 else
                  "_02_hetero_master_job.sh" if k == 0 else "_02_hetero_slave_job.sh")
        stages = sorted({s for n in nodes if n.node_type == node_type for s in n.stages})
        lines.append(f"#   node rank{'s' if count > 1 else ''} {_ranks(first, count)}: {count} x {node_type} "
                     f"({script}, --nodes={count}), {_stages_text(stages)}")
        first += count
    lines += [
        f"HOMOGENEOUS_CLUSTER={'true' if len(jobs) == 1 else 'false'}",
        f"MODEL={shlex.quote(fork_model.name)}",
        f"NPROC_PER_NODE={nproc}",
        f"NNODES={len(nodes)}",
        f"WORLD_SIZE={plan.num_gpus}",
        f"GLOBAL_BATCH_SIZE={problem.job.global_batch_size}",
        f"MICRO_BATCH_SIZE={plan.micro_batch_size}",
        f"TENSOR_MP_SIZE={plan.tp}",
        f"DP_SIZE={plan.dp}",
        f"PIPELINE_MP_SIZE={plan.pp}",
        f'PARTITION="{plan.balance}"',
        f"ZERO={'true' if plan.distributed_optimizer else 'false'}",
    ]
    if split_rank is not None:
        lines += [
            "# encoder-decoder: stages below the split rank run the encoder, each with its PARTITION entry",
            f"PIPELINE_MODEL_PARALLEL_SPLIT_RANK={split_rank}",
        ]
    lines += [
        "FASOP_ARGS=(",
        *_arg_lines(args),
        ")",
    ]
    return "\n".join(lines) + "\n", notes


# ---- nodes, torchrun, hostfile, Slurm ----------------------------------------------------------------------


def _host_prefix(node_type: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", node_type).strip("-").lower() or "node"


def _runs(plan: Plan) -> list[tuple[int, int]]:
    """(first, last) stage index of each run of consecutive stages of one node type."""
    runs: list[tuple[int, int]] = []
    for i, stage in enumerate(plan.stages):
        if runs and plan.stages[runs[-1][1]].node_type == stage.node_type:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def launch_nodes(problem: Problem, plan: Plan) -> tuple[LaunchNode, ...]:
    """The nodes in node-rank order: each run of consecutive same-type stages on fresh nodes of that type, filled
    GPU by GPU in Megatron's rank order (the packing costmodel.place prices)."""
    w = plan.gpus_per_stage
    nodes: list[LaunchNode] = []
    per_type: dict[str, int] = {}
    for run, (i, j) in enumerate(_runs(plan)):
        node_type = plan.stages[i].node_type
        gpn = problem.node(node_type).gpus_per_node
        run_first_rank, run_gpus = i * w, (j - i + 1) * w
        for k in range(math.ceil(run_gpus / gpn)):
            first = run_first_rank + k * gpn
            nproc = min(gpn, run_gpus - k * gpn)
            stages = tuple(range(first // w, (first + nproc - 1) // w + 1))
            index = per_type.get(node_type, 0)
            per_type[node_type] = index + 1
            nodes.append(LaunchNode(node_rank=len(nodes), node_type=node_type, run=run,
                                    host=f"{_host_prefix(node_type)}-{index}", nproc=nproc,
                                    first_rank=first, stages=stages))
    assert per_type == place(problem, plan).nodes, "launch nodes disagree with costmodel.place"
    return tuple(nodes)


def slurm_components(problem: Problem, plan: Plan) -> tuple[SlurmComponent, ...]:
    """One component per run of same-type stages (the nodes of a run are its own)."""
    nodes = launch_nodes(problem, plan)
    runs = sorted({n.run for n in nodes})
    out = []
    for run in runs:
        members = tuple(n for n in nodes if n.run == run)
        out.append(SlurmComponent(node_type=members[0].node_type, nodes=members,
                                  gpus_per_node=problem.node(members[0].node_type).gpus_per_node))
    return tuple(out)


def _plan_summary(problem: Problem, plan: Plan) -> str:
    return (f"{problem.model.name} on {problem.cluster.name}: tp {plan.tp}, dp {plan.dp}, pp {plan.pp}, "
            f"micro-batch {plan.micro_batch_size}, stages {plan.balance}")


def _arg_lines(args: Sequence[str]) -> list[str]:
    """Options one per line ('--name value'), shell-quoted, indented for a bash array."""
    lines: list[str] = []
    for tok in args:
        if tok.startswith("--") or not lines:
            lines.append("  " + shlex.quote(tok))
        else:
            lines[-1] += " " + shlex.quote(tok)
    return lines


def _ranks(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def _stages_text(stages: Sequence[int]) -> str:
    return ("stage " if len(stages) == 1 else "stages ") + _stage_ranges(stages)


def args_file_text(problem: Problem, plan: Plan, margs: MegatronArgs) -> str:
    lines = [
        f"# Megatron-LM arguments for {_plan_summary(problem, plan)}",
        f"# Generated by `optsearch launch`; targets {MEGATRON_LM_TARGET}.",
        "# Source this file; run MEGATRON_ENTRY with MEGATRON_ARGS plus your data and tokenizer arguments",
        "# (--data-path, --tokenizer-type, --vocab-file, ...), learning-rate schedule and checkpointing.",
        *(f"# note: {n}" for n in margs.notes),
        f"MEGATRON_ENTRY={margs.entry}",
    ]
    if plan.tp > 1 or plan.cp > 1:
        lines.append(f"export CUDA_DEVICE_MAX_CONNECTIONS=1  # upstream validate_args asserts it with "
                     f"{'tp > 1' if plan.tp > 1 else 'cp > 1'} (before Blackwell)")
    lines += [
        "MEGATRON_ARGS=(",
        *_arg_lines(margs.args),
        ")",
    ]
    return "\n".join(lines) + "\n"


def hostfile_text(problem: Problem, plan: Plan, nodes: Sequence[LaunchNode]) -> str:
    lines = [
        f"# Hosts for {_plan_summary(problem, plan)}",
        "# One node per line in node-rank order: the k-th host is --node-rank k. Replace the placeholder names with",
        "# hosts of the same node type; keep the order (it puts every pipeline stage on the node type planned).",
    ]
    for n in nodes:
        lines.append(f"# node rank {n.node_rank}: {n.node_type}, global ranks {_ranks(n.first_rank, n.nproc)}, "
                     f"{_stages_text(n.stages)}")
        lines.append(f"{n.host} slots={n.nproc}")
    return "\n".join(lines) + "\n"


def _stage_ranks(width: int) -> str:
    """Stage i's global ranks for `width` GPUs per stage: 'global rank i' for one, else '[w i, w (i + 1))'."""
    return "global rank i" if width == 1 else f"global ranks [{width} i, {width} (i + 1))"


def torchrun_script(problem: Problem, plan: Plan, margs: MegatronArgs, nodes: Sequence[LaunchNode],
                    master_port: int = DEFAULT_MASTER_PORT) -> str:
    nnodes = len(nodes)
    lines = [
        "#!/usr/bin/env bash",
        f"# torchrun launch for {_plan_summary(problem, plan)}",
        "# Run `bash torchrun.sh NODE_RANK [extra Megatron-LM args...]` on every node of the hostfile (its k-th host",
        "# is node rank k). Megatron-LM orders ranks tp, then cp, then dp, then pp, so pipeline stage i runs on",
        f"# {_stage_ranks(plan.gpus_per_stage)}, and these node ranks put every stage on the node type the plan chose.",
        "# Set MEGATRON_DIR to your Megatron-LM checkout and MASTER_ADDR to the host of node rank 0.",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f'source "$HERE/{ARGS_FILE}"',
        'MEGATRON_DIR="${MEGATRON_DIR:-.}"',
        'if [ ! -f "$MEGATRON_DIR/$MEGATRON_ENTRY" ]; then',
        f'  echo "{TORCHRUN_FILE}: $MEGATRON_DIR/$MEGATRON_ENTRY not found (from $PWD): set MEGATRON_DIR to your '
        'Megatron-LM checkout" >&2',
        "  exit 2",
        "fi",
        f'MASTER_ADDR="${{MASTER_ADDR:-{nodes[0].host}}}"',
        f'MASTER_PORT="${{MASTER_PORT:-{master_port}}}"',
    ]
    if plan.tp > 1 or plan.cp > 1:
        lines.append(f"export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM requires it with "
                     f"{'tp > 1' if plan.tp > 1 else 'cp > 1'} (before Blackwell)")
    lines += [
        f'NODE_RANK="${{1:?usage: bash torchrun.sh NODE_RANK (0..{nnodes - 1}) [extra Megatron-LM args]}}"',
        "shift",
        'case "$NODE_RANK" in',
    ]
    for n in nodes:
        lines.append(f"  # {n.host}: {n.node_type}, global ranks {_ranks(n.first_rank, n.nproc)}, "
                     f"{_stages_text(n.stages)}")
        lines.append(
            f"  {n.node_rank}) torchrun --nnodes {nnodes} --node-rank {n.node_rank} --nproc-per-node {n.nproc} "
            '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" '
            '"$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;'
        )
    lines += [
        f'  *) echo "torchrun.sh: node rank $NODE_RANK: this plan has node ranks 0..{nnodes - 1}" >&2; exit 2 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"


def slurm_script(problem: Problem, plan: Plan, nodes: Sequence[LaunchNode],
                 master_port: int = DEFAULT_MASTER_PORT, launch_dirs: Sequence[str] = ()) -> str:
    """job.sbatch. Slurm runs a copy of the batch script from its spool folder, so the script cannot find torchrun.sh
    beside "$0": it looks in $OPTSEARCH_LAUNCH_DIR when set, else in launch_dirs (the folder `launch --out` wrote:
    absolute, then as given, relative to the submit folder), else in the submit folder. Arguments after the script
    (`sbatch job.sbatch --data-path ...`) go to every torchrun.sh, as `bash torchrun.sh NODE_RANK ...` takes them."""
    import shlex

    comps = slurm_components(problem, plan)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", problem.model.name)
    lines = [
        "#!/usr/bin/env bash",
        f"# Slurm heterogeneous job for {_plan_summary(problem, plan)}",
        "# One hetjob component per run of consecutive same-type pipeline stages. Edit each --constraint (or use",
        "# --partition) so that it selects nodes of that type. Submit with extra Megatron-LM arguments after the",
        f"# script, and MEGATRON_DIR set to your Megatron-LM checkout: MEGATRON_DIR=... sbatch PATH/{SBATCH_FILE} "
        "--data-path ...",
        f"# Slurm runs a copy of this script, so it looks for {TORCHRUN_FILE} and {ARGS_FILE} in $OPTSEARCH_LAUNCH_DIR if set,",
        "# else " + ("in the folder optsearch wrote them to (absolute, then relative to the submit folder), else "
                     if launch_dirs else "") + "in the folder sbatch ran in.",
        f"#SBATCH --job-name=optsearch-{name}",
    ]
    for k, comp in enumerate(comps):
        if k:
            lines.append("#SBATCH hetjob")
        first = comp.nodes[0]
        stages = sorted({s for n in comp.nodes for s in n.stages})
        lines += [
            f"# component {k}: {comp.node_type}, node rank{'s' if len(comp.nodes) > 1 else ''} "
            f"{_ranks(first.node_rank, len(comp.nodes))}, "
            f"{_stages_text(stages)}",
            f"#SBATCH --nodes={len(comp.nodes)}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --gres=gpu:{comp.gpus_per_node}",
            "#SBATCH --exclusive",
            f"#SBATCH --constraint={comp.node_type}",
        ]
    folders = " ".join(shlex.quote(d) for d in (*launch_dirs, "."))
    lines += [
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR:-.}"',
        'if [ -n "${OPTSEARCH_LAUNCH_DIR:-}" ]; then folders=("$OPTSEARCH_LAUNCH_DIR"); else folders=(' + folders + "); fi",
        'LAUNCH_DIR=""',
        'for folder in "${folders[@]}"; do',
        f'  if [ -f "$folder/{TORCHRUN_FILE}" ] && [ -f "$folder/{ARGS_FILE}" ]; then '
        'LAUNCH_DIR="$(cd "$folder" && pwd)"; break; fi',
        "done",
        'if [ -z "$LAUNCH_DIR" ]; then',
        f'  echo "{SBATCH_FILE}: no {TORCHRUN_FILE} and {ARGS_FILE} in ${{folders[*]}} (from $PWD); set '
        'OPTSEARCH_LAUNCH_DIR to the folder optsearch launch wrote" >&2',
        "  exit 2",
        "fi",
        'export MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}" '
        '| head -n 1)"',
        f'export MASTER_PORT="${{MASTER_PORT:-{master_port}}}"',
        "# each component's nodes take the next node ranks, in order; SLURM_NODEID counts nodes within the step",
        "pids=()",
    ]
    for k, comp in enumerate(comps):
        offset = comp.nodes[0].node_rank
        het = f"--het-group={k} " if len(comps) > 1 else ""
        lines.append(
            f"srun {het}--nodes={len(comp.nodes)} --ntasks-per-node=1 "
            f"bash -c 'bash \"$0\" $(({offset} + SLURM_NODEID)) \"$@\"' \"$LAUNCH_DIR/{TORCHRUN_FILE}\" \"$@\" &"
        )
        lines.append("pids+=($!)")
    lines += [
        "# the job fails (and Slurm says so) when any component fails: a bare `wait` would return 0",
        "status=0",
        'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


# ---- all files of one format -------------------------------------------------------------------------------


def memory_check(problem: Problem, plan: Plan) -> str | None:
    """None when the cost model says every stage fits in GPU memory, else one line naming the worst stage."""
    from optsearch.units import bytes_to_gib

    est = estimate(problem, plan)
    if est.fits:
        return None
    over = [(st.memory_bytes / st.memory_capacity_bytes, i, st) for i, st in enumerate(est.stages) if not st.fits]
    _, i, st = max(over)
    return (f"plan: stage {i} ({st.node_type}) needs {bytes_to_gib(st.memory_bytes):.1f} GiB per GPU, its GPU has "
            f"{bytes_to_gib(st.memory_capacity_bytes):.1f} GiB usable after the "
            f"{problem.memory_headroom:.0%} headroom ({len(over)} of {plan.pp} stages do not fit, by "
            "optsearch's own estimate)")


def launch_files(problem: Problem, plan: Plan, fmt: str, *, allow_recompute_superset: bool = False,
                 master_port: int = DEFAULT_MASTER_PORT,
                 allow_no_fit: bool = False, out_dir: str | None = None) -> tuple[dict[str, str], list[str]]:
    """{file name: text} for one format, and notes for the user. Raises before anything is written.
    out_dir: the folder the files go to (as the user gave it), which job.sbatch records to find torchrun.sh.

    A plan whose own estimate does not fit in GPU memory is refused (UnsupportedPlanError), or with allow_no_fit
    emitted with a warning note in the files and on stderr."""
    if fmt not in LAUNCH_FORMATS:
        raise SpecError(f"--format = {fmt!r}: must be one of {', '.join(LAUNCH_FORMATS)}")
    check_launchable(problem, plan)
    misfit = memory_check(problem, plan)
    if misfit is not None and not allow_no_fit:
        raise UnsupportedPlanError(f"{misfit}; it would run out of memory. Re-plan, or pass --allow-no-fit to "
                                   "write the files anyway")
    warning = [f"WARNING: does not fit: {misfit}"] if misfit is not None else []
    if fmt == "fasop":
        text, notes = fasop_settings(problem, plan, allow_recompute_superset=allow_recompute_superset)
        if warning:
            text = text.replace("\n", f"\n# {warning[0]}\n", 1)
        return {FASOP_FILE: text}, warning + notes
    margs = megatron_args(problem, plan, allow_recompute_superset=allow_recompute_superset)
    margs = MegatronArgs(entry=margs.entry, args=margs.args, notes=tuple(warning) + margs.notes)
    files = {ARGS_FILE: args_file_text(problem, plan, margs)}
    if fmt in ("torchrun", "slurm"):
        nodes = launch_nodes(problem, plan)
        files[TORCHRUN_FILE] = torchrun_script(problem, plan, margs, nodes, master_port)
        if fmt == "torchrun":
            files[HOSTFILE] = hostfile_text(problem, plan, nodes)
        else:
            dirs: list[str] = []
            if out_dir is not None:
                import os

                dirs.append(os.path.abspath(out_dir))
                if not os.path.isabs(out_dir):
                    dirs.append(os.path.normpath(out_dir))
            files[SBATCH_FILE] = slurm_script(problem, plan, nodes, master_port, launch_dirs=dirs)
    return files, list(margs.notes)


# ---- plan files --------------------------------------------------------------------------------------------

_PER_STAGE_DEGREES = ("tp", "dp", "tensor_parallel", "data_parallel", "tensor_model_parallel_size")


def plan_for_launch(data: Any, source: str) -> Plan:
    """plan_from_dict, refusing per-stage tp/dp that differ: Megatron-LM runs one tp and one dp on every stage."""
    body = data["plan"] if isinstance(data, dict) and isinstance(data.get("plan"), dict) else data
    if isinstance(body, dict) and isinstance(body.get("stages"), list):
        for key in _PER_STAGE_DEGREES:
            values = [(i, s[key]) for i, s in enumerate(body["stages"]) if isinstance(s, dict) and key in s]
            if not values:
                continue
            plan_wide = body.get("tp" if key in ("tp", "tensor_parallel", "tensor_model_parallel_size") else "dp")
            differing = [(i, v) for i, v in values if v != plan_wide]
            if differing or len(values) != len(body["stages"]):
                i, v = (differing or values)[0]
                raise UnsupportedPlanError(
                    f"{source}: stages[{i}].{key} = {v!r}: per-stage {key} (plan-wide {plan_wide!r}); Megatron-LM "
                    "runs the same tp and dp on every pipeline stage, so this plan cannot be launched"
                )
    return plan_from_dict(data, source)

