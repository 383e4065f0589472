"""The cost model: pure functions over (Problem, Plan). Every term is documented in docs/cost-model.md.

Per micro-batch, stage i takes t_i = compute_i + p2p_i seconds (forward + backward, recomputation, the embedding
on the first stage and the LM head on the last, tensor-parallel all-reduces, the pipeline sends it makes).
One iteration under 1F1B takes

    pipeline_s = (m - 1) x max_i t_i + sum_i t_i,        m = global_batch / (dp x micro_batch)
    iteration_s = pipeline_s + max_i dp_allreduce_i + embedding_allreduce + max_i optimizer_i

and the run takes iterations x iteration_s, costing sum_types nodes_rented x USD/node-hour x hours.
The solver formulations build their coefficients from the per-layer functions here, so the two agree by
construction; every solve is re-priced through `estimate` all the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optsearch.errors import SpecError
from optsearch.plan import Plan, Recompute, check_block_recompute
from optsearch.problem import DEFAULT_MEMORY_HEADROOM, Problem  # noqa: F401  (re-exported)
from optsearch.profile.analytic import attention_core_fraction, korthikanti_activation_bytes, moe_activation_extra_bytes
from optsearch.profile.analytic import flash_attention_error, flash_softmax_stats_bytes
from optsearch.spec import LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.job import JobSpec
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND
from optsearch.units import (
    gbit_per_s_to_bytes_per_s,
    gbyte_per_s_to_bytes_per_s,
    gib_to_bytes,
    hours,
)

ACTIVATION_DTYPE_BYTES = 2  # fp16/bf16 activations and pipeline messages
GRADIENT_DTYPE_BYTES = 2  # 16-bit gradients (a job without fp32 gradient reduction); fp32 ones take 4
WEIGHT_BYTES_PER_PARAM = 2  # fp16/bf16 model weight
OPTIMIZER_STATE_BYTES_PER_PARAM = 12  # fp32 master weight, Adam m, Adam v (4 each)
FP32_MAIN_GRAD_BYTES_PER_PARAM = 4  # fp32 main gradient the optimizer builds when the grad buffer is 16-bit
OPTIMIZER_TRAFFIC_BYTES_PER_PARAM = 28  # read grad 2; read+write master, m, v 24; write 16-bit weight 2
MEMORY_RESERVE_BYTES = gib_to_bytes(2.0)  # CUDA context, NCCL buffers, cuBLAS workspace
LOGITS_BYTES_PER_ELEMENT = 6  # 16-bit logits (2) + their fp32 copy / softmax (4), per s b V / t element
PCIE_ALLREDUCE_EFFICIENCY = 0.5  # NCCL all-reduce bus bandwidth / nominal PCIe rate when no measurement is given
# Megatron without sequence parallelism: each block (attention, cross-attention, MLP) all-reduces its output in the
# forward (row-parallel) and its input gradient in the backward (column-parallel): one each way per block.
TP_ALLREDUCES_PER_BLOCK_EACH_WAY = 1
# NCCL's own latency model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel, ring algorithm, Simple protocol,
# the protocol of large messages): a base latency per collective plus one hop latency per ring step, by link.
NCCL_BASE_LATENCY_S = 8.4e-6  # baseLat[Ring][Simple]
NCCL_HOP_LATENCY_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 9.6e-6}  # hwLat[NVLINK|PCI|NET][Ring][Simple]
NCCL_RING_PLATEAU = 1.9  # ncclTopoGetAlgoTime: multi-node ring all-reduce of large messages, latency x 1.9


# ---- small helpers -------------------------------------------------------------------------------------------


def ring_allreduce_s(message_bytes: float, group_size: int, bandwidth_bytes_per_s: float) -> float:
    """Ring all-reduce: 2 (d - 1) / d x bytes / bandwidth (Patarasuk & Yuan 2009; NCCL's ring)."""
    if group_size <= 1 or message_bytes <= 0:
        return 0.0
    return 2.0 * (group_size - 1) / group_size * message_bytes / bandwidth_bytes_per_s


def nccl_allreduce_latency_s(node: NodeTypeSpec, group_size: int, nodes_spanned: int = 1) -> float:
    """NCCL's fixed (bandwidth-free) time of one ring all-reduce over group_size ranks on nodes_spanned nodes:

        base + (2 (d - 1) - 2 (n - 1)) x hop(intra-node link) + 2 (n - 1) x hop(network),   x 1.9 if n > 1

    (NVIDIA/nccl src/graph/tuning.cc: baseLat, hwLat and the ring plateau factor, ring/Simple). 0 for d <= 1 and
    when the node type sets collective_latency: none."""
    if group_size <= 1 or node.collective_latency == "none":
        return 0.0
    steps, inter = 2 * (group_size - 1), 2 * (max(1, nodes_spanned) - 1)
    latency = (NCCL_BASE_LATENCY_S + (steps - inter) * NCCL_HOP_LATENCY_S[node.intra_node_link]
               + inter * NCCL_HOP_LATENCY_S["net"])
    return latency * (NCCL_RING_PLATEAU if nodes_spanned > 1 else 1.0)


def nccl_p2p_latency_s(node: NodeTypeSpec, same_node: bool) -> float:
    """Fixed time of one NCCL send/recv: one ring step of NCCL's model, base + one hop over the link it crosses
    (the intra-node link, else the network). 0 when the node type sets collective_latency: none."""
    if node.collective_latency == "none":
        return 0.0
    return NCCL_BASE_LATENCY_S + NCCL_HOP_LATENCY_S[node.intra_node_link if same_node else "net"]


def intra_node_bytes_per_s(node: NodeTypeSpec) -> float:
    return gbyte_per_s_to_bytes_per_s(node.intra_node_gbyte_per_s)


def intra_node_allreduce_bytes_per_s(node: NodeTypeSpec) -> float:
    """NCCL all-reduce bus bandwidth inside a node: the node's measured value, else the link rate (NVLink) or
    PCIE_ALLREDUCE_EFFICIENCY x the link rate (PCIe: host bridges, no P2P, shared switches)."""
    if node.intra_node_allreduce_gbyte_per_s is not None:
        return gbyte_per_s_to_bytes_per_s(node.intra_node_allreduce_gbyte_per_s)
    factor = PCIE_ALLREDUCE_EFFICIENCY if node.intra_node_link == "pcie" else 1.0
    return factor * intra_node_bytes_per_s(node)


def memory_capacity_bytes(problem: Problem, gpu_name: str) -> float:
    """Bytes a plan may use on one GPU: the memory the card exposes (usable_memory_gib, else memory_gib) less the
    problem's headroom share."""
    gpu = problem.gpus[gpu_name]
    usable = gpu.usable_memory_gib if gpu.usable_memory_gib is not None else gpu.memory_gib
    return gib_to_bytes(usable) * (1.0 - problem.memory_headroom)


def gradient_bytes(job: JobSpec) -> int:
    """Bytes per gradient element in the buffer that is all-reduced: 4 with fp32 reduction, else 2."""
    return 4 if job.gradients_in_fp32 else GRADIENT_DTYPE_BYTES


def inter_node_bytes_per_s_per_gpu(node: NodeTypeSpec, gpus_sending: int) -> float:
    """The node's NIC bandwidth shared by the GPUs of that node that send at the same time."""
    return gbit_per_s_to_bytes_per_s(node.inter_node_gbit_per_s) / max(1, min(gpus_sending, node.gpus_per_node))


def num_micro_batches(job: JobSpec, dp: int, micro_batch_size: int) -> int:
    """m = global batch / (dp x micro-batch); it must be a whole number."""
    per_step = dp * micro_batch_size
    if job.global_batch_size % per_step:
        raise SpecError(
            f"plan: dp x micro_batch_size = {dp} x {micro_batch_size} = {per_step} does not divide "
            f"global_batch_size {job.global_batch_size}"
        )
    return job.global_batch_size // per_step


def block_recompute_error(model: ModelSpec, plan: Plan) -> str | None:
    """Why the plan's block recomputation N is out of range, or None: N above the most layers of one kind on any stage
    recomputes nothing more than N = that many (every stage then recomputes all its layers: full recomputation).
    Megatron-LM states the range as 1 to the layers per pipeline rank (transformer_config.py) but does not enforce it
    (megatron/core/recompute.py checkpoints layer_idx < N of each rank's block: all of them past it). Checked on
    plans a user gives (estimate, launch), not in check_plan: brute force prices such N as the full recomputation
    they are. Call after the stages are checked to cover the model's layers."""
    n = plan.recompute_num_layers
    if n is None:
        return None
    counts = stage_layer_kinds(model, plan)
    most = max((c for stage in counts for c in stage.values()), default=0)
    if n <= most:
        return None
    what = "layers" if len(model.kinds) == 1 else "layers of one kind (one transformer block)"
    return (f"{n} is more than the {most} {what} on any stage: block recomputation covers 1 to a stage's layers "
            f"(Megatron-LM's range is 1 to the layers per pipeline rank); give N <= {most}, or full recomputation "
            "without N")


def stage_layer_kinds(model: ModelSpec, plan: Plan) -> list[dict[str, int]]:
    """For each stage, how many layers of each kind it holds (layers are assigned in model order)."""
    out: list[dict[str, int]] = []
    start = 0
    for stage in plan.stages:
        counts: dict[str, int] = {}
        for index in range(start, start + stage.num_layers):
            kind = model.kind_of_layer(index)
            counts[kind.name] = counts.get(kind.name, 0) + 1
        out.append(counts)
        start += stage.num_layers
    return out


# ---- per-layer terms (the solver's coefficients) -------------------------------------------------------------


def tp_allreduce_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> float:
    """One tensor-parallel all-reduce of the b x s x h activations over the intra-node link."""
    model = problem.model
    message = micro_batch_size * model.seq_length * model.hidden_size * ACTIVATION_DTYPE_BYTES
    node = problem.node(node_type)
    return ring_allreduce_s(message, tp, intra_node_allreduce_bytes_per_s(node)) + nccl_allreduce_latency_s(node, tp)


def layer_step_s(
    problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int, recompute: Recompute
) -> float:
    """Forward + backward of one transformer layer for one micro-batch, with recomputation and TP all-reduces.

    full recomputation runs the forward again before the backward (+ forward, + its all-reduces);
    selective recomputation re-runs only the attention core (+ attention_core_fraction x forward).
    """
    gpu = problem.node(node_type).gpu
    entry = problem.profile.get(gpu, kind.name, tp, micro_batch_size)
    extra = {"none": 0.0, "selective": attention_core_fraction(problem.model, kind), "full": 1.0}[recompute]
    step = entry.forward_s + entry.backward_s + extra * entry.forward_s
    if not entry.tp_comm_included and tp > 1:
        blocks = 3 if kind.cross_attention else 2  # attention (+ cross-attention) + MLP
        passes = 3 if recompute == "full" else 2  # forward, backward (+ recomputed forward)
        passes += (entry.forward_repeats - 1) * (passes - 1)  # an engine that repeats the forward (section 14)
        count = blocks * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * passes
        step += count * tp_allreduce_s(problem, node_type, tp, micro_batch_size)
    return step


def embedding_step_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> float:
    """Embedding forward + backward on the first stage (+ one TP all-reduce of the vocab-parallel lookup)."""
    entry = problem.profile.get(problem.node(node_type).gpu, EMBEDDING_KIND, tp, micro_batch_size)
    step = entry.forward_s + entry.backward_s
    if not entry.tp_comm_included and tp > 1:
        step += tp_allreduce_s(problem, node_type, tp, micro_batch_size)
    return step


def head_step_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> float:
    """LM head + loss forward + backward on the last stage (+ one TP all-reduce of its input gradient)."""
    entry = problem.profile.get(problem.node(node_type).gpu, HEAD_KIND, tp, micro_batch_size)
    step = entry.forward_s + entry.backward_s
    if not entry.tp_comm_included and tp > 1:
        step += tp_allreduce_s(problem, node_type, tp, micro_batch_size)
    return step


def p2p_message_bytes(model: ModelSpec, micro_batch_size: int) -> float:
    """Activations (forward) or their gradients (backward) between stages: b x s x h x 2 bytes."""
    return micro_batch_size * model.seq_length * model.hidden_size * ACTIVATION_DTYPE_BYTES


def p2p_send_s(problem: Problem, sender: str, receiver: str, same_node: bool, gpus_per_stage: int, mbs: int) -> float:
    """One pipeline send between consecutive stages.

    Same node: the sender's intra-node link. Otherwise the slower NIC of the two nodes, each shared by the GPUs
    of that node that send at the same time (min(tp x dp, GPUs per node)).
    """
    message = p2p_message_bytes(problem.model, mbs)
    latency = nccl_p2p_latency_s(problem.node(sender), same_node)
    if same_node:
        return message / intra_node_bytes_per_s(problem.node(sender)) + latency
    bandwidth = min(
        inter_node_bytes_per_s_per_gpu(problem.node(sender), gpus_per_stage),
        inter_node_bytes_per_s_per_gpu(problem.node(receiver), gpus_per_stage),
    )
    return message / bandwidth + latency


def layer_activation_bytes(
    problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int, recompute: Recompute
) -> float:
    """Stored activations of one layer for one micro-batch (Korthikanti et al. 2022, Table 2).

    none: s b h (10 + 24/t + 5 a s / (h t)) or the profile's measured bytes; with flash attention on the node type
    (flash_attention_on) s b h (10 + 24/t) + 4 a s b / t, no scores but the fp32 log-sum-exp; selective: s b h (10 + 24/t);
    full: 2 s b h (only the layer input is kept). With sequence parallelism (sequence_parallel_on: t > 1 unless the
    job forces it off) the 10 s b h that tensor parallelism leaves whole is split over the t ranks too: none
    s b h (34/t + 5 a s / (h t)) (a measured value loses 10 s b h (1 - 1/t)), selective 34 s b h / t, full 2 s b h / t (the kept layer input is
    the sequence-sharded residual stream). A mixture-of-experts kind adds moe_activation_extra_bytes (its routed
    token copies, expert inner tensors and router scores) in modes none and selective, which keep the MLP's tensors.
    """
    model = problem.model
    sbh = model.seq_length * micro_batch_size * model.hidden_size
    cross = 2 if kind.cross_attention else 1
    split = tp if sequence_parallel_on(problem.job, tp) else 1  # what the 10 s b h and the input divide by
    if recompute == "full":
        return 2.0 * sbh / split
    moe = moe_activation_extra_bytes(model, kind, micro_batch_size, tp) if kind.is_moe else 0.0
    if recompute == "selective":
        return sbh * (10 / split + 24 / tp) * cross + moe
    entry = problem.profile.get(problem.node(node_type).gpu, kind.name, tp, micro_batch_size)
    if entry.activation_bytes is not None:
        return entry.activation_bytes - 10 * sbh * (1 - 1 / split) * cross
    if flash_attention_on(problem, node_type):  # no s x s scores: selective's row + the log-sum-exp (section 9c)
        return sbh * (10 / split + 24 / tp) * cross + moe + flash_softmax_stats_bytes(model, kind, micro_batch_size, tp)
    return (korthikanti_activation_bytes(model, micro_batch_size, tp) - 10 * sbh * (1 - 1 / split)) * cross + moe


def flash_attention_on(problem: Problem, node_type: str) -> bool:
    """Whether the engine runs flash attention on this node type's GPUs: the problem says the engine uses it
    (Problem.flash_attention, the upstream target's default) and Transformer Engine can run it there (compute
    capability 8.0+, the head dimension: profile.analytic.flash_attention_error)."""
    return problem.flash_attention and flash_attention_error(problem.model, problem.gpu_of(node_type)) is None


def block_recompute_step_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int,
                           layers: int, recomputed: int, cp: int = 1) -> float:
    """Block recomputation (--recompute-method block --recompute-num-layers N), `layers` layers of one kind on a
    stage of which `recomputed` = min(N, layers) are fully recomputed (megatron/core/recompute.py, block branch:
    layer_idx < recompute_num_layers is checkpointed): recomputed x step(full) + (layers - recomputed) x step(none),
    each step on one rank of a cp group (cp_layer_step_s; cp = 1: layer_step_s)."""
    return (recomputed * cp_layer_step_s(problem, node_type, kind, tp, micro_batch_size, "full", cp)
            + (layers - recomputed) * cp_layer_step_s(problem, node_type, kind, tp, micro_batch_size, "none", cp))


def block_recompute_activation_bytes(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int,
                                     micro_batch_size: int, layers: int, recomputed: int, cp: int = 1) -> float:
    """Stored activations per micro-batch of `layers` layers of one kind under block recomputation: the recomputed
    ones keep only their input (full), the others everything (none). The working memory of the recomputation (one
    layer re-materialized, full_recompute_working_bytes) is added once per stage, as for full."""
    return (recomputed * cp_layer_activation_bytes(problem, node_type, kind, tp, micro_batch_size, "full", cp)
            + (layers - recomputed) * cp_layer_activation_bytes(problem, node_type, kind, tp, micro_batch_size, "none",
                                                                cp))


def full_layer_activation_bytes(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, mbs: int) -> float:
    return layer_activation_bytes(problem, node_type, kind, tp, mbs, "none")


def full_recompute_working_bytes(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> float:
    """Under full recomputation the backward re-materializes one layer's activations at a time: the largest
    layer kind of the model (Korthikanti et al. 2022, section 4.1)."""
    return max(full_layer_activation_bytes(problem, node_type, k, tp, micro_batch_size) for k in problem.model.kinds)


def logits_bytes(model: ModelSpec, tp: int, micro_batch_size: int) -> float:
    """Logits and loss buffers on the last stage, one micro-batch at a time: 6 s b V / t (the 16-bit logits and
    Megatron's fp32 copy, on which the vocab-parallel cross-entropy computes softmax and gradient in place)."""
    return LOGITS_BYTES_PER_ELEMENT * model.seq_length * micro_batch_size * model.vocab_size / tp


def state_bytes_per_param(job: JobSpec, dp: int) -> float:
    """Megatron's per-parameter bytes: 16-bit weight 2 + gradient buffer (4 if fp32, else 2) + sharded states
    (fp32 master, Adam m and v: 12, + a 4-byte fp32 main gradient when the buffer is 16-bit), the sharded part
    divided by dp under the distributed optimizer. bf16: 6 + 12/d (18 B); fp16: 4 + 16/d (20 B)."""
    grad = gradient_bytes(job)
    sharded = OPTIMIZER_STATE_BYTES_PER_PARAM + (0 if job.gradients_in_fp32 else FP32_MAIN_GRAD_BYTES_PER_PARAM)
    return WEIGHT_BYTES_PER_PARAM + grad + sharded / (dp if job.distributed_optimizer else 1)


def stage_parameters(model: ModelSpec, kinds: dict[str, int], first: bool, last: bool, pp: int) -> float:
    """Parameters held by a stage (all tp ranks together): its layers, the embedding on the first stage, the head
    (final norm, and the output matrix: its own when untied, a copy of the embedding when tied and pp > 1) on the
    last."""
    by_name = {k.name: k for k in model.kinds}
    n = sum(model.layer_parameters(by_name[name]) * count for name, count in kinds.items())
    if first:
        n += model.embedding_parameters()
    if last:
        n += model.head_parameters()
        if model.tied_embeddings and pp > 1:
            n += model.vocab_size * model.hidden_size
    return float(n)


# ---- context parallelism, the distributed optimizer, the sequence-parallel stage message (issue 16) ----------


def sequence_parallel_on(job: JobSpec, tp: int) -> bool:
    """Megatron's --sequence-parallel for a plan at this tp: on wherever tp > 1 unless the job forces it off
    (job.sequence_parallel = false). Under this cost model it never costs time (its all-gather + reduce-scatter move
    what the all-reduce moves, section 3) and only shrinks activations and the stage message (9c, 16c), so on is
    optimal; Megatron itself turns it off at tp = 1."""
    return job.sequence_parallel is not False and tp > 1


def distributed_optimizer_on(job: JobSpec, dp: int, cp: int = 1) -> bool:
    """The search's choice of Megatron's distributed optimizer: on wherever dp x cp > 1 unless the job forces it off
    (job.distributed_optimizer = false). Under this cost model it never costs time or memory (gradient_sync_s,
    state_bytes, optimizer_s; tests/test_context_parallel.py checks it over random plans), so on is optimal.
    Not so under --overlap-grad-reduce (Problem.overlap_grad_reduce): the plain all-reduce can hide whole behind the
    backward while the distributed optimizer's all-gather stays exposed, so off can be faster (5 % on
    tests/test_overlap_seams.py's instance): there the search tries both (distributed_optimizer_settings)."""
    return job.distributed_optimizer is not False and dp * cp > 1


def distributed_optimizer_settings(problem: Problem, dp: int, cp: int = 1, virtual_stages: int = 1
                                   ) -> tuple[bool, ...]:
    """The distributed-optimizer settings the search tries at (dp, cp, v), the search's own first: both, on and
    off, where --overlap-grad-reduce is on for such plans (overlap_grad_reduce_on) and the job leaves the optimizer
    open (job.distributed_optimizer unset). There neither dominates (docs/cost-model.md 7e): off hides the whole
    all-reduce behind the backward but steps the optimizer on unsharded states and holds them whole; on keeps its
    parameter all-gather exposed. Elsewhere only distributed_optimizer_on: without the overlap on never costs time
    or memory."""
    on = distributed_optimizer_on(problem.job, dp, cp)
    if on and problem.job.distributed_optimizer is None and overlap_grad_reduce_on(problem, dp, cp, virtual_stages):
        return (True, False)
    return (on,)


def distributed_optimizer_off_dominated(problem: Problem, node_types: list[str], tp: int, dp: int,
                                        cp: int = 1) -> bool:
    """True where, at these degrees, the distributed optimizer on is at least as fast as off for every plan on these
    node types, so the search need not try off (docs/cost-model.md 7e). Both bandwidths of a type are checked, within
    a node and across nodes (a stage of w <= GPUs per node may still straddle two, costmodel.place). A plan and
    its copy with the optimizer on differ only in A (the exposed exchange) and O (the optimizer step), and each is
    linear in a stage's parameters P_s. Per parameter on type g: rs = the reduce-scatter (g of the g + 2 bytes of
    gradient_sync_s), ag = the all-gather (the other 2), ar = off's all-reduce, dO = off's optimizer step less on's.
    With rs <= ar every stage's overlapped part is exposed no more with on (exposed_grad_reduce_s is monotone in it,
    the same backward windows and buckets), so A_on_s <= A_off_s + ag P_s; with ag <= dO on every type
    max_s A_on - max_s A_off <= max_s ag P_s <= max_s dO P_s <= max_s O_off - max_s O_on. And on needs no more memory.
    Mixture-of-experts models: not claimed (False)."""
    if problem.model.is_moe:
        return False
    g = gradient_bytes(problem.job)
    for name, spans in ((n, s) for n in node_types for s in (False, True)):
        on = gradient_sync_s(problem, name, 1.0, tp, dp, spans, cp, True)
        off = gradient_sync_s(problem, name, 1.0, tp, dp, spans, cp, False)
        saved = optimizer_s(problem, name, 1.0, tp, dp, cp, False) - optimizer_s(problem, name, 1.0, tp, dp, cp, True)
        if on * g / (g + WEIGHT_BYTES_PER_PARAM) > off or on * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) > saved:
            return False
    return True


def overlap_grad_reduce_on(problem: Problem, dp: int, cp: int = 1, virtual_stages: int = 1) -> bool:
    """The search's choice of Megatron's --overlap-grad-reduce (docs/targets.md "Communication overlaps"): on where
    the problem's engine runs it (Problem.overlap_grad_reduce: upstream Megatron-LM unless switched off), there is a
    gradient exchange (dp x cp > 1), the schedule is 1F1B (section 7c prices it there; interleaved: not priced) and
    the model has one layer kind (the formulation prices it with stage patterns). Under section 7c it never costs
    time (exposed <= the collective) nor memory (the buckets are views of the gradient buffer Megatron allocates
    either way), so on is optimal where it is valid."""
    return (problem.overlap_grad_reduce and dp * cp > 1 and virtual_stages == 1 and len(problem.model.kinds) == 1
            and pipe_engine_of(problem) is None)


def overlap_param_gather_on(problem: Problem, dp: int, cp: int, virtual_stages: int, pp: int,
                            distributed: bool) -> bool:
    """The search's choice of Megatron's --overlap-param-gather (docs/cost-model.md section 7f): on where the problem
    searches it (Problem.overlap_param_gather), the plan has the distributed optimizer (upstream's validate_args
    asserts it) and --overlap-grad-reduce (overlap_grad_reduce_on; asserted too), and one pipeline stage. There it
    never loses: the stage's all-gather G leaves the exchange after the step and the first forward waits at most
    max(G / n, G - F (n - 1) / n) <= G for it (param_gather_delay_s), with no memory of its own; upstream main and
    r0.8.0 dispatch a one-stage plan's gathers alike. With pp > 1 upstream main gathers a later stage's one bucket
    only when its first micro-batch arrives, so every later stage's whole gather adds along the pipeline fill
    (param_gather_delay_main_s) and off can be faster: off by default there, and the search's copies with it on
    (overlap_param_gather_settings, formulation.model.Candidate.gather) try on."""
    return (problem.overlap_param_gather and distributed and pp == 1
            and overlap_grad_reduce_on(problem, dp, cp, virtual_stages))


def overlap_param_gather_settings(problem: Problem, dp: int, cp: int, virtual_stages: int, pp: int,
                                  distributed: bool) -> tuple[bool, ...]:
    """The --overlap-param-gather settings the search tries (issue 15, ppgather; docs/cost-model.md 7f): on alone at
    pp = 1 where it is valid (overlap_param_gather_on: it never loses there); off and on at pp > 1 where it is valid
    (the problem searches it there, Problem.param_gather_pipelined: `solve --pipelined-param-gather`; the distributed
    optimizer; overlap_grad_reduce_on: v = 1), since at upstream main's
    dispatch neither dominates (param_gather_delay_main_s); off elsewhere. Interleaved plans (v > 1) run without
    --overlap-grad-reduce in the search, which upstream needs for the gather (arguments.py l. 1028-1029)."""
    if not (problem.overlap_param_gather and distributed and overlap_grad_reduce_on(problem, dp, cp, virtual_stages)):
        return (False,)
    return (True,) if pp == 1 else (False, True) if problem.param_gather_pipelined else (False,)


def param_gather_chain_can_win(problem: Problem, node_types: list[str], tp: int, dp: int, cp: int, pp: int,
                               most_first_layers: int | list[int]) -> bool:
    """Whether --overlap-param-gather at main's dispatch can be faster than off on some plan of pp > 1 stages
    (param_gather_chain_gain_s > 0)."""
    return pp <= 1 or param_gather_chain_gain_s(problem, node_types, tp, dp, cp, pp, most_first_layers) > 0


def param_gather_chain_gain_s(problem: Problem, node_types: list[str], tp: int, dp: int, cp: int, pp: int,
                              most_first_layers: int | list[int]) -> float:
    """False where no plan of pp > 1 stages on these node types, whose stage 0 holds at most most_first_layers
    layers (one count, or one per node type: the most a stage of that type holds), is faster with --overlap-param-gather at main's dispatch than without (docs/cost-model.md 7f), so the
    search need not try the flag on there. With e_s a stage's exposed exchange less its gather G_s, off prices
    max_s (e_s + G_s) <= max_s e_s + max_s G_s and on max_s e_s + delay_0 + sum_{i>0} G_i, the rest of the
    iteration and the memory alike; so on is faster only if delay_0 + sum_{i>0} G_i < max_s G_s. A later stage's G_j
    is in the sum, so the max is G_0, and delay_0 >= G_0 / n_b (overlapped_grad_reduce_s): G_0 (1 - 1/n_b) >
    sum_{i>0} G_i is needed. G_s = ag[g_s] P_s (dense parameters; ag at either bandwidth of a type, a stage may
    straddle nodes): the left side grows with stage 0's layers n_0 and the right falls, so for each type stage 0 may
    take, n_0 = min(L, its most layers) with its own larger rate on the left and the least rate of every type on the
    right decides. Returns the most the flag can take off a plan's iteration (seconds, >= 0; 0: never faster):
    off - on <= max_s G_s - D <= G_0 (1 - 1/n_b) - sum_{i>0} G_i, at its largest there.
    (pp = 1 or several layer kinds: not claimed, inf.)"""
    model = problem.model
    if pp <= 1 or len(model.kinds) != 1:
        return math.inf  # not claimed (the search's gather needs one layer kind anyway: overlap_grad_reduce_on)
    kind = model.kinds[0]
    g = gradient_bytes(problem.job)
    rates = [max(gradient_sync_s(problem, name, 1.0, tp, dp, spans, cp, True) for spans in (False, True))
             * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) for name in node_types]
    least = min(gradient_sync_s(problem, name, 1.0, tp, dp, spans, cp, True) for name in node_types
                for spans in (False, True)) * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM)
    most = most_first_layers if isinstance(most_first_layers, list) else [most_first_layers] * len(node_types)
    per_layer = float(model.layer_parameters(kind) - model.expert_parameters(kind))
    layers = kind.num_layers
    ends = sum(stage_parameters(model, {}, False, s == pp - 1, pp) for s in range(1, pp))
    gain = 0.0
    for rate, cap in zip(rates, most):
        n0 = max(0, min(layers, cap))
        first = n0 * per_layer + stage_parameters(model, {}, True, False, pp)
        buckets = overlap_bucket_count(first / tp, dp * cp, True)
        gain = max(gain, rate * first * (1.0 - 1.0 / buckets) - least * ((layers - n0) * per_layer + ends))
    return gain


def ddp_average_on(problem: Problem, dp: int, cp: int = 1) -> bool:
    """The search's choice of Megatron's --ddp-average-in-collective (docs/cost-model.md 8c): on where the problem
    prices it (Problem.ddp_average_in_collective: upstream Megatron-LM) and there is a data-parallel reduce to average
    (dp x cp > 1). It only drops the 1 / (dp x cp) scale pass (grad_buffer_passes_s): never slower, no memory, so on
    is optimal where it is valid (upstream refuses it only with --calculate-per-token-loss or GTP, which optsearch
    never emits: arguments.py l. 1553, distributed_data_parallel.py l. 238-247). Never on an eager engine's profile
    (section 6c: its optimizer step is priced apart)."""
    return problem.ddp_average_in_collective and dp * cp > 1 and pipe_engine_of(problem) is None


def distributed_optimizer_choices(job: JobSpec, dp: int, cp: int = 1) -> tuple[bool, ...]:
    """The settings of the search space: both where dp x cp > 1 and the job leaves it open (unset), only on where
    the job sets it (true), only off where it forces it off (false) or dp x cp = 1 (nothing to shard)."""
    if job.distributed_optimizer is False or dp * cp == 1:
        return (False,)
    return (True,) if job.distributed_optimizer else (False, True)


def cp_ring_bytes_per_s(problem: Problem, node_type: str, tp: int, cp: int) -> float:
    """Bandwidth of one step of the context-parallel ring. Megatron orders ranks tensor, then context (tp-cp-dp-pp):
    a cp group is tp x cp consecutive GPUs. Inside one node (tp x cp divides the GPUs per node) a step runs on the
    intra-node link; otherwise the ring crosses nodes and each node's tp boundary GPUs share its NIC."""
    node = problem.node(node_type)
    gpn = node.gpus_per_node
    if tp * cp <= gpn and gpn % (tp * cp) == 0:
        return intra_node_bytes_per_s(node)
    return inter_node_bytes_per_s_per_gpu(node, tp)


def cp_ring_exposed_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int,
                      recompute: Recompute, cp: int) -> float:
    """The context-parallel K/V ring of one layer, per micro-batch, as far as attention compute does not hide it.

    Upstream's p2p context parallelism (Transformer Engine's AttnFuncWithCPAndKVP2P, cp_comm_type p2p) splits the
    sequence into 2 cp chunks (rank r holds chunks r and 2 cp - 1 - r, balancing causal work) and passes K and V
    around the ring: cp - 1 steps per forward, each sending the rank's K and V chunk,
        kv = 2 x b x (s / cp) x kv_width / t x 2 bytes,
    while computing attention on the chunk received before (the send is overlapped with one step of attention).
    The backward passes K, V and their gradients: 2 kv per step. Per pass with attention-core time A on the rank
    (attention_core_fraction x the layer's forward or backward time / cp) each of the cp - 1 sends hides behind one
    step of A / cp:  exposed = (cp - 1) max(0, kv_bytes / bandwidth - A / cp).
    Recomputation (selective re-runs the attention core, full the whole forward) runs the forward ring again."""
    if cp <= 1:
        return 0.0
    model = problem.model
    entry = problem.profile.get(problem.node(node_type).gpu, kind.name, tp, micro_batch_size)
    core = attention_core_fraction(model, kind)
    kv = 2.0 * micro_batch_size * (model.seq_length / cp) * model.kv_width / tp * ACTIVATION_DTYPE_BYTES
    bandwidth = cp_ring_bytes_per_s(problem, node_type, tp, cp)
    forward = (cp - 1) * max(0.0, kv / bandwidth - core * entry.forward_s / cp / cp)
    backward = (cp - 1) * max(0.0, 2 * kv / bandwidth - core * entry.backward_s / cp / cp)
    passes = 2 if recompute in ("selective", "full") else 1
    return passes * forward + backward


def cp_layer_step_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int,
                    recompute: Recompute, cp: int = 1) -> float:
    """One layer on one rank of a cp group: layer_step_s over s / cp tokens, plus the exposed K/V ring.

    Each rank runs 1/cp of the layer's tokens through the projections and the MLP, and (load-balanced chunks) 1/cp of
    the causal attention work, and its tensor-parallel collectives carry b s h / cp: all of layer_step_s divides by cp.
    The profile's entry is measured (or computed) at the model's full sequence; dividing it by cp keeps its FLOPs
    exact but not the fixed costs per kernel or the lower efficiency of smaller matrix products (docs/cost-model.md)."""
    step = layer_step_s(problem, node_type, kind, tp, micro_batch_size, recompute)
    if cp <= 1:
        return step
    return step / cp + cp_ring_exposed_s(problem, node_type, kind, tp, micro_batch_size, recompute, cp)


def cp_embedding_step_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int, cp: int = 1) -> float:
    """The embedding over s / cp tokens per rank."""
    return embedding_step_s(problem, node_type, tp, micro_batch_size) / cp


def cp_head_step_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int, cp: int = 1) -> float:
    """The LM head and loss over s / cp tokens per rank."""
    return head_step_s(problem, node_type, tp, micro_batch_size) / cp


def stage_message_shards(job: JobSpec, tp: int, cp: int) -> int:
    """What the b s h pipeline message divides by: cp (each rank sends its own s / cp tokens) and, with sequence
    parallelism, tp (upstream sends the sequence-sharded tensor: schedules.get_tensor_shapes divides the sequence
    length by the cp group's size, and by the tp group's with sequence_parallel)."""
    return cp * (tp if sequence_parallel_on(job, tp) else 1)


def stage_send_s(problem: Problem, sender: str, receiver: str, same_node: bool, gpus_per_stage: int, mbs: int,
                 tp: int, cp: int = 1) -> float:
    """One pipeline send (p2p_send_s) of the message each GPU really sends: b s h 2 / stage_message_shards."""
    return p2p_send_s(problem, sender, receiver, same_node, gpus_per_stage, mbs) / stage_message_shards(
        problem.job, tp, cp)


def cp_layer_activation_bytes(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int,
                              recompute: Recompute, cp: int = 1) -> float:
    """Stored activations of one layer on one rank of a cp group: every term of layer_activation_bytes counts the
    rank's s / cp tokens (the attention-score term too: s / cp queries against s keys)."""
    return layer_activation_bytes(problem, node_type, kind, tp, micro_batch_size, recompute) / cp


def cp_full_recompute_working_bytes(problem: Problem, node_type: str, tp: int, micro_batch_size: int,
                                    cp: int = 1) -> float:
    return full_recompute_working_bytes(problem, node_type, tp, micro_batch_size) / cp


def cp_logits_bytes(model: ModelSpec, tp: int, micro_batch_size: int, cp: int = 1) -> float:
    return logits_bytes(model, tp, micro_batch_size) / cp


def state_bytes(job: JobSpec, dp: int, cp: int = 1, distributed: bool = False) -> float:
    """Bytes per parameter (state_bytes_per_param) with the sharded part divided by the dp x cp ranks under the
    distributed optimizer (upstream shards over the data-parallel group with context parallelism)."""
    grad = gradient_bytes(job)
    sharded = OPTIMIZER_STATE_BYTES_PER_PARAM + (0 if job.gradients_in_fp32 else FP32_MAIN_GRAD_BYTES_PER_PARAM)
    return WEIGHT_BYTES_PER_PARAM + grad + sharded / (dp * cp if distributed else 1)


def gradient_sync_s(problem: Problem, node_type: str, parameters: float, tp: int, dp: int, spans_nodes: bool,
                    cp: int = 1, distributed: bool = False) -> float:
    """The stage's gradient exchange over its dp x cp ranks (upstream reduces gradients over the data-parallel group
    with context parallelism), on the bandwidth of dp_allreduce_s.

    Without the distributed optimizer: a ring all-reduce of P / t gradients, 2 (d - 1) / d x P / t x g bytes / bw.
    With it (megatron/core/distributed/param_and_grad_buffer.py, optimizer/distrib_optimizer.py): a reduce-scatter
    of the gradients in the gradient dtype and an all-gather of the updated parameters in the 16-bit parameter dtype,
    (d - 1) / d x P / t x (g + 2) bytes / bw, not overlapped with compute (like the all-reduce here).
    As g >= 2, g + 2 <= 2 g: never slower than the all-reduce (equal with 16-bit gradients)."""
    group = dp * cp
    if not distributed:
        return dp_allreduce_s(problem, node_type, parameters, tp, group, spans_nodes)
    if group <= 1 or parameters <= 0:
        return 0.0
    node = problem.node(node_type)
    bandwidth = intra_node_allreduce_bytes_per_s(node)
    if spans_nodes:
        bandwidth = min(bandwidth, inter_node_bytes_per_s_per_gpu(node, tp))
    per_rank = parameters / tp
    return (group - 1) / group * per_rank * (gradient_bytes(problem.job) + WEIGHT_BYTES_PER_PARAM) / bandwidth


def optimizer_s(problem: Problem, node_type: str, parameters: float, tp: int, dp: int, cp: int = 1,
                distributed: bool = False) -> float:
    """Adam step (optimizer_step_s) over the parameters of one GPU: P / t, / (dp x cp) with the distributed
    optimizer; plus Megatron-LM's passes over the rank's whole gradient buffer (grad_buffer_passes_s)."""
    per_gpu = parameters / tp / (dp * cp if distributed else 1)
    gpu = problem.gpu_of(node_type)
    return (per_gpu * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM / gbyte_per_s_to_bytes_per_s(gpu.hbm_gbyte_per_s)
            + grad_buffer_passes_s(problem, node_type, parameters / tp, dp * cp,
                                   scaled=not problem.ddp_average_in_collective))


# Megatron-LM's per-iteration passes over the gradient buffer (docs/cost-model.md section 8b), at upstream main
# d98e8a64, megatron/core/distributed/: each a memory-bound pass over every local gradient element, on the compute
# stream. The eager engine's path (section 6c) prices its own step (deepspeed_optimizer_step_s) instead.
GRAD_BUFFER_ZERO_PASSES = 1  # zero_grad_buffer -> _ParamAndGradBuffer.reset(): grad_data.zero_(), one write
GRAD_BUFFER_NAN_CHECK_PASSES = 1  # check_grads: bucket.grad_data.norm(p=2) (--check-for-nan-in-loss-and-grad, on)
GRAD_BUFFER_SCALE_PASSES = 2  # grad_data *= 1 / (dp x cp) before the reduce: a read and a write; skipped at dp x cp 1


def grad_buffer_passes_s(problem: Problem, node_type: str, local_gradients: float, dp_cp: int,
                         scaled: bool = True) -> float:
    """The gradient buffer's passes per iteration: local_gradients x (1 zero + 1 norm [+ 2 scale if dp x cp > 1 and
    scaled]) x gradient_bytes / HBM bandwidth. scaled = False: --ddp-average-in-collective sets the buffer's scaling
    factor to 1 (distributed_data_parallel.py l. 271-273: the dense buffer; the experts' only at ep = 1, where
    expt_dp_group.size() / dp_cp_group.size() = 1) and start_grad_sync skips a factor of 1 (param_and_grad_buffer.py
    l. 664-667), the collective averaging instead (ReduceOp.AVG, l. 670-672; docs/cost-model.md 8c)."""
    scale = GRAD_BUFFER_SCALE_PASSES if dp_cp > 1 and scaled else 0
    passes = GRAD_BUFFER_ZERO_PASSES + GRAD_BUFFER_NAN_CHECK_PASSES + scale
    gpu = problem.gpu_of(node_type)
    return local_gradients * passes * gradient_bytes(problem.job) / gbyte_per_s_to_bytes_per_s(gpu.hbm_gbyte_per_s)


def context_parallel_error(model: ModelSpec, cp: int) -> str | None:
    """Why Megatron-LM (or this cost model) cannot run context parallelism cp on the model, or None."""
    if cp == 1:
        return None
    if model.seq_length % (2 * cp):
        return (f"seq_length {model.seq_length} is not a multiple of 2 x cp = {2 * cp} (Megatron-LM's validate_args: "
                "'seq-length should be a multiple of 2 * context-parallel-size')")
    if any(k.cross_attention for k in model.kinds):
        return "encoder-decoder models: the cost model has no context-parallel cross-attention"
    if model.is_moe:
        return ("mixture-of-experts models: the cost model prices expert parallelism without context parallelism "
                "(upstream's expert data-parallel group would be dp x cp / ep)")
    if model.encoder_only:
        return ("encoder-only models (BERT): upstream's examples/bert/pretrain_bert.py gives every rank whole "
                "sequences (its get_batch has no per-context-parallel-rank split, unlike pretrain_gpt.py)")
    return None


# ---- placement ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where stages land. Stages are laid out in pipeline order (Megatron's rank order: tensor, then data, then
    pipeline); each run of consecutive stages of one node type is packed onto fresh nodes of that type.

    send_same_node[i]: stage i's sends to stage i+1 stay inside one node.
    stage_spans_nodes[i]: stage i's tp x dp GPUs are on more than one node (its data-parallel ring crosses NICs).
    ends_same_node: every GPU slot of the first stage shares a node with its partner in the last stage (pp > 1):
        one run of one type with pp x tp x dp <= GPUs per node.
    nodes: nodes rented per node type.
    """

    send_same_node: tuple[bool, ...]
    stage_spans_nodes: tuple[bool, ...]
    nodes: dict[str, int]
    ends_same_node: bool = False


def place(problem: Problem, plan: Plan) -> Placement:
    w = plan.gpus_per_stage
    same: list[bool] = []
    spans: list[bool] = []
    nodes: dict[str, int] = {}
    run_index = 0  # position of the stage within its run
    for i, stage in enumerate(plan.stages):
        gpn = problem.node(stage.node_type).gpus_per_node
        if i > 0 and plan.stages[i - 1].node_type != stage.node_type:
            run_index = 0
        first_slot, last_slot = run_index * w, (run_index + 1) * w - 1
        spans.append(first_slot // gpn != last_slot // gpn)
        if i + 1 < plan.pp:
            if plan.stages[i + 1].node_type == stage.node_type:
                # GPU slot x of this stage sends to slot x + w of the next; all must share a node.
                same.append(all((first_slot + x) // gpn == (first_slot + x + w) // gpn for x in range(w)))
            else:
                same.append(False)
        run_end = i + 1 == plan.pp or plan.stages[i + 1].node_type != stage.node_type
        if run_end:
            nodes[stage.node_type] = nodes.get(stage.node_type, 0) + math.ceil((run_index + 1) * w / gpn)
        run_index += 1
    ends_same_node = (plan.pp > 1 and len({s.node_type for s in plan.stages}) == 1
                      and plan.pp * w <= problem.node(plan.stages[0].node_type).gpus_per_node)
    return Placement(send_same_node=tuple(same), stage_spans_nodes=tuple(spans), nodes=nodes,
                     ends_same_node=ends_same_node)


# ---- the estimate ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StageEstimate:
    node_type: str
    gpu: str
    num_layers: int
    recompute: Recompute
    compute_s: float  # per micro-batch: layers fwd+bwd(+recompute) + TP all-reduces + embedding/head
    p2p_s: float  # per micro-batch: this stage's sends (activations forward, gradients backward)
    dp_allreduce_s: float  # per iteration
    optimizer_s: float  # per iteration
    parameters: float  # all tp ranks together
    memory_bytes: float  # per GPU
    memory_capacity_bytes: float
    recomputed_layers: int | None = None  # block recomputation only: the layers this stage fully recomputes

    @property
    def time_s(self) -> float:
        return self.compute_s + self.p2p_s

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_capacity_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    num_micro_batches: int
    stages: tuple[StageEstimate, ...]
    pipeline_time_s: float
    dp_allreduce_s: float
    embedding_allreduce_s: float
    optimizer_s: float
    iteration_time_s: float
    iterations: int
    training_time_s: float
    nodes: dict[str, int]
    usd_per_hour: float
    cost_usd: float

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)

    def to_dict(self) -> dict:
        return {
            "iteration_time_s": self.iteration_time_s,
            "training_time_s": self.training_time_s,
            "cost_usd": self.cost_usd,
            "usd_per_hour": self.usd_per_hour,
            "num_micro_batches": self.num_micro_batches,
            "pipeline_time_s": self.pipeline_time_s,
            "dp_allreduce_s": self.dp_allreduce_s,
            "embedding_allreduce_s": self.embedding_allreduce_s,
            "optimizer_s": self.optimizer_s,
            "iterations": self.iterations,
            "nodes": dict(sorted(self.nodes.items())),
            "fits": self.fits,
            "stages": [
                {
                    "node_type": s.node_type,
                    "gpu": s.gpu,
                    "num_layers": s.num_layers,
                    "recompute": s.recompute,
                    "compute_s": s.compute_s,
                    "p2p_s": s.p2p_s,
                    "dp_allreduce_s": s.dp_allreduce_s,
                    "optimizer_s": s.optimizer_s,
                    "memory_gib": s.memory_bytes / 2**30,
                    "memory_capacity_gib": s.memory_capacity_bytes / 2**30,
                    "fits": s.fits,
                    **({} if s.recomputed_layers is None else {"recomputed_layers": s.recomputed_layers}),
                }
                for s in self.stages
            ],
        }


def pipeline_time_s(stage_times_s: list[float], num_micro_batches: int) -> float:
    """1F1B: (m - 1) x max_i t_i + sum_i t_i (Narayanan et al. 2021; FASOP eq. 2)."""
    return (num_micro_batches - 1) * max(stage_times_s) + sum(stage_times_s)


# ---- interleaved (virtual) pipeline stages -----------------------------------------------------------------
# Narayanan et al., SC'21, section 2.2.2: each pipeline rank holds v model chunks; a micro-batch passes every rank v
# times. docs/cost-model.md, section "Interleaved pipeline".


def interleaved_pipeline_time_s(stage_times_s: list[float], num_micro_batches: int, virtual_stages: int) -> float:
    """Interleaved 1F1B with v chunks per rank: ((m v - 1) x max_i t_i + sum_i t_i) / v.

    Rank i spends t_i / v per chunk and micro-batch and runs m v chunk-micro-batches; the fill and drain are one pass
    of a chunk through the p ranks. That is 1F1B over m v units of t_i / v each: pipeline_time_s(t / v, m v). v = 1 is
    pipeline_time_s; with p equal stages t it is m t + (p - 1) t / v, the paper's bubble (p - 1) / (v m) of m t."""
    v = virtual_stages
    if v == 1:
        return pipeline_time_s(stage_times_s, num_micro_batches)
    return ((num_micro_batches * v - 1) * max(stage_times_s) + sum(stage_times_s)) / v


def interleaved_in_flight_chunks(pp: int, rank: int, num_micro_batches: int, virtual_stages: int) -> int:
    """Chunk-micro-batches whose activations rank `rank` holds at once under Megatron's interleaved schedule: its
    warm-up forwards plus the one of the steady state, at most m v (megatron/core/pipeline_parallel/schedules.py,
    get_pp_rank_microbatches: warm-up = (p - rank - 1) x 2 + (v - 1) x microbatch_group_size_per_vp_stage, the group
    size defaulting to p in model_parallel_config.py)."""
    v = virtual_stages
    warmup = (pp - rank - 1) * 2 + (v - 1) * pp
    return min(warmup + 1, num_micro_batches * v)


def in_flight_per_layer(pp: int, rank: int, num_micro_batches: int, virtual_stages: int) -> float:
    """Micro-batches' worth of each of the rank's layers held at once: min(p - rank, m) without interleaving; with v
    chunks of n / v layers each, in-flight chunks x (n / v) / n = in-flight chunks / v."""
    if virtual_stages == 1:
        return min(pp - rank, num_micro_batches)
    return interleaved_in_flight_chunks(pp, rank, num_micro_batches, virtual_stages) / virtual_stages


def check_interleaving(problem: Problem, plan: Plan) -> None:
    """Megatron-LM's rules for v > 1 (SpecError naming the rule): pp > 1 (megatron/training/arguments.py
    validate_args with overlap_p2p_comm, upstream's default; pp > 2 only with --no-overlap-p2p-communication, which
    optsearch does not emit), m a multiple of pp (schedules.py: micro-batch groups of
    microbatch_group_size_per_vp_stage = pp), every stage's layers a multiple of v (optsearch's equal chunks), one
    layer kind (the flexible layout has no encoder layers)."""
    v = plan.virtual_stages
    if v == 1:
        return
    if v < 1:
        raise SpecError(f"plan: virtual_stages = {v}: must be at least 1")
    if plan.pp < 2:
        raise SpecError(f"plan: virtual_stages = {v} needs pp > 1 (Megatron-LM's interleaved schedule); pp = {plan.pp}")
    m = num_micro_batches(problem.job, plan.dp, plan.micro_batch_size)
    if m % plan.pp:
        raise SpecError(f"plan: virtual_stages = {v}: the {m} micro-batches must be a multiple of pp = {plan.pp} "
                        "(Megatron-LM's interleaved schedule runs them in groups of pp)")
    for i, stage in enumerate(plan.stages):
        if stage.num_layers % v:
            raise SpecError(f"plan: stages[{i}].num_layers = {stage.num_layers}: must be a multiple of "
                            f"virtual_stages = {v} (each rank's layers split into {v} equal chunks)")
    if len(problem.model.kinds) > 1:
        raise SpecError(f"plan: virtual_stages = {v}: {problem.model.name} has several layer kinds; interleaving is "
                        "planned for models of one layer kind only")
    if plan.recompute_num_layers is not None:
        raise SpecError(f"plan: virtual_stages = {v} with recompute_num_layers = {plan.recompute_num_layers}: "
                        "Megatron-LM applies block recomputation to each model chunk, which the cost model does not "
                        "price; use one recomputation mode, or v = 1")


def interleaved_send_counts(pp: int, rank: int, virtual_stages: int) -> tuple[int, int, int]:
    """Per micro-batch, how many sends rank `rank` makes: (to rank + 1, to rank - 1, across the wrap-around between
    the last and the first rank). A micro-batch crosses v p - 1 chunk boundaries each way: v on each of the p - 1
    links and v - 1 on the wrap-around (rank p-1 chunk k -> rank 0 chunk k+1 forward, its gradient backward)."""
    v = virtual_stages
    forward = v if rank < pp - 1 else 0
    backward = v if rank > 0 else 0
    wrap = v - 1 if rank in (0, pp - 1) and pp > 1 else 0
    return forward, backward, wrap


def dp_allreduce_s(
    problem: Problem, node_type: str, parameters: float, tp: int, dp: int, spans_nodes: bool
) -> float:
    """Ring all-reduce of the stage's gradients (parameters / tp x gradient bytes) over dp ranks.

    The ring's slowest link: the intra-node all-reduce bandwidth when the stage sits in one node, else the node's
    NIC: each of the tp rings (one per tensor-parallel rank) crosses a node boundary once, so the tp rings of a
    node share its NIC (not all tp x dp GPUs).
    """
    node = problem.node(node_type)
    bandwidth = intra_node_allreduce_bytes_per_s(node)
    if spans_nodes:
        bandwidth = min(bandwidth, inter_node_bytes_per_s_per_gpu(node, tp))
    return ring_allreduce_s(parameters / tp * gradient_bytes(problem.job), dp, bandwidth)


def embedding_allreduce_s(problem: Problem, first: str, last: str, same_node: bool, gpus_per_stage: int,
                          tp: int, grad_bytes: float | None = None) -> float:
    """Tied embeddings with pp > 1: the first and the last stage all-reduce the word-embedding gradient
    (V h / t elements x gradient bytes) between the two ranks that hold it, every (tp, dp) pair at once.

    Same node: the intra-node all-reduce bandwidth; otherwise the slower of the two NICs, each shared by the
    stage's GPUs on that node (as a pipeline send, p2p_send_s). 0 for untied embeddings (the caller passes pp > 1).
    grad_bytes: bytes per element when the engine reduces in another dtype than the job's gradients (6c).
    """
    model = problem.model
    if not model.tied_embeddings:
        return 0.0
    per_element = gradient_bytes(problem.job) if grad_bytes is None else grad_bytes
    message = model.vocab_size * model.hidden_size / tp * per_element
    if same_node:
        bandwidth = intra_node_allreduce_bytes_per_s(problem.node(first))
    else:
        bandwidth = min(inter_node_bytes_per_s_per_gpu(problem.node(first), gpus_per_stage),
                        inter_node_bytes_per_s_per_gpu(problem.node(last), gpus_per_stage))
    latency = nccl_allreduce_latency_s(problem.node(first), 2, 1 if same_node else 2)
    return ring_allreduce_s(message, 2, bandwidth) + latency


def optimizer_step_s(problem: Problem, node_type: str, parameters: float, tp: int, dp: int) -> float:
    """Adam step, memory bound: parameters per GPU x 28 bytes / HBM bandwidth (sharded over dp if distributed)."""
    per_gpu = parameters / tp / (dp if problem.job.distributed_optimizer else 1)
    gpu = problem.gpu_of(node_type)
    return per_gpu * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM / gbyte_per_s_to_bytes_per_s(gpu.hbm_gbyte_per_s)


# ---- mixture of experts and expert parallelism ----------------------------------------------------------------
# Megatron-LM (megatron/core/parallel_state.py): the expert grid is tp_e x ep x dp_e x pp over the same ranks, with
# the expert tensor-parallel size tp_e = tp by default (arguments.py) and dp_e = world / (tp_e ep pp) = dp / ep
# (no context parallelism); its rank order tp-ep-dp-pp puts the ep ranks of a group tp apart, inside the stage's
# tp x dp block. Experts per rank: E / ep (arguments.py: num_experts % ep == 0).
MOE_ALLTOALLS_PER_LAYER = 4  # dispatch + combine, forward and backward (MoEAlltoAllTokenDispatcher)


def expert_parallel_error(model: ModelSpec, job: JobSpec, tp: int, dp: int, ep: int) -> str | None:
    """Why (tp, dp, ep) is not a layout Megatron-LM trains this model with, or None when it is."""
    if ep < 1:
        return f"ep = {ep}: must be at least 1"
    moe = [k for k in model.kinds if k.is_moe]
    if ep > 1 and not moe:
        return f"ep = {ep}: model {model.name} has no mixture-of-experts layers (expert parallelism needs experts)"
    for k in moe:
        if k.num_experts % ep:
            return f"ep = {ep} does not divide num_experts {k.num_experts} of layer kind {k.name}"
    if dp % ep:
        return f"ep = {ep} does not divide dp = {dp} (the expert data-parallel size is dp / ep)"
    if moe and not sequence_parallel_on(job, tp) and tp > 1:
        return (f"tp = {tp} with mixture-of-experts layers needs sequence parallelism (upstream's MoELayer refuses "
                "to train with tp > 1 without it): leave job.sequence_parallel unset or true")
    return None


def stage_expert_parameters(model: ModelSpec, kinds: dict[str, int]) -> float:
    """Expert parameters of a stage's layers (all tp ranks and all ep ranks together); the rest is dense."""
    by_name = {k.name: k for k in model.kinds}
    return float(sum(model.expert_parameters(by_name[name]) * count for name, count in kinds.items()))


def expert_state_bytes_per_param(job: JobSpec, dp: int, ep: int, distributed: bool = False) -> float:
    """Per-parameter bytes of an expert parameter on the ranks that hold it: state_bytes with the distributed
    optimizer sharding over the expert data-parallel group dp / ep. A rank holds 1 / (tp ep) of them."""
    return state_bytes(job, dp // ep, 1, distributed)


def expert_allreduce_s(problem: Problem, node_type: str, expert_params: float, tp: int, dp: int, ep: int,
                       spans_nodes: bool, distributed: bool = False) -> float:
    """Ring all-reduce of the stage's expert gradients over the expert data-parallel group of d = dp / ep ranks:
    each rank holds expert_params / (tp ep) of them. Across nodes the tp x ep rings of a node (one per expert
    tensor- and expert-parallel rank) share its NIC, as the tp rings of the dense all-reduce do. With the
    distributed optimizer, as gradient_sync_s: a reduce-scatter of the gradients and an all-gather of the 16-bit
    parameters, (d - 1) / d x P_rank x (g + 2) bytes / bandwidth."""
    node = problem.node(node_type)
    bandwidth = intra_node_allreduce_bytes_per_s(node)
    if spans_nodes:
        bandwidth = min(bandwidth, inter_node_bytes_per_s_per_gpu(node, tp * ep))
    group, per_rank = dp // ep, expert_params / (tp * ep)
    if not distributed:
        return ring_allreduce_s(per_rank * gradient_bytes(problem.job), group, bandwidth)
    if group <= 1 or expert_params <= 0:
        return 0.0
    return (group - 1) / group * per_rank * (gradient_bytes(problem.job) + WEIGHT_BYTES_PER_PARAM) / bandwidth


def expert_optimizer_step_s(problem: Problem, node_type: str, expert_params: float, tp: int, dp: int, ep: int,
                            distributed: bool = False) -> float:
    """Adam step over the rank's expert parameters: expert_params / (tp ep) (/ (dp / ep) if distributed) x 28 bytes /
    HBM bandwidth."""
    per_gpu = expert_params / (tp * ep) / (dp // ep if distributed else 1)
    gpu = problem.gpu_of(node_type)
    return (per_gpu * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM / gbyte_per_s_to_bytes_per_s(gpu.hbm_gbyte_per_s)
            + grad_buffer_passes_s(problem, node_type, expert_params / (tp * ep), dp,
                                   scaled=not (problem.ddp_average_in_collective and ep == 1)))


def ep_ranks_per_node(gpus_per_node: int, tp: int, ep: int, spans_nodes: bool) -> int:
    """Ranks of one expert-parallel group on one node. A group is tp x ep consecutive GPUs of a stage (rank order
    tp-ep-dp): all on one node when the stage is, or when tp x ep divides the GPUs per node (blocks are node-aligned);
    otherwise the group covers whole nodes, gpus_per_node / tp ranks on each."""
    if not spans_nodes or gpus_per_node % (tp * ep) == 0:
        return ep
    return max(1, min(ep, gpus_per_node // tp))


def moe_alltoall_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, ep: int, micro_batch_size: int,
                   spans_nodes: bool) -> float:
    """One token all-to-all (dispatch or combine) of an expert layer over its ep group, for one micro-batch.

    Each rank holds b s / tp tokens (sequence parallel, which MoE with tp > 1 requires) and sends each to k experts:
    message = b s k h x 2 / tp bytes, of which a share (ep - 1) / ep leaves the rank (tokens spread evenly over the
    experts). With r ranks of the group on this node, (r - 1) / ep of it goes over the intra-node link and (ep - r) /
    ep over the NIC, which the node's GPUs share (all send at once); the two run concurrently:
        t = max((r - 1) / ep x message / intra, (ep - r) / ep x message / (NIC / GPUs of the node sending))
    0 for a dense kind or ep = 1."""
    if not kind.is_moe or ep <= 1:
        return 0.0
    model, node = problem.model, problem.node(node_type)
    message = micro_batch_size * model.seq_length * kind.moe_router_topk * model.hidden_size * ACTIVATION_DTYPE_BYTES / tp
    r = ep_ranks_per_node(node.gpus_per_node, tp, ep, spans_nodes)
    intra = (r - 1) / ep * message / intra_node_bytes_per_s(node)
    inter = (ep - r) / ep * message / inter_node_bytes_per_s_per_gpu(node, node.gpus_per_node) if r < ep else 0.0
    return max(intra, inter)


def moe_layer_alltoall_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, ep: int,
                         micro_batch_size: int, recompute: Recompute, spans_nodes: bool) -> float:
    """All-to-alls of one expert layer per micro-batch: 4 (dispatch and combine, forward and backward), 6 under full
    recomputation (the forward runs again); selective recomputation re-runs only the attention core."""
    count = MOE_ALLTOALLS_PER_LAYER + (2 if recompute == "full" else 0)
    return count * moe_alltoall_s(problem, node_type, kind, tp, ep, micro_batch_size, spans_nodes)


def check_plan(problem: Problem, plan: Plan) -> None:
    """Raise SpecError when the plan is inconsistent with the model, cluster or job (not with memory)."""
    model = problem.model
    if plan.pp < 1:
        raise SpecError("plan: needs at least one stage")
    for i, stage in enumerate(plan.stages):
        node = problem.node(stage.node_type)
        if plan.tp > node.gpus_per_node:
            raise SpecError(
                f"plan: tp = {plan.tp}: larger than the {node.gpus_per_node} GPUs per node of {node.name} "
                f"(stage {i}); tensor parallelism stays inside a node"
            )
        if stage.num_layers == 0 and 0 < i < plan.pp - 1:
            raise SpecError(f"plan: stages[{i}].num_layers = 0: only the first or last stage may hold no layers")
    if model.num_attention_heads % plan.tp:
        raise SpecError(f"plan: tp = {plan.tp} does not divide num_attention_heads {model.num_attention_heads}")
    if model.kv_heads % plan.tp:
        raise SpecError(f"plan: tp = {plan.tp} does not divide the key/value heads {model.kv_heads}")
    if plan.recompute_num_layers is not None:
        if plan.recompute_num_layers < 1:
            raise SpecError(f"plan: recompute_num_layers = {plan.recompute_num_layers}: must be at least 1")
        check_block_recompute(plan.stages, plan.recompute_num_layers, "plan")
    total = sum(s.num_layers for s in plan.stages)
    if total != model.num_layers:
        raise SpecError(f"plan: stage layers sum to {total} but {model.name} has {model.num_layers} layers")
    num_micro_batches(problem.job, plan.dp, plan.micro_batch_size)
    why = expert_parallel_error(model, problem.job, plan.tp, plan.dp, plan.ep)
    if why is not None:
        raise SpecError(f"plan: {why}")
    why = context_parallel_error(model, plan.cp)
    if why is not None:
        raise SpecError(f"plan: cp = {plan.cp}: {why}")
    check_interleaving(problem, plan)
    for name, count in place(problem, plan).nodes.items():
        available = problem.node(name).num_nodes_available
        if count > available:
            raise SpecError(f"plan: needs {count} nodes of {name} but the cluster has {available}")


# ---- Megatron's --overlap-grad-reduce (issue 15; docs/cost-model.md section 7c) --------------------------------
# megatron/core/distributed/distributed_data_parallel.py: bucket_size defaults to max(40e6, 1e6 x dp) elements with
# overlap_grad_reduce, and is None (one bucket) on pipeline ranks > 0 ("data-parallel communication on these stages is
# not on the critical path"). param_and_grad_buffer.py: params are laid into buckets in reverse order (backward
# order); register_grad_ready launches a bucket's async reduce-scatter / all-reduce once all its grads are ready in the
# last micro-batch (is_last_microbatch; schedules.py enables grad sync only before the last backward).
OVERLAP_BUCKET_MIN_ELEMENTS = 40_000_000
OVERLAP_BUCKET_ELEMENTS_PER_DP_RANK = 1_000_000


def overlap_bucket_elements(dp_group: int) -> int:
    """Megatron's default bucket size with --overlap-grad-reduce: max(40e6, 1e6 x dp group size) elements."""
    return max(OVERLAP_BUCKET_MIN_ELEMENTS, OVERLAP_BUCKET_ELEMENTS_PER_DP_RANK * dp_group)


def overlap_bucket_count(elements_per_rank: float, dp_group: int, first_stage: bool) -> int:
    """Buckets of one stage's gradient buffer: ceil(elements / bucket size) on pipeline rank 0, 1 elsewhere."""
    if not first_stage or elements_per_rank <= 0:
        return 1
    return max(1, math.ceil(elements_per_rank / overlap_bucket_elements(dp_group)))


def overlapped_grad_reduce_s(sync_s: float, window_s: float, buckets: int) -> float:
    """Exposed part of a stage's bucketed gradient collective (sync_s in all) launched during a backward window_s
    long whose gradients become ready uniformly: bucket k is ready at k window / n and the collectives run one after
    another, so the last one ends at max(window + sync / n, window / n + sync):
    exposed = max(sync / n, sync - window (n - 1) / n)."""
    if sync_s <= 0:
        return 0.0
    n = max(1, buckets)
    return max(sync_s / n, sync_s - max(0.0, window_s) * (n - 1) / n)


def layer_forward_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int) -> float:
    """The forward of one layer for one micro-batch (profile forward + its forward TP all-reduces): layer_step_s's
    forward part; the rest of layer_step_s is the backward pass (with any recomputation, which runs in it)."""
    entry = problem.profile.get(problem.node(node_type).gpu, kind.name, tp, micro_batch_size)
    step = entry.forward_s * entry.forward_repeats
    if not entry.tp_comm_included and tp > 1:
        blocks = 3 if kind.cross_attention else 2
        step += entry.forward_repeats * blocks * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * tp_allreduce_s(
            problem, node_type, tp, micro_batch_size)
    return step


def stage_forward_s(problem: Problem, node_type: str, kinds: dict[str, int], tp: int, micro_batch_size: int,
                    first: bool, last: bool, cp: int = 1) -> float:
    """One micro-batch's forward on a stage: its layers, the embedding (with its TP all-reduce) on the first stage,
    the head's forward on the last, over s / cp tokens."""
    by_name = {k.name: k for k in problem.model.kinds}
    gpu = problem.node(node_type).gpu
    fwd = sum(count * layer_forward_s(problem, node_type, by_name[name], tp, micro_batch_size)
              for name, count in kinds.items())
    if first:
        fwd += problem.profile.get(gpu, EMBEDDING_KIND, tp, micro_batch_size).forward_s
        if tp > 1 and not problem.profile.get(gpu, EMBEDDING_KIND, tp, micro_batch_size).tp_comm_included:
            fwd += tp_allreduce_s(problem, node_type, tp, micro_batch_size)
    if last:
        fwd += problem.profile.get(gpu, HEAD_KIND, tp, micro_batch_size).forward_s
    return fwd / cp


def exposed_grad_reduce_s(sync_s: list[float], backward_s: list[float], buckets0: int) -> list[float]:
    """Per stage, the exposed part of its gradient collective under --overlap-grad-reduce, measured from the end of
    stage 0's last backward (the iteration's end under 1F1B). Stage 0: overlapped_grad_reduce_s over its own last
    backward in buckets0 buckets. Stage i > 0: one bucket launched at the end of its last backward, while stages
    i-1..0 still run theirs: exposed = max(0, sync_i - sum_{j<i} backward_j)."""
    out = [overlapped_grad_reduce_s(sync_s[0], backward_s[0], buckets0)]
    hidden = 0.0
    for i in range(1, len(sync_s)):
        hidden += backward_s[i - 1]
        out.append(max(0.0, sync_s[i] - hidden))
    return out


ESTIMATE_MEMO = True  # estimate: each per-stage term computed once per distinct arguments within one call (loop39)


class _Once:
    """estimate's memo of its per-stage terms, for one call (one problem): once(fn, *args) is fn(problem, *args),
    computed the first time those arguments come and read back after, so a pipeline of many stages on few node types
    prices each (node type, layer kind, recompute, ...) term once, not once per stage. The terms are pure functions
    of their arguments and the problem (which the memo never outlives), so every value is the float the call would
    return, and the estimate is the same, bit for bit (issue 14, round 21, loop39: ~26,000 profile lookups in 200
    loop steps of Megatron 39B)."""

    __slots__ = ("problem", "memo")

    def __init__(self, problem: Problem):
        self.problem, self.memo = problem, {}

    def __call__(self, fn, *args):
        key = (fn, *args)
        try:
            return self.memo[key]
        except KeyError:
            value = self.memo[key] = fn(self.problem, *args)
            return value

    def keyed(self, key: tuple, fn, *args):
        """fn(*args) (no problem argument), memoized under key: for arguments that are not hashable (a stage's
        kinds dict), a key that determines them."""
        try:
            return self.memo[key]
        except KeyError:
            value = self.memo[key] = fn(*args)
            return value


class _Direct(_Once):
    """ESTIMATE_MEMO off: every term computed at each call, as before."""

    def __call__(self, fn, *args):
        return fn(self.problem, *args)

    def keyed(self, key: tuple, fn, *args):
        return fn(*args)


def estimate(problem: Problem, plan: Plan) -> Estimate:
    """Price a plan: per-stage times and memory, iteration and training time, nodes, USD."""
    check_plan(problem, plan)
    if plan.tp_comm_overlap:
        why = tp_comm_overlap_error(problem, plan)
        if why is not None:
            raise SpecError(f"plan: tp_comm_overlap: {why}")
    if plan.ddp_average_in_collective != problem.ddp_average_in_collective:  # the plan's own setting prices (8c)
        from dataclasses import replace as _replace
        problem = _replace(problem, ddp_average_in_collective=plan.ddp_average_in_collective)
    model, tp, dp, mbs, pp = problem.model, plan.tp, plan.dp, plan.micro_batch_size, plan.pp
    cp, dist = plan.cp, plan.distributed_optimizer
    v = plan.virtual_stages
    m = num_micro_batches(problem.job, dp, mbs)
    placement = place(problem, plan)
    once = _Once(problem) if ESTIMATE_MEMO else _Direct(problem)
    kinds_by_name = {k.name: k for k in model.kinds}
    stage_kinds = stage_layer_kinds(model, plan)
    stages: list[StageEstimate] = []
    for i, stage in enumerate(plan.stages):
        first, last = i == 0, i == pp - 1
        node = problem.node(stage.node_type)
        kinds = stage_kinds[i]
        recomputed = plan.recomputed_layers(i, kinds)  # block recomputation: min(N, layers) of each kind
        compute = sum(
            count * once(cp_layer_step_s, stage.node_type, kinds_by_name[name], tp, mbs, stage.recompute, cp)
            for name, count in kinds.items()
        ) if plan.recompute_num_layers is None else sum(
            once(block_recompute_step_s, stage.node_type, kinds_by_name[name], tp, mbs, count, recomputed[name], cp)
            for name, count in kinds.items()
        )
        # expert all-to-alls; under block recomputation only the recomputed layers run their forward ones again
        compute += sum(
            (count - recomputed[name]) * once(moe_layer_alltoall_s, stage.node_type, kinds_by_name[name], tp,
                                              plan.ep, mbs, "none", placement.stage_spans_nodes[i])
            + recomputed[name] * once(moe_layer_alltoall_s, stage.node_type, kinds_by_name[name], tp, plan.ep,
                                      mbs, "full", placement.stage_spans_nodes[i])
            if plan.recompute_num_layers is not None else
            count * once(moe_layer_alltoall_s, stage.node_type, kinds_by_name[name], tp, plan.ep, mbs,
                         stage.recompute, placement.stage_spans_nodes[i])
            for name, count in kinds.items()
        )
        if plan.tp_comm_overlap and tp > 1:  # section 3c (validate only)
            compute += sum(count * tp_overlap_layer_change_s(problem, stage.node_type, kinds_by_name[name], tp, mbs,
                                                             stage.recompute) for name, count in kinds.items())
        if first:
            compute += cp_embedding_step_s(problem, stage.node_type, tp, mbs, cp)
        if last:
            compute += cp_head_step_s(problem, stage.node_type, tp, mbs, cp)
        p2p = 0.0
        forward, backward, wrap = interleaved_send_counts(pp, i, v)
        if not last:
            p2p += forward * once(stage_send_s, stage.node_type, plan.stages[i + 1].node_type,
                                  placement.send_same_node[i], plan.gpus_per_stage, mbs, tp, cp)
        if not first:
            p2p += backward * once(stage_send_s, stage.node_type, plan.stages[i - 1].node_type,
                                   placement.send_same_node[i - 1], plan.gpus_per_stage, mbs, tp, cp)
        if wrap:
            other = plan.stages[-1 if first else 0].node_type
            p2p += wrap * once(stage_send_s, stage.node_type, other, placement.ends_same_node, plan.gpus_per_stage,
                               mbs, tp, cp)
        params = once.keyed((stage_parameters, tuple(kinds.items()), first, last), stage_parameters, model, kinds,
                            first, last, pp)
        in_flight = in_flight_per_layer(pp, i, m, v)
        activations = sum(
            in_flight * count * once(cp_layer_activation_bytes, stage.node_type, kinds_by_name[name], tp, mbs,
                                     stage.recompute, cp)
            for name, count in kinds.items()
        ) if plan.recompute_num_layers is None else sum(
            in_flight * once(block_recompute_activation_bytes, stage.node_type, kinds_by_name[name], tp, mbs,
                             count, recomputed[name], cp)
            for name, count in kinds.items()
        )
        if stage.recompute == "full" and stage.num_layers > 0:  # block: N >= 1, so some layer is recomputed
            activations += once(cp_full_recompute_working_bytes, stage.node_type, tp, mbs, cp)
        if last:
            activations += cp_logits_bytes(model, tp, mbs, cp)
        experts = once.keyed((stage_expert_parameters, tuple(kinds.items())), stage_expert_parameters, model, kinds)
        dense = params - experts
        memory = dense / tp * state_bytes(problem.job, dp, cp, dist) + activations + MEMORY_RESERVE_BYTES
        memory += experts / (tp * plan.ep) * expert_state_bytes_per_param(problem.job, dp, plan.ep, dist)
        if plan.tp_comm_overlap and tp > 1:  # section 9g: Transformer Engine's userbuffers
            memory += tp_overlap_buffer_bytes(problem, stage.node_type, mbs, cp)
        stages.append(
            StageEstimate(
                node_type=stage.node_type,
                gpu=node.gpu,
                num_layers=stage.num_layers,
                recompute=stage.recompute,
                compute_s=compute,
                p2p_s=p2p,
                dp_allreduce_s=once(gradient_sync_s, stage.node_type, dense, tp, dp, placement.stage_spans_nodes[i],
                                    cp, dist)
                + once(expert_allreduce_s, stage.node_type, experts, tp, dp, plan.ep, placement.stage_spans_nodes[i],
                       dist),
                optimizer_s=once(optimizer_s, stage.node_type, dense, tp, dp, cp, dist)
                + once(expert_optimizer_step_s, stage.node_type, experts, tp, dp, plan.ep, dist),
                parameters=params,
                memory_bytes=memory,
                memory_capacity_bytes=once(memory_capacity_bytes, node.gpu),
                recomputed_layers=None if plan.recompute_num_layers is None else sum(recomputed.values()),
            )
        )
    if pipe_engine_of(problem) is not None:  # an engine's own schedule (section 6c): validate's eager_engine only
        stages, pipeline = deepspeed_pipeline(problem, plan, placement, stages, stage_kinds, m)
    else:
        pipeline = interleaved_pipeline_time_s([s.time_s for s in stages], m, v)
    if plan.overlap_grad_reduce and v == 1 and pipe_engine_of(problem) is None:
        stages = _overlap_grad_reduce(problem, plan, placement, stages, stage_kinds, once)
    gather_delay = 0.0
    if plan.overlap_param_gather and dist and v == 1 and pipe_engine_of(problem) is None:
        stages, gather_delay = _overlap_param_gather(problem, plan, placement, stages, stage_kinds)
    allreduce = max(s.dp_allreduce_s for s in stages) + gather_delay
    embedding = 0.0
    if pp > 1 and pipe_engine_of(problem) is not None:  # the engine's tied all-reduce in the module's fp16 (6c)
        embedding = deepspeed_tied_allreduce_s(problem, plan.stages[0].node_type, plan.stages[-1].node_type,
                                               placement.ends_same_node, plan.gpus_per_stage, tp)
    elif pp > 1:
        embedding = embedding_allreduce_s(problem, plan.stages[0].node_type, plan.stages[-1].node_type,
                                          placement.ends_same_node, plan.gpus_per_stage, tp)
    optimizer = max(s.optimizer_s for s in stages)
    iteration = pipeline + allreduce + embedding + optimizer
    training = problem.iterations * iteration
    usd_per_hour = sum(count * problem.node(name).price_usd_per_node_hour for name, count in placement.nodes.items())
    return Estimate(
        num_micro_batches=m,
        stages=tuple(stages),
        pipeline_time_s=pipeline,
        dp_allreduce_s=allreduce,
        embedding_allreduce_s=embedding,
        optimizer_s=optimizer,
        iteration_time_s=iteration,
        iterations=problem.iterations,
        training_time_s=training,
        nodes=placement.nodes,
        usd_per_hour=usd_per_hour,
        cost_usd=usd_per_hour * hours(training),
    )


def _overlap_grad_reduce(problem: Problem, plan: Plan, placement: Placement, stages: list[StageEstimate],
                         stage_kinds: list[dict[str, int]], once: _Once | None = None) -> list[StageEstimate]:
    """The stages with dp_allreduce_s = the exposed part of the gradient reduce (section 7c). With the distributed
    optimizer only the reduce-scatter (g of the g + 2 bytes per element of gradient_sync_s) is overlapped; the
    parameter all-gather and the experts' exchange stay exposed."""
    from dataclasses import replace as _replace
    once = _Direct(problem) if once is None else once  # estimate's memo (ESTIMATE_MEMO): the same values
    tp, dp, cp = plan.tp, plan.dp, plan.cp
    g = gradient_bytes(problem.job)
    share = g / (g + WEIGHT_BYTES_PER_PARAM) if plan.distributed_optimizer else 1.0
    syncs, rest, backward = [], [], []
    for i, stage in enumerate(plan.stages):
        kinds_key = tuple(stage_kinds[i].items())
        experts = once.keyed((stage_expert_parameters, kinds_key), stage_expert_parameters, problem.model,
                             stage_kinds[i])
        dense = stages[i].parameters - experts
        sync = once(gradient_sync_s, stage.node_type, dense, tp, dp, placement.stage_spans_nodes[i], cp,
                    plan.distributed_optimizer)
        syncs.append(sync * share)
        rest.append(stages[i].dp_allreduce_s - sync * share)
        forward = once.keyed((_stage_forward_of_plan, stage.node_type, kinds_key, i == 0, i == plan.pp - 1),
                             _stage_forward_of_plan, problem, plan, stage_kinds, i)  # by its type, kinds and ends
        backward.append(max(0.0, stages[i].compute_s - forward))
    dense0 = stages[0].parameters - stage_expert_parameters(problem.model, stage_kinds[0])
    buckets0 = overlap_bucket_count(dense0 / tp, dp * cp, True)
    exposed = exposed_grad_reduce_s(syncs, backward, buckets0)
    return [_replace(s, dp_allreduce_s=e + r) for s, e, r in zip(stages, exposed, rest)]


def _stage_forward_of_plan(problem: Problem, plan: Plan, stage_kinds: list[dict[str, int]], i: int) -> float:
    """Stage i's forward of one micro-batch as the plan runs it (stage_forward_s; with tp_comm_overlap its layers'
    forward collectives priced as overlapped, section 3c)."""
    stage = plan.stages[i]
    forward = stage_forward_s(problem, stage.node_type, stage_kinds[i], plan.tp, plan.micro_batch_size, i == 0,
                              i == plan.pp - 1, plan.cp)
    if plan.tp_comm_overlap and plan.tp > 1:
        by_name = {k.name: k for k in problem.model.kinds}
        forward += sum(count * tp_overlap_forward_change_s(problem, stage.node_type, by_name[name], plan.tp,
                                                           plan.micro_batch_size)
                       for name, count in stage_kinds[i].items())
    return forward


# ---- Megatron's --tp-comm-overlap: Transformer Engine's userbuffers (issue 15; docs/cost-model.md section 3c) -----
# Megatron-Core r0.8.0 (megatron/training/initialize.py _initialize_tp_communicators) calls TE's initialize_ub with
# ub_cfgs = {} unless --tp-comm-overlap-cfg is given, i.e. TE's defaults (transformer_engine/pytorch/module/base.py
# initialize_ub at TE v1.7, the last release before r0.8.0 whose signature takes its tp_size= keyword; v1.6-1.9 have
# the same defaults):
#   ring_exchange: qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad (all-gathers; UbufP2PCommOverlap, copy engine:
#                  comm_gemm_overlap.h use_ce = 1, sms = 1)
#   pipeline:      proj_fprop, fc2_fprop (reduce-scatters in num_splits = 4 chunks, num_sm = 16 SMs; the last chunk
#                  with UB_MAX_SM = 32 after the GEMM: split_overlap_rs)
#   bulk:          qkv_dgrad, fc1_dgrad (all-gather of the layer-norm output for the weight gradient, during the
#                  dgrad GEMM), qkv_wgrad, fc1_wgrad (reduce-scatter of the input gradient, during the wgrad GEMM);
#                  num_sm = 16 (bulk_overlap)
# set_sm_margin = 0: the GEMMs keep every SM (_math_sms = multiProcessorCount) and share them with the comm kernels.
TP_OVERLAP_COMM_SMS = 16
TP_OVERLAP_PIPELINE_SPLITS = 4
# Streaming multiprocessors per GPU (cudaDeviceProp.multiProcessorCount): NVIDIA H100 Tensor Core GPU Architecture
# whitepaper (H100 SXM5: 132 SMs; H200 is the same GH100 configuration), NVIDIA A100 Tensor Core GPU Architecture
# whitepaper (A100: 108 SMs).
GPU_SM_COUNT = {"H100-SXM-80GB": 132, "H200": 132, "A100-SXM-80GB": 108, "A100-SXM-40GB": 108}


def ring_exchange_exposed_s(comm_s: float, gemm_s: float, tp: int) -> float:
    """An all-gather by ring exchange overlapped with its GEMM (TE split_overlap_ag, UbufP2PCommOverlap): the GEMM
    runs in tp chunks, chunk 0 on the local shard at once, chunk i + 1 once step i's send/receive (comm / (tp - 1))
    is in; the copy engine moves the data, so the GEMM keeps its SMs. Ends at max(G, comm + G / tp):
    exposed = max(0, comm - G (tp - 1) / tp)."""
    return max(0.0, comm_s - gemm_s * (tp - 1) / tp)


def pipelined_reduce_scatter_exposed_s(comm_s: float, gemm_s: float, splits: int, sm_share: float) -> float:
    """A reduce-scatter pipelined with its GEMM (TE split_overlap_rs): the GEMM in `splits` chunks, chunk k's
    reduce-scatter launched when the chunk ends, one after another on the comm stream, the last after the GEMM:
    max(comm / n, comm - G (n - 1) / n) exposed (overlapped_grad_reduce_s's recursion), plus the GEMM's slow-down
    while the first n - 1 chunks' kernels hold sm_share of the SMs: sm_share x min(comm, G) (n - 1) / n."""
    if comm_s <= 0:
        return 0.0
    n = max(1, splits)
    return overlapped_grad_reduce_s(comm_s, gemm_s, n) + sm_share * min(comm_s, gemm_s) * (n - 1) / n


def bulk_exposed_s(comm_s: float, gemm_s: float, sm_share: float) -> float:
    """A collective launched with a whole GEMM it does not feed (TE bulk_overlap): max(0, comm - G) exposed plus the
    GEMM's slow-down while the comm kernel holds sm_share of the SMs: sm_share x min(comm, G)."""
    if comm_s <= 0:
        return 0.0
    return max(0.0, comm_s - gemm_s) + sm_share * min(comm_s, gemm_s)


def tp_overlap_gemm_s(problem: Problem, node_type: str, micro_batch_size: int, tp: int) -> dict[str, float]:
    """One GPU's forward GEMM times of a dense layer at the GPU's sustained rate (profile/analytic.py
    sustained_flop_per_s): qkv 2 b s h (q + 2 kv) / t, proj 2 b s q h / t, fc1 2 b s h f (2 if gated) / t,
    fc2 2 b s f h / t FLOPs. A dgrad or wgrad GEMM has its forward GEMM's FLOPs."""
    from optsearch.profile.analytic import sustained_flop_per_s

    model = problem.model
    rate = sustained_flop_per_s(problem.gpu_of(node_type))
    bs, h, f = micro_batch_size * model.seq_length, model.hidden_size, model.ffn_hidden_size
    q, kv = model.query_width, model.kv_width
    flops = {"qkv": 2.0 * bs * h * (q + 2 * kv), "proj": 2.0 * bs * q * h,
             "fc1": 2.0 * bs * h * f * (2 if model.gated_mlp else 1), "fc2": 2.0 * bs * f * h}
    return {name: value / tp / rate for name, value in flops.items()}


def tp_overlap_sm_share(problem: Problem, node_type: str) -> float:
    """TP_OVERLAP_COMM_SMS / the GPU's SMs; SpecError for a GPU whose SM count is not in GPU_SM_COUNT."""
    gpu = problem.gpu_of(node_type)
    if gpu.name not in GPU_SM_COUNT:
        raise SpecError(f"plan: tp_comm_overlap: no SM count for GPU {gpu.name!r} (known: "
                        f"{', '.join(sorted(GPU_SM_COUNT))}); price the run without tp_comm_overlap")
    return TP_OVERLAP_COMM_SMS / GPU_SM_COUNT[gpu.name]


def tp_overlap_pass_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> tuple[float, float]:
    """(forward, backward) time the TP collectives add to one dense layer under --tp-comm-overlap. Each all-gather
    or reduce-scatter moves half of what section 3's all-reduce does: comm = tp_allreduce_s / 2.

        forward  = ring(qkv) + pipelined(proj) + ring(fc1) + pipelined(fc2)
        backward = ring(fc2 dgrad) + bulk(fc1 dgrad: the LN output's all-gather) + bulk(fc1 wgrad: the input
                   gradient's reduce-scatter) + ring(proj dgrad) + bulk(qkv dgrad) + bulk(qkv wgrad)"""
    comm = tp_allreduce_s(problem, node_type, tp, micro_batch_size) / 2
    gemm = tp_overlap_gemm_s(problem, node_type, micro_batch_size, tp)
    share = tp_overlap_sm_share(problem, node_type)
    n = TP_OVERLAP_PIPELINE_SPLITS
    forward = (ring_exchange_exposed_s(comm, gemm["qkv"], tp)
               + pipelined_reduce_scatter_exposed_s(comm, gemm["proj"], n, share)
               + ring_exchange_exposed_s(comm, gemm["fc1"], tp)
               + pipelined_reduce_scatter_exposed_s(comm, gemm["fc2"], n, share))
    backward = (ring_exchange_exposed_s(comm, gemm["fc2"], tp) + 2 * bulk_exposed_s(comm, gemm["fc1"], share)
                + ring_exchange_exposed_s(comm, gemm["proj"], tp) + 2 * bulk_exposed_s(comm, gemm["qkv"], share))
    return forward, backward


def tp_overlap_forward_change_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int,
                                micro_batch_size: int) -> float:
    """Change of one layer's forward (layer_forward_s) under --tp-comm-overlap: the overlapped forward less the
    2 exposed all-reduces section 3 prices."""
    forward, _ = tp_overlap_pass_s(problem, node_type, tp, micro_batch_size)
    return forward - 2 * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * tp_allreduce_s(problem, node_type, tp, micro_batch_size)


def tp_overlap_layer_change_s(problem: Problem, node_type: str, kind: LayerKindSpec, tp: int, micro_batch_size: int,
                              recompute: Recompute) -> float:
    """Change of one layer's step (layer_step_s) under --tp-comm-overlap: the overlapped forward (twice under full
    recomputation) and backward, less the 2 x passes exposed all-reduces of section 3."""
    forward, backward = tp_overlap_pass_s(problem, node_type, tp, micro_batch_size)
    passes = 3 if recompute == "full" else 2
    priced = 2 * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * passes * tp_allreduce_s(problem, node_type, tp, micro_batch_size)
    return forward * (passes - 1) + backward - priced


# Transformer Engine v1.7's userbuffers (transformer_engine/pytorch/module/base.py initialize_ub): ten buffers, one
# per name of its default methods (ring_exchange 4, pipeline 2, bulk 4), each `shape` = (s b / cp, h) in the 16-bit
# dtype (sample_buffer = torch.empty(shape, dtype=dtype)); the C++ side registers the same bytes again
# (csrc/comm_gemm_overlap.h: UbufCommOverlap ubuf_bytes = sample.numel() x element_size, l. 94-95; the ring exchange
# UbufP2PCommOverlap the same unless is_reduce_scatter, l. 570-580, not set for its default names), and
# the cuBLAS workspace is repeated _NUM_MAX_UB_STREAMS = 3 times (get_workspace().repeat, 32 MiB per copy on compute
# capability >= 9, else 4 MiB: get_cublas_workspace_size_bytes).
TP_OVERLAP_BUFFERS = 10
TP_OVERLAP_UB_STREAMS = 3


def tp_overlap_buffer_bytes(problem: Problem, node_type: str, micro_batch_size: int, cp: int = 1) -> float:
    """Per-GPU memory --tp-comm-overlap adds (docs/cost-model.md section 9g): the userbuffers, 10 x (s b / cp) x h
    x 2 bytes, and three more cuBLAS workspaces (32 MiB each on compute capability >= 9.0, else 4 MiB). The Python
    sample buffers are freed after registration and not counted."""
    model = problem.model
    buffers = TP_OVERLAP_BUFFERS * (model.seq_length * micro_batch_size / cp) * model.hidden_size * 2
    capability = problem.gpu_of(node_type).compute_capability
    workspace = 33_554_432 if capability is not None and capability >= 9.0 else 4_194_304
    return buffers + TP_OVERLAP_UB_STREAMS * workspace


def tp_comm_overlap_error(problem: Problem, plan: Plan) -> str | None:
    """Why --tp-comm-overlap cannot be priced for the plan, or None (it changes nothing at tp = 1)."""
    if plan.tp <= 1:
        return None
    if not sequence_parallel_on(problem.job, plan.tp):
        return "needs sequence parallelism (Megatron-LM's arguments.py asserts it)"
    if plan.cp > 1 or plan.recompute_num_layers is not None or plan.virtual_stages > 1:
        return "priced only without context parallelism, block recomputation and interleaving"
    gpu_names = {problem.gpu_of(s.node_type).name for s in plan.stages}
    for kind in problem.model.kinds:
        if kind.is_moe or kind.cross_attention:
            return f"priced only for dense self-attention layers (kind {kind.name!r} is not)"
        for gpu in gpu_names:
            entry = problem.profile.get(gpu, kind.name, plan.tp, plan.micro_batch_size)
            if entry.tp_comm_included or entry.forward_repeats != 1:
                return "priced only on a profile without the TP collectives and with one forward per pass"
    return None


# ---- Megatron's --overlap-param-gather at core_r0.8.0 (issue 15; docs/cost-model.md section 7d) ----------------
# megatron/core/optimizer/distrib_optimizer.py at core_r0.8.0 (baf94af3): step_with_ready_grads gathers nothing when
# overlap_param_gather ("the first all-gather is launched asynchronously in the next optimizer.zero_grad() call and
# subsequent all-gathers are launched in the forward pre-hook"); zero_grad dispatches the all-gather of handle 0 (the
# bucket the forward needs first: _get_model_param_buffer_dp_views lists buckets in reverse, forward order); the
# forward pre-hook waits on a bucket's handle the first time a module uses one of its parameters and only then
# dispatches the next (_finish_param_sync_helper). training.py train_step calls optimizer.zero_grad() on every rank
# before forward_backward_func. Buckets: the gradient buffer's (section 7c): ceil(P / t / bucket) on pipeline rank 0,
# one on ranks > 0 (distributed_data_parallel.py: bucket_size None when the pipeline rank is > 0).


def param_gather_delay_s(gather_s: list[float], forward_s: list[float], buckets0: int) -> float:
    """How much later the pipeline's first forward reaches the last stage because of the parameter all-gathers, all
    dispatched at the step's start (zero_grad) and waited for by the first forward's pre-hooks.

    Stage 0, buckets0 buckets: the wait-then-dispatch chain over its first forward F_0 ends at
    F_0 + max(G_0 / n, G_0 - F_0 (n - 1) / n) (the closed form of overlapped_grad_reduce_s, the same recursion with
    the forward in place of the backward). Stage i > 0: one bucket, dispatched at 0, so its first forward starts at
    max(E_{i-1}, G_i) and ends F_i later. The delay is E_{pp-1} - sum_i F_i (pipeline sends left out)."""
    if not gather_s:
        return 0.0
    end = forward_s[0] + overlapped_grad_reduce_s(gather_s[0], forward_s[0], buckets0)
    for gather, forward in zip(gather_s[1:], forward_s[1:]):
        end = max(end, gather) + forward
    return max(0.0, end - sum(forward_s))


def param_gather_delay_main_s(gather_s: list[float], forward_s: list[float], buckets0: int) -> float:
    """param_gather_delay_s as upstream main (d98e8a64) dispatches the gathers (docs/cost-model.md section 7f): no
    dispatch at zero_grad, a bucket group's gather is dispatched by the forward pre-hook the first time the forward
    reaches it (param_and_grad_buffer.py finish_param_sync: 'If current bucket's param AG has not been dispatched,
    dispatch it now'), waited on, and only then the next group's dispatched. Stage 0: the same chain as r0.8.0's.
    Stage i > 0 (one bucket): its gather starts when its first micro-batch arrives, E_i = E_{i-1} + G_i + F_i. So
    delay = E_0 - F_0 + sum_{i>0} G_i."""
    if not gather_s:
        return 0.0
    return overlapped_grad_reduce_s(gather_s[0], forward_s[0], buckets0) + sum(gather_s[1:])


def _overlap_param_gather(problem: Problem, plan: Plan, placement: Placement, stages: list[StageEstimate],
                          stage_kinds: list[dict[str, int]]) -> tuple[list[StageEstimate], float]:
    """The stages without their parameter all-gather (2 of the g + 2 bytes per element of gradient_sync_s, the
    16-bit parameters) and the delay it causes at the start of the iteration instead (param_gather_delay_s)."""
    from dataclasses import replace as _replace
    tp, dp, cp = plan.tp, plan.dp, plan.cp
    g = gradient_bytes(problem.job)
    share = WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM)
    gathers, forwards, out = [], [], []
    for i, stage in enumerate(plan.stages):
        dense = stages[i].parameters - stage_expert_parameters(problem.model, stage_kinds[i])
        gather = share * gradient_sync_s(problem, stage.node_type, dense, tp, dp, placement.stage_spans_nodes[i], cp,
                                         True)
        gathers.append(gather)
        forwards.append(_stage_forward_of_plan(problem, plan, stage_kinds, i))
        out.append(_replace(stages[i], dp_allreduce_s=max(0.0, stages[i].dp_allreduce_s - gather)))
    dense0 = stages[0].parameters - stage_expert_parameters(problem.model, stage_kinds[0])
    buckets0 = overlap_bucket_count(dense0 / tp, dp * cp, True)
    return out, param_gather_delay_of(plan)(gathers, forwards, buckets0)


def param_gather_delay_of(plan: Plan):
    """The delay function of the plan's Megatron-Core (Plan.param_gather_dispatch, issue 15 ppgather): upstream
    main's (param_gather_delay_main_s, section 7f; the default, what launch emits for and the search prices) or
    core_r0.8.0's (param_gather_delay_s, section 7d; the H100 validation rows). They agree on one stage."""
    return param_gather_delay_s if plan.param_gather_dispatch == "core_r0.8.0" else param_gather_delay_main_s


# ---- DeepSpeed 0.3.13's pipeline engine (AMP's fork; docs/cost-model.md section 6c) ---------------------------
# Used only when the profile's eager engine names it (validate's `eager_engine` column): Megatron-LM's own
# schedule (sections 5 and 6) is the default and what `solve` prices.

PIPE_ENGINES = ("deepspeed-0.3.13",)
# deepspeed/runtime/pipe/engine.py (DachengLi1/AMP@72eeea4, DeepSpeed 0.3.13): GPT2ModelPipe's stage output is the
# tuple (hidden, attention mask); the boolean mask is cast to half() before the send; with tensor parallelism the
# hidden state is sent as a PartitionedTensor (a meta tensor + 1/t of the data, is_pipe_partitioned = model
# parallel) and all-gathered over the tp group by the receiver; gradients are sent whole (is_grad_partitioned False).
DEEPSPEED_MASK_BYTES_PER_ELEMENT = 2  # the (1, 1, s, s) mask as half


def pipe_engine_of(problem: Problem) -> str | None:
    """The pipeline engine the profile's eager engine names (EagerEngine.pipe_engine), or None (Megatron-LM's)."""
    from optsearch.profile.analytic import EAGER_ENGINES  # the profile module owns the engine table

    profile = problem.profile
    while hasattr(profile, "base"):  # calibrate's ScaledProfile wraps the profile whose engine it scales
        profile = profile.base
    name = getattr(profile, "eager_engine", None)
    return None if name is None else EAGER_ENGINES[name].pipe_engine


def deepspeed_activation_message(model: ModelSpec, micro_batch_size: int, tp: int) -> tuple[float, int]:
    """(bytes, NCCL calls) one rank sends per forward p2p: the hidden state b s h x 2 (1/t of it plus a meta tensor
    when t > 1) and the half attention mask s x s x 2, one broadcast per tensor."""
    s = model.seq_length
    hidden = p2p_message_bytes(model, micro_batch_size)
    mask = DEEPSPEED_MASK_BYTES_PER_ELEMENT * s * s
    if tp > 1:
        return hidden / tp + mask, 3
    return hidden + mask, 2


def deepspeed_gradient_message(model: ModelSpec, micro_batch_size: int) -> tuple[float, int]:
    """(bytes, NCCL calls) one rank sends per backward p2p: the input gradient b s h x 2, whole, one broadcast."""
    return p2p_message_bytes(model, micro_batch_size), 1


def deepspeed_send_s(problem: Problem, sender: str, receiver: str, same_node: bool, gpus_per_stage: int,
                     message: tuple[float, int]) -> float:
    """One blocking p2p of the engine (dist.broadcast in a 2-rank group per call): bytes over the intra-node link or
    the slower of the two NICs shared by the stage's t x d sending GPUs, plus NCCL's send latency per call."""
    nbytes, calls = message
    latency = calls * nccl_p2p_latency_s(problem.node(sender), same_node)
    if same_node:
        return nbytes / intra_node_bytes_per_s(problem.node(sender)) + latency
    bandwidth = min(inter_node_bytes_per_s_per_gpu(problem.node(sender), gpus_per_stage),
                    inter_node_bytes_per_s_per_gpu(problem.node(receiver), gpus_per_stage))
    return nbytes / bandwidth + latency


def deepspeed_allgather_s(problem: Problem, node_type: str, tp: int, micro_batch_size: int) -> float:
    """The receiver's all-gather of the partitioned hidden state over its tp group (PartitionedTensor.full):
    ring all-gather (t - 1) / t x b s h 2 over the all-reduce bus bandwidth, + NCCL base + (t - 1) hops."""
    if tp <= 1:
        return 0.0
    node = problem.node(node_type)
    message = p2p_message_bytes(problem.model, micro_batch_size)
    latency = 0.0 if node.collective_latency == "none" else (
        NCCL_BASE_LATENCY_S + (tp - 1) * NCCL_HOP_LATENCY_S[node.intra_node_link])
    return (tp - 1) / tp * message / intra_node_allreduce_bytes_per_s(node) + latency


def deepspeed_step(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """TrainSchedule._step_to_micro_batch (deepspeed/runtime/pipe/schedule.py, 0.3.13): (micro-batch, is_forward)
    of a stage at a step; even stages run forwards on even steps, odd stages on odd steps."""
    if step % 2 == stage % 2:  # a forward step
        return (step if step % 2 == 0 else step - 1) // 2 - stage // 2, True
    if step % 2 == 0:  # an odd stage's backward on an even step
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False  # an even stage's backward on an odd step


def deepspeed_train_schedule_s(forward_s: list[float], backward_s: list[float], activation_send_s: list[float],
                               gradient_send_s: list[float], num_micro_batches: int) -> float:
    """Time of DeepSpeed 0.3.13's TrainSchedule: 2 (m + pp - 1) steps; at each step a stage first exchanges with
    one neighbour (forward step: receive the activation from i - 1, send the previous gradient to i - 1; backward
    step: send the previous activation to i + 1, receive the gradient from i + 1), then runs its forward or backward.
    Every exchange is blocking on both sides (p2p.send/recv force async_op = False; the wall_clock_breakdown timers
    around them call torch.cuda.synchronize()), so it starts when both stages reach it and takes the send's time.
    activation_send_s[i] / gradient_send_s[i]: the exchange between stage i and i + 1. Returns the latest clock."""
    pp, m = len(forward_s), num_micro_batches
    ops: list[list[tuple[int | None, float]]] = [[] for _ in range(pp)]  # (partner or None for compute, seconds)
    for s in range(pp):
        previous = -1
        for step in range(2 * (m + pp - 1)):
            mb, forward = deepspeed_step(step, s, pp)
            valid, previous_valid = 0 <= mb < m, 0 <= previous < m
            if forward and s > 0:
                if valid:
                    ops[s].append((s - 1, activation_send_s[s - 1]))
                if previous_valid:
                    ops[s].append((s - 1, gradient_send_s[s - 1]))
            elif not forward and s < pp - 1:
                if previous_valid:
                    ops[s].append((s + 1, activation_send_s[s]))
                if valid:
                    ops[s].append((s + 1, gradient_send_s[s]))
            if valid:
                ops[s].append((None, forward_s[s] if forward else backward_s[s]))
            previous = mb
    at, clock = [0] * pp, [0.0] * pp
    while True:
        progressed = False
        for s in range(pp):
            while at[s] < len(ops[s]):
                partner, seconds = ops[s][at[s]]
                if partner is None:
                    clock[s] += seconds
                    at[s] += 1
                    progressed = True
                    continue
                if at[partner] < len(ops[partner]) and ops[partner][at[partner]][0] == s:
                    clock[s] = clock[partner] = max(clock[s], clock[partner]) + seconds
                    at[s] += 1
                    at[partner] += 1
                    progressed = True
                    continue
                break
        if all(at[s] == len(ops[s]) for s in range(pp)):
            return max(clock)
        if not progressed:
            raise AssertionError("deepspeed_train_schedule_s: the schedule's exchanges do not pair up")


def deepspeed_stage_forward_s(problem: Problem, plan: Plan, stage: int, kinds: dict[str, int]) -> float:
    """The forward part of a stage's per-micro-batch compute: its layers' forward passes (forward_repeats of them)
    with their forward tp all-reduces, the embedding (+ its all-reduce) on the first stage, the head's forward on the
    last. The backward step runs the rest of compute_s (backward, recomputation, backward all-reduces)."""
    tp, mbs, node_type = plan.tp, plan.micro_batch_size, plan.stages[stage].node_type
    gpu = problem.node(node_type).gpu
    kinds_by_name = {k.name: k for k in problem.model.kinds}
    forward = 0.0
    for name, count in kinds.items():
        entry = problem.profile.get(gpu, name, tp, mbs)
        forward += count * entry.forward_s
        if not entry.tp_comm_included and tp > 1:
            blocks = 3 if kinds_by_name[name].cross_attention else 2
            forward += (count * blocks * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * entry.forward_repeats
                        * tp_allreduce_s(problem, node_type, tp, mbs))
    if stage == 0:
        entry = problem.profile.get(gpu, EMBEDDING_KIND, tp, mbs)
        forward += entry.forward_s + (tp_allreduce_s(problem, node_type, tp, mbs)
                                      if not entry.tp_comm_included and tp > 1 else 0.0)
    if stage == plan.pp - 1:
        forward += problem.profile.get(gpu, HEAD_KIND, tp, mbs).forward_s
    return forward


def deepspeed_pipeline(problem: Problem, plan: Plan, placement: Placement, stages: list[StageEstimate],
                       stage_kinds: list[dict[str, int]], num_micro_batches: int
                       ) -> tuple[list[StageEstimate], float]:
    """(stages with the engine's sends as p2p_s, the TrainSchedule's time) for a plan run by DeepSpeed 0.3.13."""
    from dataclasses import replace

    if plan.cp > 1 or plan.virtual_stages > 1:
        raise SpecError("plan: DeepSpeed 0.3.13's pipeline engine has no context parallelism or interleaved stages")
    pp, tp, mbs, w = plan.pp, plan.tp, plan.micro_batch_size, plan.gpus_per_stage
    activation = deepspeed_activation_message(problem.model, mbs, tp)
    gradient = deepspeed_gradient_message(problem.model, mbs)
    act_s, grad_s = [], []
    for i in range(pp - 1):
        sender, receiver = plan.stages[i].node_type, plan.stages[i + 1].node_type
        act_s.append(deepspeed_send_s(problem, sender, receiver, placement.send_same_node[i], w, activation))
        grad_s.append(deepspeed_send_s(problem, receiver, sender, placement.send_same_node[i], w, gradient))
    forward, backward = [], []
    for i, stage in enumerate(stages):
        fwd = deepspeed_stage_forward_s(problem, plan, i, stage_kinds[i])
        gather = deepspeed_allgather_s(problem, stage.node_type, tp, mbs) if i > 0 else 0.0
        forward.append(fwd + gather)
        # _exec_recv_grads rebuilds the stage's partitioned output (PartitionedTensor.full) before the gradient
        # arrives: a second all-gather per micro-batch on every stage that sends activations (t > 1)
        regather = deepspeed_allgather_s(problem, stage.node_type, tp, mbs) if i < pp - 1 else 0.0
        backward.append(stage.compute_s - fwd + regather)
    pipeline = deepspeed_train_schedule_s(forward, backward, act_s, grad_s, num_micro_batches)
    priced = [replace(stage, compute_s=stage.compute_s + (forward[i] - (stage.compute_s - backward[i])),
                      p2p_s=(act_s[i] if i < pp - 1 else 0.0) + (grad_s[i - 1] if i > 0 else 0.0),
                      dp_allreduce_s=stage.dp_allreduce_s + deepspeed_bucket_s(problem, stage.node_type,
                                                                               stage.parameters, tp, plan.dp),
                      optimizer_s=deepspeed_optimizer_step_s(
                          problem, stage.node_type, stage.parameters,
                          deepspeed_param_tensors(stage.num_layers, i == 0, i == pp - 1, pp), tp))
              for i, stage in enumerate(stages)]
    return priced, pipeline


# DeepSpeed 0.3.13's tied-weight reduce (ReduceTiedGrads -> PipelineModule.allreduce_tied_weight_gradients,
# deepspeed/runtime/pipe/module.py): dist.all_reduce(weight.grad, group) on the tied word embedding of the first and
# the last stage, one 2-rank group per (dp, tp) index (_index_tied_modules). The engine halves the module for fp16
# (engine.py, _configure_distributed_model: self.module.half()), so weight.grad is fp16; the config's fp32_allreduce
# applies to the data-parallel bucket only (allreduce_bucket), not to this call.
DEEPSPEED_TIED_GRAD_BYTES = 2


def deepspeed_tied_allreduce_s(problem: Problem, first: str, last: str, same_node: bool, gpus_per_stage: int,
                               tp: int) -> float:
    """The engine's tied-embedding all-reduce: section 7b's embedding_allreduce_s with V h / t fp16 elements (the
    module's own gradient), whatever the job's gradient dtype. 0 for untied embeddings."""
    return embedding_allreduce_s(problem, first, last, same_node, gpus_per_stage, tp, DEEPSPEED_TIED_GRAD_BYTES)


# DeepSpeed 0.3.13's fp16 step as AMP's fork runs it. Megatron v1.1.5 hands DeepSpeed apex's FusedAdam
# (megatron/training.py, get_optimizer), which is not deepspeed.ops.adam.FusedAdam, so _configure_fp16_optimizer
# (deepspeed/runtime/engine.py) wraps it in FP16_UnfusedOptimizer (deepspeed/runtime/fp16/unfused_optimizer.py):
# per parameter tensor, an overflow check `float(x.float().sum())` (CheckOverflow._has_inf_or_nan) and a norm
# `p.grad.data.float().norm(); .item()` (get_grad_norm), each ending in a device-to-host copy that waits for the
# GPU; then `fp16.grad.to(fp32)`, the unscale `grad.mul_`, apex's Adam over fp32 grads, and `fp16.data.copy_(fp32)`.
DEEPSPEED_SYNCED_OPS_PER_TENSOR = 6  # .float(), .sum(), float() ; .float(), .norm(), .item()
DEEPSPEED_SYNCED_BYTES_PER_PARAM = 20  # overflow: read 2, write 4, read 4; norm: the same
DEEPSPEED_ASYNC_OPS_PER_TENSOR = 3  # .to(fp32), mul_, copy_
DEEPSPEED_ASYNC_BYTES_PER_PARAM = 20  # to fp32: read 2, write 4; mul_: read 4, write 4; copy_: read 4, write 2
DEEPSPEED_ADAM_BYTES_PER_PARAM = 28  # apex Adam over fp32 grads: read param, grad, m, v (16), write param, m, v (12)
# engine.allreduce_bucket (dp > 1, ReduceGrads): flatten (read 2, write 2), .float() (read 2, write 4), the average
# (read 4, write 4), copy back to the fp16 flat (read 4, write 2), unflatten into the grads (read 2, write 2)
DEEPSPEED_BUCKET_BYTES_PER_PARAM = 28
# Parameter tensors of Megatron v1.1.5's ParallelTransformerLayer: input and post-attention layer norms (weight, bias
# each), query_key_value, attention dense, dense_h_to_4h, dense_4h_to_h (weight, bias each)
DEEPSPEED_LAYER_PARAM_TENSORS = 12


def deepspeed_param_tensors(layers: int, first: bool, last: bool, pp: int) -> int:
    """Parameter tensors a stage of GPT2ModelPipe holds: 12 per layer, word and position embeddings on the first
    stage, the final layer norm (2) on the last and, with pp > 1, its own copy of the tied word embedding."""
    return (DEEPSPEED_LAYER_PARAM_TENSORS * layers + (2 if first else 0)
            + ((2 + (1 if pp > 1 else 0)) if last else 0))


def deepspeed_optimizer_step_s(problem: Problem, node_type: str, parameters: float, tensors: int, tp: int) -> float:
    """FP16_UnfusedOptimizer.step on one GPU (P = parameters / t, T tensors):

        T x 6 x HOST_S_PER_TORCH_OP + 20 P / hbm     the two per-tensor loops that wait for the GPU (no overlap)
        + max(T x 3 x HOST_S_PER_TORCH_OP, 20 P / hbm)  the three asynchronous per-tensor loops
        + 28 P / hbm                                   apex Adam"""
    from optsearch.profile.analytic import HOST_S_PER_TORCH_OP

    per_gpu = parameters / tp
    bandwidth = gbyte_per_s_to_bytes_per_s(problem.gpu_of(node_type).hbm_gbyte_per_s)
    synced = tensors * DEEPSPEED_SYNCED_OPS_PER_TENSOR * HOST_S_PER_TORCH_OP + (
        per_gpu * DEEPSPEED_SYNCED_BYTES_PER_PARAM / bandwidth)
    asynchronous = max(tensors * DEEPSPEED_ASYNC_OPS_PER_TENSOR * HOST_S_PER_TORCH_OP,
                       per_gpu * DEEPSPEED_ASYNC_BYTES_PER_PARAM / bandwidth)
    return synced + asynchronous + per_gpu * DEEPSPEED_ADAM_BYTES_PER_PARAM / bandwidth


def deepspeed_bucket_s(problem: Problem, node_type: str, parameters: float, tp: int, dp: int) -> float:
    """The memory passes of engine.allreduce_bucket around the gradient all-reduce (dp > 1): 28 P / hbm."""
    if dp <= 1:
        return 0.0
    bandwidth = gbyte_per_s_to_bytes_per_s(problem.gpu_of(node_type).hbm_gbyte_per_s)
    return parameters / tp * DEEPSPEED_BUCKET_BYTES_PER_PARAM / bandwidth
