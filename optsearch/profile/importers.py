"""Importers: published profile tables (FASOP, AMP, Metis, Aceso) -> optsearch's own ProfileTable.

Each importer reads the files as their project published them, maps their modules onto optsearch's layer kinds
('embedding', the model's kinds, 'head') and their GPUs onto catalog names, and records in the table's metadata
every convention it had to apply. Nothing is guessed silently: a missing or garbled file is a ProfileError that
names it. What each source measures, and how it is mapped (docs/profile-importers.md says the same for users):

FASOP  known_cost/{prefix}_{GPU}_{tp}.npy: forward seconds of one micro-batch (mbs 1) per pipeline module,
       timed with Megatron-LM on tp GPUs (the TP all-reduces are inside). backward = 2 x forward (FASOP's own
       convention: forward + backward = 3 x forward). GPT-2 XL / BERT: [embedding, L x layer, head].
       T5: [encoder embedding, 24 x encoder, decoder embedding, 24 x decoder], mapped so that the sum over all 50
       modules is kept exactly:
         embedding = encoder embedding + decoder embedding   (both look up the one shared word embedding; our cost
                                                              model charges every embedding to the first stage)
         encoder   = median of the 24 encoder entries; decoder = median of the 24 decoder entries
         head      = what the last encoder and the last decoder entry hold beyond the median (their final layer
                     norms); FASOP's T5 table has no LM-head entry, so the head is only these two norms.
AMP    known_cost/gpt2_{G4,P3}_{tp}.npy: FASOP's layout and conventions (read by the same code), GPT-2 medium on
       T4 (G4, g4dn.12xlarge) and V100-SXM2-16GB (P3, p3.8xlarge), one entry per layer spec of DeepSpeed's pipeline
       module: [embedding, transpose, 24 x layer, transpose, final norm, logits, fp32 cast]. embedding = the first
       two, layer = mean of the 24 (their spread is recorded), head = the last four: the sum is kept exactly.
Metis  DeviceType.{GPU}_tp{t}_bs{b}.json: execution_time.layer_compute_total_ms[i] is forward + backward of layer
       i in ms (0 = embedding, last = head, the rest transformer layers), timed on t GPUs (TP all-reduces inside).
       Split forward : backward = 1 : 2. execution_memory.layer_memory_total_mb includes the layer's parameters,
       gradients and optimizer states in bytes-per-parameter Metis does not state, so activation bytes cannot be
       separated from it honestly: activation_bytes is left empty (the cost model uses Korthikanti's formula).
Aceso  gpt_{size}_mbs{m}_tp{t}_algo{a}.csv: one row per operator of ONE transformer layer (13 operators) plus
       the embedding (first row) and final layer norm + post-process (last two rows); forward-compute and
       backward-compute in microseconds, activations in MiB. layer = sum of the 13, embedding = first row,
       head = last two rows; activation_bytes = sum of the operators' `activations` column. The row-parallel
       operators' forward and the column-parallel operators' backward grow at tp > 1 by the time of an all-reduce
       (there is no separate communication row): the TP all-reduces are inside, tp_comm_included = true.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from optsearch.errors import ProfileError, SpecError
from optsearch.profile.table import ProfileEntry, ProfileTable
from optsearch.spec import ModelSpec
from optsearch.spec.base import read_text
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND

SOURCES = ("fasop", "amp", "metis", "aceso")

FASOP_BACKWARD_OVER_FORWARD = 2.0  # FASOP: forward + backward = 3 x forward
METIS_BACKWARD_SHARE = 2.0 / 3.0  # forward : backward = 1 : 2 of Metis' forward+backward per layer
ACESO_OPS_PER_LAYER = 13
MIB = 2**20

# optsearch model catalog name -> FASOP file prefix
FASOP_MODELS = {"gpt2-xl": "gpt2XL", "bert-large": "bert", "t5-fasop": "T5"}
# FASOP's GPU token -> catalog name: A100 is AWS p4d.24xlarge (A100 40 GB SXM), A10 is g5.24xlarge (A10G).
FASOP_GPUS = {"A100": "A100-SXM-40GB", "A10": "A10G"}
# optsearch model catalog name -> AMP file prefix (AMP profiled GPT-2 medium: 24 layers, hidden 1024, 16 heads,
# sequence 1024)
AMP_MODELS = {"gpt2-medium": "gpt2"}
# AMP's GPU token -> catalog name: G4 is AWS g4dn.12xlarge (4 x T4), P3 is p3.8xlarge (4 x V100-SXM2-16GB).
AMP_GPUS = {"G4": "T4", "P3": "V100-16GB"}
# AMP's GPT2ModelPipe layer specs around the transformer layers: [embedding, transpose] + layers +
# [transpose, final layer norm, logits, fp32 cast] (DeepSpeed's PipelineModule times each spec on its own).
AMP_SPECS_BEFORE = 2
AMP_SPECS_AFTER = 4
# Metis' A100: its tp 1 profile totals 53,120 MB on one GPU, more than 40 GB, so the 80 GB part.
METIS_GPUS = {"A100": "A100-SXM-80GB"}
# Aceso's cluster: 4 nodes x 8 V100 SXM2 32 GB.
ACESO_GPUS = {"V100": "V100-SXM2-32GB"}
# optsearch model catalog name -> Aceso size token (same layers, hidden, ffn, heads, sequence 2048)
ACESO_MODELS = {"gpt3-1.3b": "1_3B", "gpt3-2.7b": "2_6B", "gpt3-6.7b": "6_7B", "gpt3-13b": "13B"}
ACESO_SIZES = ("350M", "1_3B", "2_6B", "6_7B", "13B")
ACESO_VOCAB = 51200  # Aceso's GPT vocabulary (GPT-2's 50257 padded)


# ---- shared helpers ----------------------------------------------------------------------------------------


def parse_gpu_map(text: str | None, defaults: dict[str, str], known_gpus: Sequence[str]) -> dict[str, str]:
    """'A10=A10G,A100=A100-SXM-80GB' over the importer's defaults; every target must be a catalog GPU."""
    mapping = dict(defaults)
    if text:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            source, sep, target = part.partition("=")
            if not sep or not source.strip() or not target.strip():
                raise SpecError(f"--gpu-map item {part!r}: expected SOURCE_GPU=CATALOG_GPU, e.g. A10=A10G")
            mapping[source.strip()] = target.strip()
    for source, target in mapping.items():
        if target not in known_gpus:
            raise SpecError(
                f"--gpu-map {source}={target}: {target!r} is not a catalog GPU; known: {', '.join(sorted(known_gpus))}"
            )
    return mapping


def _catalog_gpus() -> list[str]:
    from optsearch.catalog import gpu_catalog

    return list(gpu_catalog())


def _uniform(values: Sequence[float], what: str, spreads: dict[str, str], *, mean: bool = False) -> float:
    """The median (or, with `mean`, the mean) of entries that should be equal; a relative spread (max - min over
    that value) above 1e-9 is recorded in the metadata."""
    med = statistics.fmean(values) if mean else statistics.median(values)
    lo, hi = min(values), max(values)
    if med > 0 and (hi - lo) / med > 1e-9:
        label = "mean" if mean else "median"
        spreads[what] = f"{label} {med!r}, min {lo!r}, max {hi!r} ({len(values)} entries, spread {(hi - lo) / med:.2%})"
    return med


def _require_dir(source: Path) -> None:
    if not source.is_dir():
        raise ProfileError(f"{source}: not a folder (give --source the folder that holds the published files)")


def _load_model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    from optsearch.catalog import load_model

    return load_model(model)


def _gpu_for(token: str, gpu_map: dict[str, str], path: Path) -> str:
    if token not in gpu_map:
        raise ProfileError(
            f"{path}: GPU {token!r} has no catalog name; give --gpu-map {token}=NAME "
            f"(mapped: {', '.join(f'{k}={v}' for k, v in gpu_map.items())})"
        )
    return gpu_map[token]


def _describe_map(gpu_map: dict[str, str], used: set[str]) -> str:
    return ", ".join(f"{k} -> {v}" for k, v in sorted(gpu_map.items()) if k in used)


# ---- FASOP ---------------------------------------------------------------------------------------------------

_FASOP_FILE = re.compile(r"^(?P<prefix>[A-Za-z0-9]+)_(?P<gpu>[A-Za-z0-9]+)_(?P<tp>\d+)\.npy$")


def _load_npy(path: Path):
    import numpy as np

    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ProfileError(f"{path}: not a readable .npy array: {err}") from None
    if arr.ndim != 1 or arr.dtype.kind != "f":
        raise ProfileError(f"{path}: expected a 1-D float array, got shape {arr.shape} dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ProfileError(f"{path}: has negative or non-finite entries")
    return arr


def fasop_module_times(arr, model: ModelSpec, path: Path, spreads: dict[str, str]) -> dict[str, float]:
    """Forward seconds per optsearch layer kind from one FASOP known_cost array (see the module docstring)."""
    kinds = model.kinds
    if len(kinds) == 1:
        want = model.num_layers + 2
        if arr.shape[0] != want:
            raise ProfileError(
                f"{path}: {arr.shape[0]} entries but {model.name} needs {want} "
                f"(embedding, {model.num_layers} layers, head)"
            )
        layer = _uniform([float(x) for x in arr[1:-1]], f"{path.name} {kinds[0].name}", spreads)
        return {EMBEDDING_KIND: float(arr[0]), kinds[0].name: layer, HEAD_KIND: float(arr[-1])}
    # Encoder-decoder: [embedding, encoder layers..., embedding, decoder layers...]
    want = model.num_layers + len(kinds)
    if arr.shape[0] != want:
        raise ProfileError(
            f"{path}: {arr.shape[0]} entries but {model.name} needs {want} (an embedding before each of "
            f"{', '.join(f'{k.num_layers} {k.name}' for k in kinds)} layers)"
        )
    out = {EMBEDDING_KIND: 0.0, HEAD_KIND: 0.0}
    start = 0
    for kind in kinds:
        out[EMBEDDING_KIND] += float(arr[start])
        block = [float(x) for x in arr[start + 1 : start + 1 + kind.num_layers]]
        # All but the last layer of the block should be equal; the last also runs the block's final layer norm.
        layer = _uniform(block[:-1], f"{path.name} {kind.name}", spreads)
        out[HEAD_KIND] += sum(block) - layer * len(block)
        out[kind.name] = layer
        start += 1 + kind.num_layers
    if out[HEAD_KIND] < 0:
        raise ProfileError(f"{path}: the last {', '.join(k.name for k in kinds)} entries are below the median")
    return out


def _import_known_cost(
    source: Path,
    spec: ModelSpec,
    prefix: str,
    gpu_map: dict[str, str],
    module_times: Callable[..., dict[str, float]],
    name: str,
    example_gpu: str,
) -> tuple[ProfileTable, list[Path], set[str], dict[str, str]]:
    """The known_cost/{prefix}_{GPU}_{tp}.npy layout FASOP and AMP share: one array of forward seconds per module at
    micro-batch 1 per file, timed on tp GPUs. `module_times(arr, spec, path, spreads)` maps an array onto the layer
    kinds; every kind gets backward = 2 x forward and tp_comm_included = true. Returns the table (no metadata yet),
    the files read, the GPU tokens used and the spreads recorded."""
    _require_dir(source)
    files = sorted(p for p in source.glob(f"{prefix}_*_*.npy") if _FASOP_FILE.match(p.name))
    files = [p for p in files if _FASOP_FILE.match(p.name)["prefix"] == prefix]  # type: ignore[index]
    if not files:
        example = source / f"{prefix}_{example_gpu}_1.npy"
        raise ProfileError(f"{example}: missing (no {prefix}_<GPU>_<tp>.npy file in {source})")
    table = ProfileTable(name=name)
    spreads: dict[str, str] = {}
    used: set[str] = set()
    for path in files:
        match = _FASOP_FILE.match(path.name)
        assert match is not None
        gpu = _gpu_for(match["gpu"], gpu_map, path)
        used.add(match["gpu"])
        tp = int(match["tp"])
        times = module_times(_load_npy(path), spec, path, spreads)
        for kind, forward_s in times.items():
            table.entries[(gpu, kind, tp, 1)] = ProfileEntry(
                forward_s=forward_s,
                backward_s=FASOP_BACKWARD_OVER_FORWARD * forward_s,
                activation_bytes=None,
                tp_comm_included=True,
            )
    return table, files, used, spreads


def import_fasop(source: Path, model: str | ModelSpec, gpu_map: dict[str, str] | None = None) -> ProfileTable:
    """FASOP's known_cost/{prefix}_{GPU}_{tp}.npy for one model -> a table at micro-batch 1 (see module docstring)."""
    source = Path(source)
    spec = _load_model(model)
    if spec.name not in FASOP_MODELS:
        raise ProfileError(
            f"FASOP publishes tables for {', '.join(FASOP_MODELS)} only; model {spec.name!r} is not one of them"
        )
    prefix = FASOP_MODELS[spec.name]
    gpu_map = gpu_map if gpu_map is not None else dict(FASOP_GPUS)
    table, files, used, spreads = _import_known_cost(
        source, spec, prefix, gpu_map, fasop_module_times, f"fasop-{spec.name}", "A10"
    )
    table.metadata.update(
        {
            "source": f"FASOP known_cost ({source})",
            "files": " ".join(p.name for p in files),
            "model": spec.name,
            "gpus": _describe_map(gpu_map, used),
            "measured": "Megatron-LM fp16, forward of one micro-batch (micro_batch_size 1) per module at tp GPUs",
            "backward": "2 x forward (FASOP's convention: forward + backward = 3 x forward)",
            "tp_comm_included": "true (FASOP times the module on tp GPUs, all-reduces inside)",
            "activation_bytes": "not published (empty: the cost model uses Korthikanti et al.)",
        }
    )
    if len(spec.kinds) > 1:
        table.metadata["mapping"] = (
            "embedding = encoder embedding + decoder embedding; each kind = median of its entries; head = the last "
            "encoder and last decoder entries beyond their median (final layer norms); sum over modules kept"
        )
    for what, spread in sorted(spreads.items()):
        table.metadata[f"spread {what}"] = spread
    return table


# ---- AMP -----------------------------------------------------------------------------------------------------


def amp_module_times(arr, model: ModelSpec, path: Path, spreads: dict[str, str]) -> dict[str, float]:
    """Forward seconds per layer kind from one AMP known_cost array: one entry per layer spec of AMP's GPT2ModelPipe,
    [embedding, transpose, L x layer, transpose, final layer norm, logits, fp32 cast].

    embedding = the first two specs, layer = the mean of the L layers (their spread goes into the metadata), head =
    the last four, so that embedding + L x layer + head = the sum over all specs exactly.
    """
    if len(model.kinds) != 1:
        raise ProfileError(f"{path}: AMP profiles decoder-only GPTs; {model.name} has layer kinds "
                           f"{', '.join(k.name for k in model.kinds)}")
    layers = model.num_layers
    want = AMP_SPECS_BEFORE + layers + AMP_SPECS_AFTER
    if arr.shape[0] != want:
        raise ProfileError(
            f"{path}: {arr.shape[0]} entries but {model.name} needs {want} (embedding, transpose, {layers} layers, "
            "transpose, final layer norm, logits, fp32 cast)"
        )
    kind = model.kinds[0].name
    values = [float(x) for x in arr]
    body = values[AMP_SPECS_BEFORE : AMP_SPECS_BEFORE + layers]
    return {
        EMBEDDING_KIND: sum(values[:AMP_SPECS_BEFORE]),
        kind: _uniform(body, f"{path.name} {kind}", spreads, mean=True),
        HEAD_KIND: sum(values[AMP_SPECS_BEFORE + layers :]),
    }


def _sha256_prefix(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def import_amp(source: Path, model: str | ModelSpec, gpu_map: dict[str, str] | None = None) -> ProfileTable:
    """AMP's known_cost/gpt2_{G4,P3}_{1,2,4}.npy (GPT-2 medium) -> a table at micro-batch 1.

    Same file layout and conventions as FASOP's (forward seconds of micro-batch 1 per module, timed on tp GPUs;
    backward = 2 x forward), read through the same code; only the module list differs (amp_module_times).
    """
    source = Path(source)
    spec = _load_model(model)
    if spec.name not in AMP_MODELS:
        raise ProfileError(
            f"AMP publishes per-layer tables for {', '.join(AMP_MODELS)} only; model {spec.name!r} is not one of them"
        )
    prefix = AMP_MODELS[spec.name]
    gpu_map = gpu_map if gpu_map is not None else dict(AMP_GPUS)
    table, files, used, spreads = _import_known_cost(
        source, spec, prefix, gpu_map, amp_module_times, f"amp-{spec.name}", "G4"
    )
    tps = sorted({k[2] for k in table.entries})
    padded = ", ".join(
        f"{_padded_vocab(spec.vocab_size, 128 * tp)} at tp {tp}" for tp in tps
    )
    table.metadata.update(
        {
            "source": f"AMP (Li et al., NeurIPS 2022) known_cost ({source}); published in DachengLi1/AMP "
                      "src/known_cost, made by generate_known_cost.py",
            "files": " ".join(f"{p.name} (sha256 {_sha256_prefix(p)}...)" for p in files),
            "model": f"{spec.name} ({spec.num_layers} layers checked against the array length; AMP's profile script "
                     "runs 24 layers, hidden 1024, 16 heads, sequence 1024)",
            "gpus": _describe_map(gpu_map, used) + " (G4 = g4dn.12xlarge, 4 x T4; P3 = p3.8xlarge, 4 x V100-SXM2-16GB)",
            "measured": "forward only, micro-batch 1, fp16: AMP's DeepSpeed PipelineModule times every layer spec with "
                        "time.time() before and torch.cuda.synchronize() + time.time() after, at iteration 35 on rank "
                        "0; one node, pp 1, tp GPUs; Megatron-LM v1.1.5 (AMP's fork) without softmax fusion",
            "mapping": "embedding = specs 0-1 (embedding, transpose); layer = mean of the layer specs (sum over the "
                       "model kept exactly; spread below); head = the last 4 specs (transpose, final layer norm, "
                       "logits GEMM, fp32 cast); the loss (cross entropy) is not in AMP's profile",
            "backward": "2 x forward (AMP's convention, cost_homo.py: forward + backward = 3 x forward)",
            "tp_comm_included": "true (timed on tp GPUs: each layer's forward all-reduces are inside, and so is the "
                                "host time of every layer, since the GPU is drained after each one)",
            "micro_batch_size": "1 only (all AMP timed). The table code does not extrapolate: a plan at another "
                                "micro-batch is refused with an error naming the missing entry, and solve skips "
                                "micro-batches the table lacks. AMP's own model multiplies these times by the "
                                "micro-batch (cost_homo.py); optsearch does not",
            "vocabulary": f"GPT-2's {spec.vocab_size} padded by Megatron-LM v1.1.5 to a multiple of 128 x tp "
                          f"({padded}): the head rows are timed with it",
            "activation_bytes": "not published (empty: the cost model uses Korthikanti et al.)",
        }
    )
    for what, spread in sorted(spreads.items()):
        table.metadata[f"spread {what}"] = spread
    return table


def _padded_vocab(vocab: int, multiple: int) -> int:
    """Megatron-LM v1.1.5's _vocab_size_with_padding: round up to a multiple of make-vocab-size-divisible-by x tp."""
    return -(-vocab // multiple) * multiple


# ---- Metis ---------------------------------------------------------------------------------------------------

_METIS_FILE = re.compile(r"^DeviceType\.(?P<gpu>[A-Za-z0-9]+)_tp(?P<tp>\d+)_bs(?P<bs>\d+)\.json$")


def _json_path(data: dict, keys: Sequence[str], path: Path):
    cur = data
    for key in keys:
        if not isinstance(cur, dict) or key not in cur:
            raise ProfileError(f"{path}: lacks {'.'.join(keys)}")
        cur = cur[key]
    return cur


def _number_list(value: object, field: str, path: Path) -> list[float]:
    if not isinstance(value, list) or len(value) < 3:
        raise ProfileError(f"{path}: {field} must be a list of at least 3 numbers (embedding, layers, head)")
    out = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
            raise ProfileError(f"{path}: {field}[{i}] = {x!r}: must be a number >= 0")
        out.append(float(x))
    return out


def import_metis(source: Path, model: str | ModelSpec, gpu_map: dict[str, str] | None = None) -> ProfileTable:
    """Metis' DeviceType.{GPU}_tp{t}_bs{b}.json files -> a table (see module docstring).

    The files profile a 10-layer model whose transformer layer has `parameters_per_layer_bytes` parameters (the
    name says bytes, the values are counts); the importer checks that count against the model's layer, so a table
    is only ever attached to the shape it was timed on (202,383,360 = 4h^2 + 3hf + 2h with h 4096, f 11008: a
    Llama-2-7B layer).
    """
    source = Path(source)
    spec = _load_model(model)
    if len(spec.kinds) != 1:
        raise ProfileError(f"Metis profiles decoder-only GPTs; model {spec.name!r} has layer kinds "
                           f"{', '.join(k.name for k in spec.kinds)}")
    kind = spec.kinds[0]
    gpu_map = gpu_map if gpu_map is not None else dict(METIS_GPUS)
    _require_dir(source)
    files = sorted(p for p in source.glob("DeviceType.*.json") if _METIS_FILE.match(p.name))
    if not files:
        raise ProfileError(f"{source / 'DeviceType.A100_tp1_bs1.json'}: missing (no DeviceType.<GPU>_tp<t>_bs<b>.json "
                           f"file in {source})")
    table = ProfileTable(name=f"metis-{spec.name}")
    spreads: dict[str, str] = {}
    used: set[str] = set()
    extras: list[str] = []
    embedding_note = ""
    for path in files:
        match = _METIS_FILE.match(path.name)
        assert match is not None
        gpu = _gpu_for(match["gpu"], gpu_map, path)
        used.add(match["gpu"])
        tp, bs = int(match["tp"]), int(match["bs"])
        try:
            data = json.loads(read_text(path, error=ProfileError))
        except json.JSONDecodeError as err:
            raise ProfileError(f"{path}: not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ProfileError(f"{path}: expected a JSON object")
        times_ms = _number_list(
            _json_path(data, ("execution_time", "layer_compute_total_ms"), path), "layer_compute_total_ms", path
        )
        params = _number_list(
            _json_path(data, ("model", "parameters", "parameters_per_layer_bytes"), path),
            "parameters_per_layer_bytes", path,
        )
        if len(params) != len(times_ms):
            raise ProfileError(f"{path}: {len(params)} parameter counts but {len(times_ms)} layer times")
        layer_params = _uniform(params[1:-1], f"{path.name} parameters", spreads)
        if int(layer_params) != spec.layer_parameters(kind):
            raise ProfileError(
                f"{path}: its transformer layer has {int(layer_params):,} parameters but a {spec.name} layer has "
                f"{spec.layer_parameters(kind):,}; import it for the model it was profiled with "
                f"(a Llama-2-7B layer, 4h^2 + 3hf + 2h, has 202,383,360)"
            )
        step = {
            EMBEDDING_KIND: times_ms[0],
            kind.name: _uniform(times_ms[1:-1], f"{path.name} {kind.name}", spreads),
            HEAD_KIND: times_ms[-1],
        }
        for name, total_ms in step.items():
            total_s = total_ms / 1e3
            table.entries[(gpu, name, tp, bs)] = ProfileEntry(
                forward_s=total_s * (1 - METIS_BACKWARD_SHARE),
                backward_s=total_s * METIS_BACKWARD_SHARE,
                activation_bytes=None,
                tp_comm_included=True,
            )
        timings = data.get("execution_time", {})
        if isinstance(timings, dict) and "optimizer_time_ms" in timings:
            extras.append(f"tp{tp} bs{bs} {timings['optimizer_time_ms']:.1f}")
        embedding_note = (
            f"{int(params[0]):,} parameters (= {params[0] / spec.hidden_size:,.0f} x hidden {spec.hidden_size}); "
            f"{spec.name} has vocabulary {spec.vocab_size:,}: the embedding and head rows were timed with Metis' "
            "vocabulary, not the model's"
        )
    table.metadata.update(
        {
            "source": f"Metis ({source})",
            "files": " ".join(p.name for p in files),
            "model": f"{spec.name} (checked: parameters per transformer layer = {spec.layer_parameters(kind):,})",
            "gpus": _describe_map(gpu_map, used),
            "measured": "execution_time.layer_compute_total_ms: forward + backward per layer, micro-batch = bs",
            "backward": "forward : backward = 1 : 2 of Metis' forward+backward",
            "tp_comm_included": "true (timed on tp GPUs)",
            "activation_bytes": (
                "empty: layer_memory_total_mb includes parameters, gradients and optimizer states, in bytes per "
                "parameter Metis does not state, so the activations cannot be separated"
            ),
            "sequence length": "not recorded in the files",
            "embedding": embedding_note,
            "metis optimizer_time_ms (whole 10-layer model)": "; ".join(extras) or "absent",
        }
    )
    for what, spread in sorted(spreads.items()):
        table.metadata[f"spread {what}"] = spread
    return table


# ---- Aceso ---------------------------------------------------------------------------------------------------

_ACESO_COLUMNS = ("op_name", "forward-compute", "backward-compute", "activations", "input_size")


def _aceso_size(model: str | ModelSpec) -> tuple[str, ModelSpec | None]:
    if isinstance(model, str) and model in ACESO_SIZES:
        return model, None
    spec = _load_model(model)
    if spec.name not in ACESO_MODELS:
        known = ", ".join([*ACESO_MODELS, *ACESO_SIZES])
        raise ProfileError(f"Aceso publishes GPT tables for {known}; model {spec.name!r} is not one of them")
    return ACESO_MODELS[spec.name], spec


def _aceso_rows(path: Path) -> list[dict[str, str]]:
    text = read_text(path, error=ProfileError)
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in _ACESO_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ProfileError(f"{path}: header lacks column(s) {missing}")
    rows = list(reader)
    if len(rows) != 1 + ACESO_OPS_PER_LAYER + 2:
        raise ProfileError(
            f"{path}: {len(rows)} operator rows; expected {1 + ACESO_OPS_PER_LAYER + 2} (embedding, "
            f"{ACESO_OPS_PER_LAYER} operators of one transformer layer, final layer norm, post-process)"
        )
    return rows


def _aceso_number(row: dict[str, str], column: str, path: Path, n: int) -> float:
    try:
        x = float(row[column])
    except (TypeError, ValueError):
        where = f"{path}: row {n + 1} ({row.get('op_name')})"
        raise ProfileError(f"{where}: {column} = {row[column]!r}: not a number") from None
    if x < 0:
        raise ProfileError(f"{path}: row {n + 1} ({row.get('op_name')}): {column} = {x!r}: must be >= 0")
    return x


_ACESO_FILE = re.compile(r"^gpt_(?P<size>.+)_mbs(?P<mbs>\d+)_tp(?P<tp>\d+)_algo(?P<algo>\d+)\.csv$")


def import_aceso(
    source: Path, model: str | ModelSpec, gpu_map: dict[str, str] | None = None, algo: int = 0
) -> ProfileTable:
    """Aceso's gpt_{size}_mbs{m}_tp{t}_algo{a}.csv for one GPT size -> a table on V100-SXM2-32GB.

    `algo` picks one of Aceso's two profiled variants; in these files algo0 and algo1 differ only in the four
    matrix-product operators (QKV, attention output, both MLP GEMMs), i.e. the GEMM implementation Aceso timed;
    algo 0 is the default.
    """
    source = Path(source)
    size, spec = _aceso_size(model)
    gpu_map = gpu_map if gpu_map is not None else dict(ACESO_GPUS)
    (gpu_token,) = ACESO_GPUS
    other = sorted(set(gpu_map) - {gpu_token})
    if other or gpu_token not in gpu_map:
        raise SpecError(f"--gpu-map: Aceso's files were all timed on {gpu_token}; map only {gpu_token}=NAME "
                        f"(got {', '.join(other) or 'no ' + gpu_token})")
    gpu = gpu_map[gpu_token]
    _require_dir(source)
    files = sorted(source.glob(f"gpt_{size}_mbs*_tp*_algo{algo}.csv"))
    files = [p for p in files if (m := _ACESO_FILE.match(p.name)) and m["size"] == size]
    if not files:
        raise ProfileError(f"{source / f'gpt_{size}_mbs1_tp1_algo{algo}.csv'}: missing (no gpt_{size}_mbs<m>_tp<t>_"
                           f"algo{algo}.csv file in {source})")
    kind = spec.kinds[0].name if spec is not None else "layer"
    table = ProfileTable(name=f"aceso-{spec.name if spec else size}")
    for path in files:
        match = _ACESO_FILE.match(path.name)
        assert match is not None
        mbs, tp = int(match["mbs"]), int(match["tp"])
        rows = _aceso_rows(path)
        us = [(_aceso_number(r, "forward-compute", path, n), _aceso_number(r, "backward-compute", path, n))
              for n, r in enumerate(rows)]
        act_mib = [_aceso_number(r, "activations", path, n) for n, r in enumerate(rows)]
        if spec is not None:
            want_mib = mbs * spec.seq_length * spec.hidden_size * 2 / MIB
            got_mib = _aceso_number(rows[1], "input_size", path, 1)
            if abs(got_mib - want_mib) > 1e-3 * want_mib:
                raise ProfileError(
                    f"{path}: the layer's input is {got_mib} MiB but {spec.name} at micro-batch {mbs} has "
                    f"{want_mib:g} MiB (sequence {spec.seq_length} x hidden {spec.hidden_size} x 2 bytes)"
                )
        groups: dict[str, tuple[slice, bool]] = {
            EMBEDDING_KIND: (slice(0, 1), False),
            kind: (slice(1, 1 + ACESO_OPS_PER_LAYER), True),
            HEAD_KIND: (slice(1 + ACESO_OPS_PER_LAYER, None), False),
        }
        for name, (sel, with_activations) in groups.items():
            fwd_us = sum(f for f, _ in us[sel])
            bwd_us = sum(b for _, b in us[sel])
            table.entries[(gpu, name, tp, mbs)] = ProfileEntry(
                forward_s=fwd_us / 1e6,
                backward_s=bwd_us / 1e6,
                activation_bytes=float(round(sum(act_mib[sel]) * MIB)) if with_activations else None,
                tp_comm_included=True,
            )
    table.metadata.update(
        {
            "source": f"Aceso profiled-time-eurosys ({source})",
            "files": " ".join(p.name for p in files),
            "model": (spec.name if spec else f"Aceso GPT {size}") + f" (Aceso size {size}, algo {algo})",
            "gpus": f"{gpu_token} -> {gpu}",
            "measured": "per operator, forward-compute and backward-compute in microseconds",
            "mapping": "embedding = first operator; layer = sum of the 13 operators; head = final layer norm + "
                       "post-process (LM head and loss)",
            "tp_comm_included": "true (no communication row: the row-parallel forward and column-parallel backward "
                                "operators grow by an all-reduce's time at tp > 1)",
            "activation_bytes": "sum of the 13 operators' `activations` column (MiB) of the layer, rounded to bytes",
            "vocabulary": f"{ACESO_VOCAB} (the head row is timed with it)",
        }
    )
    return table


IMPORTERS: dict[str, Callable[..., ProfileTable]] = {
    "fasop": import_fasop,
    "amp": import_amp,
    "metis": import_metis,
    "aceso": import_aceso,
}
DEFAULT_GPU_MAPS = {"fasop": FASOP_GPUS, "amp": AMP_GPUS, "metis": METIS_GPUS, "aceso": ACESO_GPUS}


def import_profile(
    source_kind: str, source: Path, model: str | ModelSpec, gpu_map_text: str | None = None, **options
) -> ProfileTable:
    """One entry point for the CLI: `source_kind` in SOURCES, `gpu_map_text` like 'A10=A10G,A100=A100-SXM-80GB'."""
    if source_kind not in IMPORTERS:
        raise SpecError(f"import-profile: unknown source {source_kind!r}; known: {', '.join(SOURCES)}")
    try:
        spec = _load_model(model)
    except SpecError:  # the importer names the model error in its own terms
        spec = None
    if spec is not None and spec.is_moe:
        raise SpecError(f"import-profile: model {spec.name} has mixture-of-experts layers; {source_kind} profiles "
                        "dense layers only (no router, no experts), so none of its rows can price an expert layer")
    gpu_map = parse_gpu_map(gpu_map_text, DEFAULT_GPU_MAPS[source_kind], _catalog_gpus())
    return IMPORTERS[source_kind](Path(source), model, gpu_map, **options)
