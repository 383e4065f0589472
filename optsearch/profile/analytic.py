"""Analytic (roofline-style) per-layer times: the built-in default profile.

For one layer on one GPU of a tp-way tensor-parallel group, with micro-batch b:

    forward_s = W / (peak x efficiency(W, gpu)) + traffic_bytes / hbm_bandwidth + launch_s,   W = flops / tp
              = W / sustained + GEMM_FIXED_S + traffic_bytes / hbm_bandwidth + launch_s
    backward_s = 2 x forward_s

FLOPs (a multiply-add is 2 FLOPs; h hidden, s sequence, q = heads x head_dim, k = kv_heads x head_dim, f ffn):
    attention projections  2 b s h (q + 2k) + 2 b s q h
    attention core         4 b s^2 q                       (Q K^T and attention x V)
    MLP                    2 b s h f x (3 if gated else 2)
    mixture of experts     2 b s h E (router) + k x 2 b s h f_e x (3 if gated else 2)   (k of E experts per token)
    cross-attention        attention projections + core again (T5 decoder)
Memory traffic of the element-wise kernels (layer norm, softmax, dropout, GeLU, residual): every activation byte
that Korthikanti et al. (2022) count as stored is written once and read once:
    traffic_bytes = 2 x s b h (10 + 24/tp + 5 a s / (h tp))
Efficiency saturates with the work per GPU (small matrix products do not fill the GPU):
    efficiency(W, gpu) = (sustained / peak) x W / (W + sustained x GEMM_FIXED_S)
sustained is the GPU's sustained large-GEMM rate (catalog `sustained_fp16_tflop_per_s`, cited per GPU; else
EFFICIENCY_MAX x peak); GEMM_FIXED_S is the fixed time per layer forward that a bf16 GEMM benchmark of
transformer-layer shapes on an H100 gave (bench/gemm/, docs/cost-model.md section 14).
The embedding is a gather (memory bound: it writes and reads s b h x 2 bytes); the LM head is a matrix product
2 b s h V / tp plus the fp32 logits and softmax traffic (3 x 4 b s V / tp bytes).
Unfused attention kernels (profile option `unfused_kernels`, off by default): an engine without a fused
scale-mask-softmax kernel (Megatron-LM v1.1.5 without --scaled-*-masked-softmax-fusion, as in AMP's DeepSpeed fork)
moves more bytes over the a s^2 b / tp score elements than the stored-bytes term above charges (10 B forward,
20 B backward per element): 17 B forward (baddbmm writes the scores 2; masked_fill_ in place reads and writes 4;
softmax 4; dropout reads 2, writes 2 and a 1-byte mask; the bmm with V reads 2) and 23 B backward (the bmm's
gradient writes 2 and reads the probabilities 2; dropout backward 5; softmax backward 6; masked_fill_ backward 4;
the baddbmm backward reads the score gradient twice, 4), so it adds 7 B forward and 3 B backward per element:
    unfused_extra_forward_s  = 7 a s^2 b / tp / hbm_bandwidth   (x 2 for a cross-attention kind)
    unfused_extra_backward_s = 3 a s^2 b / tp / hbm_bandwidth
Host time of an eager engine (profile option `eager_engine`, off by default): PyTorch issues kernels
asynchronously, so one forward pass of a layer takes the longer of the GPU's time and the host's (Python,
dispatch, launch) time, a launch-bound roofline; the host's time is the engine's op count, counted from its source,
times the host time per op of an eager transformer measured where the host bounds it (HuggingFace BERT-base on an
RTX 2080 Ti in The Framework Tax's published measurements: 11.26 ms / 366 ops = 30.8 us; HOST_S_PER_TORCH_OP):
    gpu_forward_s  = W / sustained + GEMM_FIXED_S + traffic_bytes / hbm_bandwidth (+ the unfused extra)
    host_forward_s = (layer_ops + 2 x tp_call_ops if tp > 1) x HOST_S_PER_TORCH_OP
    forward_s      = forward_passes x max(gpu_forward_s, host_forward_s)
    backward_s     = 2 x gpu_forward_s (+ the unfused backward extra): autograd's C++ engine, no Python
See EAGER_ENGINES and docs/cost-model.md section 14, "Host time of eager engines".
Tensor-parallel all-reduces are NOT included (tp_comm_included = False): the cost model adds them on the
node's intra-node link, so that they follow the cluster rather than the GPU. See docs/cost-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optsearch.errors import ProfileError
from optsearch.profile.table import DERIVED_FROM_KEY, EAGER_ENGINE_KEY, ProfileEntry, ProfileTable
from optsearch.spec import GpuSpec, ModelSpec
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND, LayerKindSpec
from optsearch.units import tflop_per_s_to_flop_per_s

EFFICIENCY_MAX = 0.75  # sustained / peak when the catalog gives no sustained rate
GEMM_FIXED_S = 41e-6  # fixed time of one layer's forward GEMMs (H100 fit: 124 us for forward + backward, / 3)
KERNEL_LAUNCH_S = 5e-6
KERNELS_PER_LAYER = 20
BACKWARD_OVER_FORWARD = 2.0
# Bytes per attention-score element, 2-byte dtype (module docstring, docs/cost-model.md section 2, "Unfused
# attention kernels"): what the stored-bytes term charges, and what an unfused scale-mask-softmax engine moves.
SCORE_BYTES_CHARGED_FORWARD = 10  # 2 x Korthikanti's 5 stored bytes (softmax output 2, dropout mask 1, output 2)
SCORE_BYTES_CHARGED_BACKWARD = 20  # BACKWARD_OVER_FORWARD x the forward's
UNFUSED_SCORE_BYTES_FORWARD = 17
UNFUSED_SCORE_BYTES_BACKWARD = 23
# Host (CPU) time of one eager PyTorch op in a transformer layer, Python, nn.Module calls, dispatch and kernel
# launch included, from a public measurement of an eager engine in the regime where the host bounds it: The
# Framework Tax (Fernandez et al., EMNLP 2023; JaredFern/Framework-Tax, experiments/pretrained/
# 2022_0919_pretrained-fp16/2080Ti.csv): HuggingFace BERT-base (transformers 4.22.1, PyTorch 1.12.1, fp16, eval,
# torch.utils.benchmark mean of 10) takes 11.26 ms at batch 1 and 11.97 ms at batch 8 (sequence 128) on an RTX
# 2080 Ti: flat in the batch, so host-bound. Its forward makes 366 torch calls, counted from transformers 4.22.1's
# modeling_bert.py as this file counts Megatron's (BertLayer 29: three projections, three view + permute, transpose,
# matmul, scale, mask add, softmax, dropout, matmul, permute, contiguous, view; dense, dropout, add, LayerNorm;
# dense, GeLU; dense, dropout, add, LayerNorm; 12 layers: 348; outside the layers 18: the attention mask's ones,
# slice, to, subtract, multiply; the token types' slice, expand; the embeddings' slice, three lookups, two adds,
# LayerNorm, dropout; the pooler's slice, dense, tanh). 11.26 ms / 366 = 30.8 us per op. Inference without autograd,
# so a floor for a training forward. (PyTorch's bare per-op dispatch is far less, 1 / 280,000 s = 3.6 us for tiny
# tensors: Horace He, "Making Deep Learning Go Brrrr From First Principles", https://horace.io/brrr_intro.html,
# "Overhead"; a layer's host time is mostly the rest.) docs/cost-model.md section 14, "Host time of eager engines".
BERT_BASE_HOST_BOUND_S = 11.26e-3  # RTX 2080 Ti, batch 1, sequence 128, fp16 (Framework Tax, 2080Ti.csv)
BERT_BASE_FORWARD_OPS = 12 * 29 + 18
HOST_S_PER_TORCH_OP = BERT_BASE_HOST_BOUND_S / BERT_BASE_FORWARD_OPS


@dataclass(frozen=True, slots=True)
class EagerEngine:
    """What an eager engine's host does per transformer layer, counted from the engine's source."""

    name: str
    layer_ops: int  # torch calls (ops, autograd-function applies, RNG-state calls) in one forward pass at tp 1
    tp_call_ops: int  # extra torch calls per tensor-parallel all-reduce call in the forward (2 calls per pass)
    forward_passes: int  # times the pipeline's layer wrapper runs the layer's forward per micro-batch
    source: str
    # The pipeline engine that runs the stages (a key of optsearch.costmodel.PIPE_ENGINES), None: Megatron-LM's own
    # 1F1B schedule. AMP's fork runs DeepSpeed 0.3.13's PipelineEngine (docs/cost-model.md section 6c).
    pipe_engine: str | None = None


# Megatron-LM v1.1.5 as AMP's DeepSpeed fork ships it (DachengLi1/AMP@72eeea4, DeepSpeed/DeepSpeedExamples/
# Megatron-LM-v1.1.5-3D_parallelism, launched by examples/ds_pretrain_gpt2_pipe.sh: fp16, no fusion flags). Ops of
# ParallelTransformerLayer.forward (megatron/model/transformer.py, mpu/layers.py, mpu/mappings.py, mpu/random.py):
# input layer norm 1; ColumnParallelLinear QKV 2 (copy_to_model_parallel_region apply, F.linear); view 1; split 1;
# two views 2; torch.empty 1; baddbmm with three transposes 4; view 1; masked_fill_ 1; softmax 1; the RNG tracker's
# fork 4 (get_rng_state twice, set_state twice); dropout 1; context: two views, transpose, bmm, view, permute,
# contiguous, view 8; RowParallelLinear dense 2 (F.linear, reduce_from_model_parallel_region apply); expand_as 1;
# bias + dropout + residual 3; post-attention layer norm 1; MLP 6 (h->4h 2, bias add 1, gelu 1, 4h->h 2);
# expand_as 1; bias + dropout + residual 3: 45. Each tp > 1 all-reduce (mappings._reduce) adds
# torch.distributed.all_reduce and the two torch.cuda.synchronize() of timers('mp allreduce').start()/stop(): 3.
# ParallelTransformerLayerPipe.forward runs super().forward(*args) twice (once inside a print of its shape).
EAGER_ENGINES: dict[str, EagerEngine] = {
    "amp-megatron-v1.1.5": EagerEngine(
        name="amp-megatron-v1.1.5", layer_ops=45, tp_call_ops=3, forward_passes=2,
        source="DachengLi1/AMP@72eeea4 DeepSpeed/DeepSpeedExamples/Megatron-LM-v1.1.5-3D_parallelism",
        pipe_engine="deepspeed-0.3.13"),
}
TP_CALLS_PER_FORWARD_PASS = 2  # attention's dense and the MLP's 4h->h all-reduce (no sequence parallelism)


def attention_projection_flops(model: ModelSpec, b: int) -> float:
    h, s, q, k = model.hidden_size, model.seq_length, model.query_width, model.kv_width
    return 2.0 * b * s * h * (q + 2 * k) + 2.0 * b * s * q * h


def attention_core_flops(model: ModelSpec, b: int) -> float:
    s, q = model.seq_length, model.query_width
    return 4.0 * b * s * s * q


def mlp_flops(model: ModelSpec, b: int) -> float:
    h, s, f = model.hidden_size, model.seq_length, model.ffn_hidden_size
    return 2.0 * b * s * h * f * (3 if model.gated_mlp else 2)


def moe_mlp_flops(model: ModelSpec, kind: LayerKindSpec, b: int) -> float:
    """A mixture-of-experts MLP: the router GEMM 2 b s h E, and every token through k experts of width f_e:
    k x 2 b s h f_e x (3 if gated else 2). Tokens are assumed spread evenly over the experts (the aux-loss load
    balancing upstream's Mixtral example trains with), so the work per GPU does not depend on expert parallelism:
    an ep group of ep ranks holds ep x b s tokens and ep x the experts' share of work."""
    h, s, f = model.hidden_size, model.seq_length, model.expert_ffn_size(kind)
    router = 2.0 * b * s * h * kind.num_experts
    return router + kind.moe_router_topk * 2.0 * b * s * h * f * (3 if model.gated_mlp else 2)


def layer_forward_flops(model: ModelSpec, kind: LayerKindSpec, b: int) -> float:
    """Forward FLOPs of one whole layer (all tp ranks together) at micro-batch b."""
    attention = attention_projection_flops(model, b) + attention_core_flops(model, b)
    mlp = moe_mlp_flops(model, kind, b) if kind.is_moe else mlp_flops(model, b)
    return attention * (2 if kind.cross_attention else 1) + mlp


def attention_core_fraction(model: ModelSpec, kind: LayerKindSpec) -> float:
    """Share of a layer's forward FLOPs in the attention core: what selective recomputation recomputes."""
    core = attention_core_flops(model, 1) * (2 if kind.cross_attention else 1)
    return core / layer_forward_flops(model, kind, 1)


def korthikanti_activation_bytes(model: ModelSpec, b: int, tp: int) -> float:
    """s b h (10 + 24/t + 5 a s / (h t)): activation bytes of one layer, no sequence parallelism (2-byte dtype)."""
    s, h, a = model.seq_length, model.hidden_size, model.num_attention_heads
    return s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))


def moe_activation_extra_bytes(model: ModelSpec, kind: LayerKindSpec, b: int, tp: int) -> float:
    """What a mixture-of-experts layer stores beyond Korthikanti's dense layer (0 for a dense kind, 2-byte dtype):

        s b [ 2 h (k - 1) + (k c f_e - 16 h) / t + 4 E ]

    Korthikanti's MLP keeps its input (2 s b h) and 16 s b h / t of inner tensors (two 2-byte tensors of width 4h).
    An expert MLP keeps the input of each of the k routed copies of a token (k x 2 s b h: the permuted tokens,
    all-gathered over tp by the alltoall dispatcher), its inner tensors k x c f_e / t per token (c = 6 gated: fc1
    output of width 2 f_e and the SwiGLU output, 2 bytes each; c = 4 otherwise: fc1 output and GeLU output), and
    the router's fp32 scores s b E x 4."""
    if not kind.is_moe:
        return 0.0
    s, h, k, e = model.seq_length, model.hidden_size, kind.moe_router_topk, kind.num_experts
    c = 6 if model.gated_mlp else 4
    return s * b * (2 * h * (k - 1) + (k * c * model.expert_ffn_size(kind) - 16 * h) / tp + 4 * e)


def sustained_flop_per_s(gpu: GpuSpec) -> float:
    """The GPU's sustained large-GEMM rate: the catalog's cited value, else EFFICIENCY_MAX x the datasheet peak."""
    if gpu.sustained_fp16_tflop_per_s is not None:
        return tflop_per_s_to_flop_per_s(gpu.sustained_fp16_tflop_per_s)
    return EFFICIENCY_MAX * tflop_per_s_to_flop_per_s(gpu.peak_fp16_tflop_per_s)


def efficiency(flops_per_gpu: float, gpu: GpuSpec) -> float:
    """Achieved / peak: (sustained / peak) x W / (W + sustained x GEMM_FIXED_S), i.e. W / sustained + GEMM_FIXED_S."""
    sustained = sustained_flop_per_s(gpu)
    peak = tflop_per_s_to_flop_per_s(gpu.peak_fp16_tflop_per_s)
    return sustained / peak * flops_per_gpu / (flops_per_gpu + sustained * GEMM_FIXED_S)


def _roofline_s(gpu: GpuSpec, flops_per_gpu: float, traffic_bytes: float, kernels: int) -> float:
    peak = tflop_per_s_to_flop_per_s(gpu.peak_fp16_tflop_per_s)
    compute = flops_per_gpu / (peak * efficiency(flops_per_gpu, gpu)) if flops_per_gpu > 0 else 0.0
    return compute + traffic_bytes / (gpu.hbm_gbyte_per_s * 1e9) + kernels * KERNEL_LAUNCH_S


def layer_forward_s(model: ModelSpec, kind: LayerKindSpec, gpu: GpuSpec, tp: int, b: int) -> float:
    traffic = 2.0 * korthikanti_activation_bytes(model, b, tp) * (2 if kind.cross_attention else 1)
    traffic += 2.0 * moe_activation_extra_bytes(model, kind, b, tp)
    return _roofline_s(gpu, layer_forward_flops(model, kind, b) / tp, traffic, KERNELS_PER_LAYER)


def attention_score_elements(model: ModelSpec, kind: LayerKindSpec, b: int, tp: int) -> float:
    """Attention-score elements one GPU of a tp group holds per layer: a s^2 b / tp (x 2 with cross-attention)."""
    s, a = model.seq_length, model.num_attention_heads
    return a * s * s * b / tp * (2 if kind.cross_attention else 1)


def unfused_attention_extra_s(model: ModelSpec, kind: LayerKindSpec, gpu: GpuSpec, tp: int, b: int
                              ) -> tuple[float, float]:
    """(forward, backward) seconds an unfused scale-mask-softmax engine adds over the stored-bytes traffic term:
    (17 - 10) and (23 - 20) bytes per score element, at the GPU's memory bandwidth."""
    n = attention_score_elements(model, kind, b, tp)
    bandwidth = gpu.hbm_gbyte_per_s * 1e9
    return ((UNFUSED_SCORE_BYTES_FORWARD - SCORE_BYTES_CHARGED_FORWARD) * n / bandwidth,
            (UNFUSED_SCORE_BYTES_BACKWARD - SCORE_BYTES_CHARGED_BACKWARD) * n / bandwidth)


def flash_attention_saving_s(model: ModelSpec, kind: LayerKindSpec, gpu: GpuSpec, tp: int, b: int) -> float:
    """Forward seconds a flash-attention engine does not spend: the stored-bytes traffic term charges
    SCORE_BYTES_CHARGED_FORWARD bytes per attention-score element, and flash attention never writes the s x s
    matrices to HBM (Dao et al. 2022, "FlashAttention", Section 3.1); the backward (2 x forward) loses twice this."""
    return SCORE_BYTES_CHARGED_FORWARD * attention_score_elements(model, kind, b, tp) / (gpu.hbm_gbyte_per_s * 1e9)


# Where Transformer Engine runs flash attention (its flash-attn 2 backend, what `--attention-backend flash` asks for;
# its cuDNN fused backend has the same arch and head-size rules up to 128): get_attention_backend's filters
# (transformer_engine/pytorch/attention/dot_product_attention/utils.py, "Filter: Compute capability" and "Filter:
# Head dimension"): compute capability 8.0 or newer, head_dim % 8 == 0, head_dim <= 256, and head_dim > 192 only on
# sm80 / sm90 / sm100 / sm120. Elsewhere `--attention-backend auto` falls back to UnfusedDotProductAttention.
FLASH_MIN_COMPUTE_CAPABILITY = 8.0
FLASH_MAX_HEAD_DIM = 256
FLASH_MAX_HEAD_DIM_ANY_ARCH = 192
FLASH_LARGE_HEAD_ARCHS = (8.0, 9.0, 10.0, 12.0)
# Flash attention keeps, beside Q, K, V and its output (Korthikanti's selective row holds them), the fp32 log-sum-exp
# of every score row for its backward (Dao et al. 2022, Algorithm 2, "Write L_i"; flash-attn's softmax_lse):
FLASH_SOFTMAX_STATS_BYTES = 4  # per query row of one head


def flash_attention_error(model: ModelSpec, gpu: GpuSpec) -> str | None:
    """Why Transformer Engine runs no flash attention for this model on this GPU, or None when it does."""
    d = model.channels_per_head
    cc = gpu.compute_capability
    if cc is None:
        return f"{gpu.name}: no compute_capability in its spec (flash attention needs 8.0 or newer)"
    if cc < FLASH_MIN_COMPUTE_CAPABILITY:
        return f"{gpu.name}: compute capability {cc:g} (flash attention needs 8.0 or newer)"
    if d % 8 or d > FLASH_MAX_HEAD_DIM:
        return f"model {model.name}: head dimension {d} (flash attention needs a multiple of 8, at most 256)"
    if d > FLASH_MAX_HEAD_DIM_ANY_ARCH and cc not in FLASH_LARGE_HEAD_ARCHS:
        return (f"model {model.name}: head dimension {d} on {gpu.name} (compute capability {cc:g}): above 192 flash "
                "attention runs on 8.0, 9.0, 10.0 and 12.0 only")
    return None


def flash_softmax_stats_bytes(model: ModelSpec, kind: LayerKindSpec, b: int, tp: int) -> float:
    """What flash attention stores beyond Korthikanti's selective row: the fp32 log-sum-exp per head and query,
    4 a s b / t bytes (x 2 with cross-attention)."""
    s, a = model.seq_length, model.num_attention_heads
    return FLASH_SOFTMAX_STATS_BYTES * a * s * b / tp * (2 if kind.cross_attention else 1)


def host_forward_s(engine: EagerEngine, tp: int) -> float:
    """Host time of one forward pass of one layer: (layer_ops + 2 x tp_call_ops if tp > 1) x HOST_S_PER_TORCH_OP."""
    ops = engine.layer_ops + (TP_CALLS_PER_FORWARD_PASS * engine.tp_call_ops if tp > 1 else 0)
    return ops * HOST_S_PER_TORCH_OP


def gpu_layer_forward_s(model: ModelSpec, kind: LayerKindSpec, gpu: GpuSpec, tp: int, b: int) -> float:
    """GPU time of one layer's forward pass: layer_forward_s without its kernel-launch term (the host's share)."""
    return layer_forward_s(model, kind, gpu, tp, b) - KERNELS_PER_LAYER * KERNEL_LAUNCH_S


def eager_layer_times_s(model: ModelSpec, kind: LayerKindSpec, gpu: GpuSpec, tp: int, b: int, engine: EagerEngine,
                        unfused: bool) -> tuple[float, float]:
    """(forward, backward) of one layer under an eager engine: the launch-bound roofline per forward pass,
    forward_passes x max(GPU, host); backward 2 x the GPU's forward (autograd's C++ engine issues it)."""
    gpu_fwd = gpu_layer_forward_s(model, kind, gpu, tp, b)
    extra_fwd, extra_bwd = unfused_attention_extra_s(model, kind, gpu, tp, b) if unfused else (0.0, 0.0)
    forward = engine.forward_passes * max(gpu_fwd + extra_fwd, host_forward_s(engine, tp))
    return forward, BACKWARD_OVER_FORWARD * gpu_fwd + extra_bwd


def embedding_forward_s(model: ModelSpec, gpu: GpuSpec, tp: int, b: int) -> float:
    traffic = 2.0 * model.seq_length * b * model.hidden_size * 2
    return _roofline_s(gpu, 0.0, traffic, 3)


def head_forward_s(model: ModelSpec, gpu: GpuSpec, tp: int, b: int) -> float:
    s, h, v = model.seq_length, model.hidden_size, model.vocab_size
    flops = 2.0 * b * s * h * v / tp
    traffic = 3 * 4.0 * b * s * v / tp
    return _roofline_s(gpu, flops, traffic, 6)


# Megatron-LM's unfused vocab-parallel cross entropy (docs/cost-model.md section 4b), bytes per fp32 logit element
# s b V / t, at upstream main d98e8a64 (megatron/core/tensor_parallel/cross_entropy.py, the default path of
# language_module.compute_language_model_loss since cross_entropy_loss_fusion defaults to False)
MEGATRON_CE_FORWARD_BYTES = 38  # .float() 2 + 4, max 4, in-place subtract 8, exp(out=) 8, sum 4, in-place divide 8
MEGATRON_CE_BACKWARD_BYTES = 14  # grad_input.mul_ 8, autograd's cast of the fp32 gradient to the 16-bit logits 4 + 2


def megatron_head_times_s(model: ModelSpec, gpu: GpuSpec, tp: int, b: int) -> tuple[float, float]:
    """(forward, backward) of the LM head under Megatron-LM's unfused cross entropy: the output GEMM as
    head_forward_s prices it (x 2 backward, its 6 kernels with it) plus the loss's passes over the fp32 logits,
    38 B per element forward and 14 B backward, in place of head_forward_s's 12 B forward (x 2 backward)."""
    s, h, v = model.seq_length, model.hidden_size, model.vocab_size
    gemm = _roofline_s(gpu, 2.0 * b * s * h * v / tp, 0.0, 6)
    logits_per_s = b * s * v / tp / (gpu.hbm_gbyte_per_s * 1e9)
    return (gemm + MEGATRON_CE_FORWARD_BYTES * logits_per_s,
            BACKWARD_OVER_FORWARD * gemm + MEGATRON_CE_BACKWARD_BYTES * logits_per_s)


GET_CACHE = True  # AnalyticProfile.get keeps its answers per profile (issue 14, round 21, loop39): the same entries


@dataclass(frozen=True, slots=True)
class AnalyticProfile:
    """Per-layer times computed from the model shape and the GPU's datasheet numbers, for any tp and b."""

    model: ModelSpec
    gpus: dict[str, GpuSpec]
    name: str = "analytic"
    # The engine has no fused scale-mask-softmax (Megatron-LM v1.1.5 without its fusion flags, e.g. AMP's
    # DeepSpeed runs): adds unfused_attention_extra_s to every transformer layer. Default off: modern Megatron-LM
    # fuses (or, with flash attention, never materializes) the score matrices.
    unfused_kernels: bool = False
    # The engine's host time per layer (a key of EAGER_ENGINES, e.g. AMP's Megatron v1.1.5 fork): transformer layers
    # take eager_layer_times_s. Default None: the kernel-launch term of layer_forward_s only.
    eager_engine: str | None = None
    # The engine's attention is flash attention (Megatron-Core with Transformer Engine's DotProductAttention, its
    # default since --transformer-impl transformer_engine): no s x s score traffic, flash_attention_saving_s off
    # every transformer layer's forward (and twice off its backward), on the GPUs that run it (flash_attention_error:
    # compute capability 8.0+, head dimension). Default off: the stored-bytes term as before; the CLI turns it on for
    # the upstream target (targets.engine_problem).
    flash_attention: bool = False
    # get's answers (GET_CACHE), by (gpu, layer kind, tp, b): each with the GpuSpec it was computed from. Not a field
    # of the profile's value (no init, compare or repr): dataclasses.replace gives a copy with an empty one.
    _got: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def has(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> bool:
        known_kind = layer_kind in (EMBEDDING_KIND, HEAD_KIND) or any(k.name == layer_kind for k in self.model.kinds)
        return gpu in self.gpus and known_kind

    def get(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> ProfileEntry:
        """The entry of a layer kind (or the embedding / head) on a GPU at tp and micro-batch size b. Kept
        (GET_CACHE): a roofline of the frozen profile's model and flags and of the GPU's spec, read back while
        self.gpus holds the same GpuSpec object under that name (a spec replaced in the dict computes it again)."""
        if GET_CACHE:
            key = (gpu, layer_kind, tp, micro_batch_size)
            kept = self._got.get(key)
            if kept is not None and self.gpus.get(gpu) is kept[0]:
                return kept[1]
            entry = self._get(gpu, layer_kind, tp, micro_batch_size)
            self._got[key] = (self.gpus[gpu], entry)
            return entry
        return self._get(gpu, layer_kind, tp, micro_batch_size)

    def _get(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> ProfileEntry:
        """get's computation, uncached."""
        if gpu not in self.gpus:
            raise ProfileError(f"profile analytic: unknown gpu {gpu!r}; known: {', '.join(sorted(self.gpus))}")
        spec, b = self.gpus[gpu], micro_batch_size
        if layer_kind == EMBEDDING_KIND:
            fwd = embedding_forward_s(self.model, spec, tp, b)
        elif layer_kind == HEAD_KIND:
            if self.eager_engine is None:  # Megatron-LM's own loss (section 4b); an eager engine keeps head_forward_s
                fwd, bwd = megatron_head_times_s(self.model, spec, tp, b)
                return ProfileEntry(forward_s=fwd, backward_s=bwd, tp_comm_included=False)
            fwd = head_forward_s(self.model, spec, tp, b)
        else:
            kinds = {k.name: k for k in self.model.kinds}
            if layer_kind not in kinds:
                raise ProfileError(
                    f"profile analytic: model {self.model.name} has no layer kind {layer_kind!r}; "
                    f"it has {', '.join(kinds)}"
                )
            if self.flash_attention and (self.unfused_kernels or self.eager_engine is not None):
                raise ProfileError("profile analytic: flash_attention excludes unfused_kernels and eager_engine "
                                   "(a flash-attention engine fuses the attention core)")
            if self.eager_engine is not None:
                if self.eager_engine not in EAGER_ENGINES:
                    raise ProfileError(f"profile analytic: unknown eager engine {self.eager_engine!r}; known: "
                                       f"{', '.join(sorted(EAGER_ENGINES))}")
                fwd, bwd = eager_layer_times_s(self.model, kinds[layer_kind], spec, tp, b,
                                               EAGER_ENGINES[self.eager_engine], self.unfused_kernels)
                return ProfileEntry(forward_s=fwd, backward_s=bwd, tp_comm_included=False,
                                    forward_repeats=EAGER_ENGINES[self.eager_engine].forward_passes)
            fwd = layer_forward_s(self.model, kinds[layer_kind], spec, tp, b)
            if self.flash_attention and flash_attention_error(self.model, spec) is None:
                fwd -= flash_attention_saving_s(self.model, kinds[layer_kind], spec, tp, b)
            if self.unfused_kernels:
                extra_fwd, extra_bwd = unfused_attention_extra_s(self.model, kinds[layer_kind], spec, tp, b)
                return ProfileEntry(forward_s=fwd + extra_fwd, backward_s=BACKWARD_OVER_FORWARD * fwd + extra_bwd,
                                    tp_comm_included=False)
        return ProfileEntry(forward_s=fwd, backward_s=BACKWARD_OVER_FORWARD * fwd, tp_comm_included=False)

    def to_table(self, gpus: list[str], tps: list[int], micro_batch_sizes: list[int]) -> ProfileTable:
        """Materialize the formula as a table (for inspection or as a starting point for calibration)."""
        table = ProfileTable(name=self.name, metadata={"source": f"analytic roofline for {self.model.name}",
                                                       DERIVED_FROM_KEY: "analytic"})  # analytic x 1: cp priced alike
        if self.eager_engine is not None:  # the engine's schedule and optimizer step apply on top of its rows
            table.metadata[EAGER_ENGINE_KEY] = self.eager_engine
        kinds = [EMBEDDING_KIND, *(k.name for k in self.model.kinds), HEAD_KIND]
        for gpu in gpus:
            for kind in kinds:
                for tp in tps:
                    for b in micro_batch_sizes:
                        table.entries[(gpu, kind, tp, b)] = self.get(gpu, kind, tp, b)
        return table
