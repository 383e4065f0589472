"""Measure a profile table on the local accelerator with PyTorch: `optsearch profile`.

PyTorch is an optional extra (`pip install -e '.[profile]'`): it is imported inside the functions that need it,
never when this module is imported, so the rest of optsearch runs without it.

For every cell (layer kind, tp, micro-batch size) one rank's shard is built exactly as Megatron-LM shards it at
that tp degree and timed, forward and backward separately, after warm-up; the table keeps the median of the
repeats:

    transformer layer   norm -> column-parallel QKV (heads/tp query heads, kv_heads/tp key/value heads)
                        -> attention core -> row-parallel output projection -> residual
                        [-> norm -> cross-attention over the encoder output (T5 decoder kinds) -> residual]
                        -> norm -> column-parallel MLP in (ffn/tp wide; gated: 2 x ffn/tp) -> GeLU / SiLU-gate
                        -> row-parallel MLP out -> residual
    embedding           vocab-parallel lookup (padded vocab / tp rows, out-of-shard ids masked) [+ positions]
    head                final norm -> vocab-parallel output projection -> fp32 cross-entropy on the shard

Not modelled: dropout, T5's relative position bias, the small all-reduces of vocab-parallel cross-entropy.
Tensor-parallel all-reduces are timed with NCCL only when the machine has at least max(tp) GPUs; otherwise the
table says tp_comm_included = false and the cost model adds them from the node's link (see docs/profiling.md).
"""

from __future__ import annotations

import gc
import math
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Literal

from optsearch.costmodel import TP_ALLREDUCES_PER_BLOCK_EACH_WAY
from optsearch.errors import ProfileError, SpecError
from optsearch.profile.analytic import layer_forward_flops
from optsearch.profile.table import ProfileEntry, ProfileTable
from optsearch.spec import GpuSpec, ModelSpec
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND

INSTALL_HINT = "pip install -e '.[profile]' (pins torch==2.13.0)"
Dtype = Literal["bf16", "fp16", "fp32"]
DTYPES: tuple[Dtype, ...] = ("bf16", "fp16", "fp32")
CPU_GPU_NAME = "cpu"
MEGATRON_VOCAB_DIVISIBLE_BY = 128  # Megatron's --make-vocab-size-divisible-by default; padded to a multiple x tp
MEMORY_MATCH_TOLERANCE = 0.15  # device memory may read up to 15% below the vendor's "80GB" (ECC, reserved)
BACKWARD_FLOPS_OVER_FORWARD = 2.0  # input gradient + weight gradient


def import_torch() -> Any:
    """PyTorch, or a one-line ProfileError (exit 2) that says how to install it."""
    try:
        import torch
    except ImportError:
        raise ProfileError(
            f"optsearch profile needs PyTorch, which is not installed; install it with: {INSTALL_HINT}"
        ) from None
    return torch


# ---- what to measure (no torch needed) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRequest:
    model: ModelSpec
    gpu: str  # the name written in the gpu column
    tps: tuple[int, ...]
    micro_batch_sizes: tuple[int, ...]
    dtype: Dtype = "bf16"
    repeats: int = 20
    warmup: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class CellResult:
    """One measured cell. Times are one rank's, in seconds; status 'oom' leaves them None."""

    layer_kind: str
    tp: int
    micro_batch_size: int
    status: Literal["ok", "oom"]
    forward_s: float | None = None
    backward_s: float | None = None
    activation_bytes: float | None = None
    tp_comm_included: bool = False
    forward_flop_per_rank: float | None = None  # transformer layers only (embedding / head: None)


def check_tp_degrees(model: ModelSpec, tps: tuple[int, ...]) -> None:
    """Megatron-LM splits heads, key/value heads and the MLP width evenly over tp ranks. The measured layer is dense:
    a mixture-of-experts model is refused (its router, token permutation and grouped expert GEMMs are not built)."""
    if model.is_moe:
        raise SpecError(f"profile: model {model.name} has mixture-of-experts layers, which the measured layer does not "
                        "build; use the analytic profile (the default)")
    for tp in tps:
        for what, size in (("num_attention_heads", model.num_attention_heads), ("key/value heads", model.kv_heads),
                           ("ffn_hidden_size", model.ffn_hidden_size)):
            if size % tp:
                raise SpecError(f"--tp = {tp}: does not divide {what} {size} of model {model.name}")


def padded_vocab_size(model: ModelSpec, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128 x tp so every rank holds the same number of rows."""
    multiple = MEGATRON_VOCAB_DIVISIBLE_BY * tp
    return math.ceil(model.vocab_size / multiple) * multiple


def layer_kinds(model: ModelSpec) -> list[str]:
    """The profile keys to measure: embedding, every transformer layer kind, head (ModelSpec.kinds order)."""
    return [EMBEDDING_KIND, *(k.name for k in model.kinds), HEAD_KIND]


def is_causal(model: ModelSpec, kind_name: str) -> bool:
    """Self-attention is causal except in an encoder: an encoder-only model's (BERT) and the encoder of an
    encoder-decoder model (kinds without cross-attention in a model that has a cross-attention kind)."""
    if model.encoder_only:
        return False
    kinds = {k.name: k for k in model.kinds}
    has_decoder = any(k.cross_attention for k in model.kinds)
    return not has_decoder or kinds[kind_name].cross_attention


def cell_flops(model: ModelSpec, kind_name: str, tp: int, b: int) -> float | None:
    """Forward FLOPs of one rank's shard (transformer layers; None for embedding and head)."""
    kinds = {k.name: k for k in model.kinds}
    if kind_name not in kinds:
        return None
    return layer_forward_flops(model, kinds[kind_name], b) / tp


def add_tp_comm(cell: CellResult, model: ModelSpec, allreduce_s: float) -> CellResult:
    """Add the timed NCCL all-reduces a cell's rank makes, the ones the cost model adds when tp_comm_included is
    false: per transformer block (attention, cross-attention, MLP) one in the forward and one in the backward; the
    embedding one in the forward, the head one in the backward."""
    if cell.status != "ok" or cell.forward_s is None or cell.backward_s is None:
        return replace(cell, tp_comm_included=True)
    kinds = {k.name: k for k in model.kinds}
    fwd, bwd = cell.forward_s, cell.backward_s
    if cell.layer_kind == EMBEDDING_KIND:
        fwd += allreduce_s
    elif cell.layer_kind == HEAD_KIND:
        bwd += allreduce_s
    else:
        blocks = 3 if kinds[cell.layer_kind].cross_attention else 2
        fwd += blocks * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * allreduce_s
        bwd += blocks * TP_ALLREDUCES_PER_BLOCK_EACH_WAY * allreduce_s
    return replace(cell, forward_s=fwd, backward_s=bwd, tp_comm_included=True)


_MEMORY_PART = re.compile(r"\d+GB")
_FORM_FACTORS = ("SXM", "PCIE", "NVL")


def _tokens(name: str) -> list[str]:
    cleaned = "".join(c if c.isalnum() else " " for c in name.upper())
    return [t for t in cleaned.split() if t not in ("NVIDIA", "TESLA", "GEFORCE")]


def match_gpu_name(device_name: str, memory_bytes: float | None, catalog: dict[str, GpuSpec]) -> str | None:
    """The catalog name of a CUDA device ('NVIDIA A100-SXM4-80GB' -> 'A100-SXM-80GB'), or None.

    Every part of a catalog name that holds a digit (A100, SXM2, 3090), other than a memory size (80GB), must be a
    word of the device name; a form factor (SXM, PCIe, NVL) must not contradict the device's; candidates whose
    memory is more than 15% off the device's are dropped; among the rest the one sharing the most name parts
    (prefixes count: SXM matches SXM4) wins. No candidate, or a tie, is None: the caller asks for --gpu.
    """
    words = _tokens(device_name)
    scored: list[tuple[int, str]] = []
    for name, spec in catalog.items():
        parts = _tokens(name)
        required = [p for p in parts if any(c.isdigit() for c in p) and not _MEMORY_PART.fullmatch(p)]
        if not parts or parts[0] not in words or any(p not in words for p in required):
            continue
        device_forms = {f for f in _FORM_FACTORS for w in words if w.startswith(f)}
        if device_forms and any(p in _FORM_FACTORS and p not in device_forms for p in parts):
            continue  # an 'H100 PCIe' is not the catalog's H100-SXM
        if memory_bytes is not None:
            memory_gib = memory_bytes / 2**30
            if abs(memory_gib - spec.memory_gib) > MEMORY_MATCH_TOLERANCE * spec.memory_gib:
                continue
        score = sum(any(w.startswith(p) or p.startswith(w) for w in words) for p in parts)
        scored.append((score, name))
    if not scored:
        return None
    best = max(s for s, _ in scored)
    names = [n for s, n in scored if s == best]
    return names[0] if len(names) == 1 else None


# ---- the torch part -------------------------------------------------------------------------------------------


def _torch_dtype(torch: Any, dtype: Dtype) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]


@dataclass(slots=True)
class _Shard:
    """One rank's shard of a layer kind: a forward function of fresh inputs and the tensors that need grads."""

    make_inputs: Callable[[], tuple[Any, ...]]
    forward: Callable[..., Any]  # inputs -> output tensor (or scalar loss for the head)
    make_output_grad: Callable[[], Any] | None  # a random gradient of the output (None: the output is a loss)
    parameters: list[Any]  # this rank's weights (for tests: the shard's shape is Megatron's)


def _build_shard(torch: Any, model: ModelSpec, kind_name: str, tp: int, b: int, device: Any, dtype: Any) -> _Shard:
    F = torch.nn.functional
    h, d, s = model.hidden_size, model.channels_per_head, model.seq_length
    qh, kvh, f = model.num_attention_heads // tp, model.kv_heads // tp, model.ffn_hidden_size // tp

    parameters: list[Any] = []

    def param(*shape: int) -> Any:
        parameters.append((torch.randn(*shape, device=device, dtype=dtype) * 0.02).requires_grad_())
        return parameters[-1]

    def linear(in_f: int, out_f: int) -> tuple[Any, Any]:
        return param(out_f, in_f), (param(out_f) if model.bias else None)

    def norm_params() -> tuple[Any, Any]:
        weight = torch.ones(h, device=device, dtype=dtype).requires_grad_()
        bias = torch.zeros(h, device=device, dtype=dtype).requires_grad_() if model.norm == "layernorm" else None
        parameters.extend(p for p in (weight, bias) if p is not None)
        return weight, bias

    def norm(x: Any, p: tuple[Any, Any]) -> Any:
        if model.norm == "layernorm":
            return F.layer_norm(x, (h,), p[0], p[1])
        return F.rms_norm(x, (h,), p[0])

    def hidden() -> Any:
        return torch.randn(b, s, h, device=device, dtype=dtype).requires_grad_()

    def hidden_grad() -> Any:
        return torch.randn(b, s, h, device=device, dtype=dtype)

    def heads(x: Any, n: int) -> Any:
        return x.view(b, s, n, d).transpose(1, 2)

    def core(q: Any, k: Any, v: Any, causal: bool) -> Any:
        out = F.scaled_dot_product_attention(heads(q, qh), heads(k, kvh), heads(v, kvh), is_causal=causal,
                                             enable_gqa=qh != kvh)
        return out.transpose(1, 2).reshape(b, s, qh * d)

    if kind_name == EMBEDDING_KIND:
        vocab_rows = padded_vocab_size(model, tp) // tp
        word = param(vocab_rows, h)
        positions = param(s, h) if model.position_embedding == "learned" else None
        lo = 0  # rank 0's shard: ids in [0, vocab_rows) are local, the rest are masked

        def embed(ids: Any) -> Any:
            outside = (ids < lo) | (ids >= lo + vocab_rows)
            out = F.embedding((ids - lo).masked_fill(outside, 0), word).masked_fill(outside.unsqueeze(-1), 0.0)
            return out + positions if positions is not None else out

        return _Shard(make_inputs=lambda: (torch.randint(0, model.vocab_size, (b, s), device=device),),
                      forward=embed, make_output_grad=hidden_grad, parameters=parameters)

    if kind_name == HEAD_KIND:
        vocab_rows = padded_vocab_size(model, tp) // tp
        final_norm, out_w = norm_params(), param(vocab_rows, h)
        targets = torch.randint(0, vocab_rows, (b * s,), device=device)

        def head(x: Any) -> Any:
            logits = F.linear(norm(x, final_norm), out_w)
            return F.cross_entropy(logits.float().view(b * s, vocab_rows), targets)

        return _Shard(make_inputs=lambda: (hidden(),), forward=head, make_output_grad=None,
                      parameters=parameters)

    kind = {k.name: k for k in model.kinds}[kind_name]
    causal = is_causal(model, kind_name)
    ln1, ln2 = norm_params(), norm_params()
    qkv, proj = linear(h, (qh + 2 * kvh) * d), linear(qh * d, h)
    fc1, fc2 = linear(h, f * (2 if model.gated_mlp else 1)), linear(f, h)
    if kind.cross_attention:
        ln_x, x_q, x_kv, x_proj = norm_params(), linear(h, qh * d), linear(h, 2 * kvh * d), linear(qh * d, h)

    def layer(x: Any, *memory: Any) -> Any:
        q, k, v = F.linear(norm(x, ln1), *qkv).split([qh * d, kvh * d, kvh * d], dim=-1)
        y = x + F.linear(core(q, k, v, causal), *proj)
        if kind.cross_attention:
            q = F.linear(norm(y, ln_x), *x_q)
            k, v = F.linear(memory[0], *x_kv).split([kvh * d, kvh * d], dim=-1)
            y = y + F.linear(core(q, k, v, False), *x_proj)
        u = F.linear(norm(y, ln2), *fc1)
        if model.gated_mlp:
            gate, up = u.chunk(2, dim=-1)
            u = F.silu(gate) * up
        else:
            u = F.gelu(u)
        return y + F.linear(u, *fc2)

    inputs = (lambda: (hidden(), hidden())) if kind.cross_attention else (lambda: (hidden(),))
    return _Shard(make_inputs=inputs, forward=layer, make_output_grad=hidden_grad, parameters=parameters)


class _Clock:
    """CUDA events on a GPU (after warm-up, synchronized once per repeat); time.perf_counter on the CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.cuda = torch, device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1e3  # ms
        return end - start

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


def _is_oom(torch: Any, err: BaseException) -> bool:
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), MemoryError) if t is not None)
    if isinstance(err, oom_types):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def measure_cell(torch: Any, request: ProfileRequest, kind_name: str, tp: int, b: int, device: Any) -> CellResult:
    """Time one rank's shard: forward and backward, median of `repeats` after `warmup`; activation bytes on CUDA."""
    clock = _Clock(torch, device)
    flops = cell_flops(request.model, kind_name, tp, b)
    shard = None
    try:
        shard = _build_shard(torch, request.model, kind_name, tp, b, device, _torch_dtype(torch, request.dtype))

        def step(record: bool) -> tuple[float, float]:
            inputs = shard.make_inputs()
            grad = shard.make_output_grad() if shard.make_output_grad is not None else None
            clock.sync()
            t0 = clock.mark()
            out = shard.forward(*inputs)
            t1 = clock.mark()
            out.backward(grad)
            t2 = clock.mark()
            clock.sync()
            return (clock.seconds(t0, t1), clock.seconds(t1, t2)) if record else (0.0, 0.0)

        for _ in range(request.warmup):
            step(record=False)
        activation = None
        if device.type == "cuda":
            inputs = shard.make_inputs()
            torch.cuda.synchronize()
            baseline = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            out = shard.forward(*inputs)
            torch.cuda.synchronize()
            activation = float(torch.cuda.max_memory_allocated(device) - baseline)
            del out, inputs
        times = [step(record=True) for _ in range(request.repeats)]
    except Exception as err:  # noqa: BLE001 - only out-of-memory is recorded; anything else is re-raised
        if not _is_oom(torch, err):
            raise
        shard = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return CellResult(layer_kind=kind_name, tp=tp, micro_batch_size=b, status="oom", forward_flop_per_rank=flops)
    finally:
        shard = None  # the shard's tensors go before the next cell's (the step closure holds the name)
    return CellResult(
        layer_kind=kind_name,
        tp=tp,
        micro_batch_size=b,
        status="ok",
        forward_s=statistics.median(t[0] for t in times),
        backward_s=statistics.median(t[1] for t in times),
        activation_bytes=activation,
        forward_flop_per_rank=flops,
    )


def time_allreduce_s(torch: Any, tp: int, num_elements: int, dtype: Dtype, repeats: int, warmup: int) -> float:
    """Median time of one NCCL all-reduce of num_elements over GPUs 0..tp-1 (single process, torch.cuda.nccl)."""
    from torch.cuda import nccl

    tensors = [torch.randn(num_elements, device=f"cuda:{i}", dtype=_torch_dtype(torch, dtype)) for i in range(tp)]
    if not nccl.is_available(tensors):
        raise ProfileError(f"NCCL cannot all-reduce over {tp} GPUs on this machine; profile with --tp up to 1 per run")

    def sync_all() -> None:
        for i in range(tp):
            torch.cuda.synchronize(i)

    samples = []
    for n in range(warmup + repeats):
        sync_all()
        start = time.perf_counter()
        nccl.all_reduce(tensors)
        sync_all()
        if n >= warmup:
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    device: Any  # torch.device
    device_name: str
    torch_version: str
    gpu_count: int


def detect_environment(torch: Any) -> Environment:
    if torch.cuda.is_available():
        return Environment(device=torch.device("cuda", 0), device_name=torch.cuda.get_device_name(0),
                           torch_version=torch.__version__, gpu_count=torch.cuda.device_count())
    name = platform.processor() or platform.machine() or "cpu"
    return Environment(device=torch.device("cpu"), device_name=f"CPU ({name})", torch_version=torch.__version__,
                       gpu_count=0)


def cells(request: ProfileRequest) -> Iterator[tuple[str, int, int]]:
    for kind in layer_kinds(request.model):
        for tp in request.tps:
            for b in request.micro_batch_sizes:
                yield kind, tp, b


def to_table(request: ProfileRequest, results: list[CellResult], metadata: dict[str, str], name: str) -> ProfileTable:
    table = ProfileTable(name=name, metadata=dict(metadata))
    for r in results:
        key = (request.gpu, r.layer_kind, r.tp, r.micro_batch_size)
        if r.status == "oom":
            table.out_of_memory.add(key)
            continue
        assert r.forward_s is not None and r.backward_s is not None
        table.entries[key] = ProfileEntry(forward_s=r.forward_s, backward_s=r.backward_s,
                                          activation_bytes=r.activation_bytes, tp_comm_included=r.tp_comm_included)
    return table


def run_profile(
    request: ProfileRequest,
    torch: Any,
    env: Environment,
    on_cell: Callable[[str, int, int], None] | None = None,
) -> tuple[list[CellResult], dict[str, str]]:
    """Measure every cell of the grid; returns the results and the table metadata (`# key: value` lines)."""
    check_tp_degrees(request.model, request.tps)
    max_tp = max(request.tps)
    nccl = env.device.type == "cuda" and max_tp > 1 and env.gpu_count >= max_tp
    results: list[CellResult] = []
    allreduce: dict[tuple[int, int], float] = {}
    for kind, tp, b in cells(request):
        if on_cell is not None:
            on_cell(kind, tp, b)
        cell = measure_cell(torch, request, kind, tp, b, env.device)
        if nccl:
            if tp > 1 and (tp, b) not in allreduce:
                elements = b * request.model.seq_length * request.model.hidden_size
                allreduce[(tp, b)] = time_allreduce_s(torch, tp, elements, request.dtype, request.repeats,
                                                      request.warmup)
            cell = add_tp_comm(cell, request.model, allreduce.get((tp, b), 0.0))
        results.append(cell)
    on_gpu = env.device.type == "cuda"
    if nccl:
        comm_note = (f"tensor-parallel all-reduces timed with NCCL over {max_tp} of the {env.gpu_count} GPUs of this "
                     "machine and added to forward_s/backward_s")
    else:
        where = f"{env.gpu_count} GPU(s)" if on_gpu else "no GPU"
        comm_note = (f"not timed ({where} here, max tp {max_tp}): times are one rank's compute only; the cost model "
                     "adds the tensor-parallel all-reduces from the node's intra-node link")
    metadata = {
        "source": "optsearch profile",
        "model": request.model.name,
        "gpu": request.gpu,
        "device": env.device_name,
        "torch": env.torch_version,
        "dtype": request.dtype,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "timer": "CUDA events" if on_gpu else "time.perf_counter (CPU)",
        "statistic": f"median of {request.repeats} repeats after {request.warmup} warm-up",
        "shard": "one rank's Megatron-LM tensor-parallel shard",
        "tp_comm_included": str(nccl).lower(),
        "tp_comm_note": comm_note,
        "activation_bytes": ("peak allocated during the forward minus the allocated baseline" if on_gpu else
                             "not measured on the CPU (empty); the cost model uses Korthikanti et al.'s formula"),
    }
    return results, metadata
