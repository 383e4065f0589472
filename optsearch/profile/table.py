"""Profile tables: measured (or imported) per-layer times, in optsearch's own CSV/YAML format.

One row per (gpu, layer_kind, tp, micro_batch_size):

    gpu,layer_kind,tp,micro_batch_size,forward_s,backward_s,activation_bytes,tp_comm_included

`layer_kind` is 'embedding', 'head' or a model layer kind ('layer', 'encoder', 'decoder').
`activation_bytes` may be empty (the cost model then uses Korthikanti et al.'s formula).
`tp_comm_included` says whether the times already contain the tensor-parallel all-reduces (true for
tables timed on tp GPUs with NCCL, e.g. FASOP's); when false the cost model adds them.
Lines starting with '#' before the header are metadata: `# key: value` (source, device, dtype, date...).
A row may carry `status` = 'oom' (measured out of memory): asking for it is an error, never a guess.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


from optsearch.errors import ProfileError

COLUMNS = (
    "gpu",
    "layer_kind",
    "tp",
    "micro_batch_size",
    "forward_s",
    "backward_s",
    "activation_bytes",
    "tp_comm_included",
)
OPTIONAL_COLUMNS = ("activation_bytes", "tp_comm_included", "status", "forward_repeats")
# forward_repeats (ProfileEntry.forward_repeats): written only by a table with a row that repeats its forward (an
# analytic profile of an eager engine materialized by AnalyticProfile.to_table); empty or absent: 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileEntry:
    forward_s: float
    backward_s: float
    activation_bytes: float | None = None
    tp_comm_included: bool = False
    # Times the engine runs each layer's forward per forward pass (AMP's Megatron v1.1.5 fork: 2, its pipeline
    # wrapper calls the layer twice): the cost model prices that many forward tp all-reduces (analytic profile only).
    forward_repeats: int = 1


Key = tuple[str, str, int, int]  # gpu, layer_kind, tp, micro_batch_size


class Profile(Protocol):
    """Anything that gives per-layer times: a table, or the analytic roofline."""

    name: str

    def get(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> ProfileEntry: ...

    def has(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> bool: ...


@dataclass(slots=True)
class ProfileTable:
    name: str
    entries: dict[Key, ProfileEntry] = field(default_factory=dict)
    out_of_memory: set[Key] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)

    def has(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> bool:
        return (gpu, layer_kind, tp, micro_batch_size) in self.entries

    def get(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> ProfileEntry:
        key = (gpu, layer_kind, tp, micro_batch_size)
        entry = self.entries.get(key)
        if entry is not None:
            return entry
        want = f"gpu={gpu} layer_kind={layer_kind} tp={tp} micro_batch_size={micro_batch_size}"
        if key in self.out_of_memory:
            raise ProfileError(f"profile {self.name}: {want} was measured out of memory")
        same = [k for k in self.entries if k[0] == gpu and k[1] == layer_kind]
        if same:
            tps = sorted({k[2] for k in same})
            mbss = sorted({k[3] for k in same})
            hint = f"it has tp in {tps} and micro_batch_size in {mbss} for that gpu and layer kind"
        else:
            gpus = sorted({k[0] for k in self.entries})
            kinds = sorted({k[1] for k in self.entries})
            hint = f"it has gpus {gpus} and layer kinds {kinds}"
        raise ProfileError(f"profile {self.name} has no entry for {want}; {hint}")

    def gpus(self) -> set[str]:
        return {k[0] for k in self.entries}

    @property
    def eager_engine(self) -> str | None:
        """The eager engine whose per-layer times the table holds (`# eager_engine: NAME`, written by
        AnalyticProfile.to_table): the cost model then prices that engine's own pipeline schedule and optimizer step
        on top of the rows (docs/cost-model.md section 6c), as it does for the analytic profile. None when absent."""
        from optsearch.profile.analytic import EAGER_ENGINES  # the analytic module owns the engine table

        name = self.metadata.get(EAGER_ENGINE_KEY, "").strip()
        if not name:
            return None
        if name not in EAGER_ENGINES:
            raise ProfileError(f"profile {self.name}: {EAGER_ENGINE_KEY} = {name!r}: must be one of "
                               f"{', '.join(sorted(EAGER_ENGINES))} (or absent)")
        return name

    # ---- writing -----------------------------------------------------------------------------------------
    def to_csv(self) -> str:
        buf = io.StringIO()
        for key, value in self.metadata.items():
            buf.write(f"# {key}: {value}\n")
        writer = csv.writer(buf, lineterminator="\n")
        repeats = any(e.forward_repeats != 1 for e in self.entries.values())  # else the column is left out
        writer.writerow((*COLUMNS, "status", *(("forward_repeats",) if repeats else ())))
        rows = [(k, self.entries.get(k)) for k in sorted(set(self.entries) | self.out_of_memory)]
        for (gpu, kind, tp, mbs), e in rows:
            if e is None:
                writer.writerow((gpu, kind, tp, mbs, "", "", "", "", "oom", *(("",) if repeats else ())))
                continue
            act = "" if e.activation_bytes is None else f"{e.activation_bytes:.0f}"
            writer.writerow(
                (gpu, kind, tp, mbs, repr(e.forward_s), repr(e.backward_s), act, str(e.tp_comm_included).lower(), "ok",
                 *((str(e.forward_repeats),) if repeats else ()))
            )
        return buf.getvalue()

    def save(self, path: Path) -> None:
        """Write atomically (a temporary file renamed over the target)."""
        from optsearch.report import write_atomic

        write_atomic(path, self.to_csv())


EAGER_ENGINE_KEY = "eager_engine"  # metadata `# eager_engine: NAME`: the rows are that eager engine's
DERIVED_FROM_KEY = "derived_from"  # metadata `# derived_from: analytic`: every row is the analytic profile x a factor


def analytic_derived(table: ProfileTable) -> bool:
    """Whether the table says every row is the analytic profile times a compute factor per GPU (`optsearch
    calibrate` on the analytic profile writes `# derived_from: analytic`): such times keep the analytic shape and
    price a rank's s / cp tokens as the analytic profile does (targets.prices_context_parallel)."""
    return table.metadata.get(DERIVED_FROM_KEY, "").strip().lower().startswith("analytic")


def _parse_bool(value: str, where: str) -> bool:
    v = value.strip().lower()
    if v in ("", "false", "0", "no"):
        return False
    if v in ("true", "1", "yes"):
        return True
    raise ProfileError(f"{where}: tp_comm_included = {value!r}: must be true or false")


def _parse_number(value: object, column: str, where: str, *, allow_empty: bool = False) -> float | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if allow_empty:
            return None
        raise ProfileError(f"{where}: {column} is missing")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: {column} = {value!r}: not a number") from None
    if not math.isfinite(x) or x < 0:
        raise ProfileError(f"{where}: {column} = {value!r}: must be a finite number >= 0")
    return x


def _parse_int(value: object, column: str, where: str) -> int:
    try:
        x = int(str(value).strip())
    except ValueError:
        raise ProfileError(f"{where}: {column} = {value!r}: not an integer") from None
    if x <= 0:
        raise ProfileError(f"{where}: {column} = {value!r}: must be > 0")
    return x


def _add_row(table: ProfileTable, row: dict[str, object], where: str) -> None:
    for col in ("gpu", "layer_kind", "tp", "micro_batch_size"):
        if row.get(col) in (None, ""):
            raise ProfileError(f"{where}: {col} is missing")
    key = (str(row["gpu"]), str(row["layer_kind"]), _parse_int(row["tp"], "tp", where),
           _parse_int(row["micro_batch_size"], "micro_batch_size", where))
    if key in table.entries or key in table.out_of_memory:
        raise ProfileError(f"{where}: duplicate entry for gpu={key[0]} layer_kind={key[1]} tp={key[2]} "
                           f"micro_batch_size={key[3]}")
    status = str(row.get("status") or "ok").strip().lower()
    if status == "oom":
        table.out_of_memory.add(key)
        return
    if status != "ok":
        raise ProfileError(f"{where}: status = {status!r}: must be ok or oom")
    fwd = _parse_number(row.get("forward_s"), "forward_s", where)
    bwd = _parse_number(row.get("backward_s"), "backward_s", where)
    act = _parse_number(row.get("activation_bytes"), "activation_bytes", where, allow_empty=True)
    tp_comm = row.get("tp_comm_included")
    included = tp_comm if isinstance(tp_comm, bool) else _parse_bool(str(tp_comm or ""), where)
    assert fwd is not None and bwd is not None
    repeats_text = str(row.get("forward_repeats") or "").strip()
    repeats = _parse_int(repeats_text, "forward_repeats", where) if repeats_text else 1
    table.entries[key] = ProfileEntry(forward_s=fwd, backward_s=bwd, activation_bytes=act, tp_comm_included=included,
                                      forward_repeats=repeats)


def parse_csv(text: str, name: str) -> ProfileTable:
    try:
        return _parse_csv(text, name)
    except csv.Error as err:  # e.g. a field longer than the csv module's limit: not a profile table
        raise ProfileError(f"{name}: not a valid CSV profile table: {err}") from None


def _parse_csv(text: str, name: str) -> ProfileTable:
    table = ProfileTable(name=name)
    lines = text.splitlines()
    body_start = 0
    for i, line in enumerate(lines):
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                table.metadata[key.strip()] = value.strip()
            body_start = i + 1
        elif line.strip():
            break
        else:
            body_start = i + 1
    reader = csv.DictReader(lines[body_start:])
    header = reader.fieldnames or []
    missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
    if missing:
        raise ProfileError(f"{name}: header lacks column(s) {missing}; expected {','.join(COLUMNS)}")
    unknown = [c for c in header if c not in COLUMNS and c not in OPTIONAL_COLUMNS]
    if unknown:
        raise ProfileError(f"{name}: unknown column(s) {unknown}; expected {','.join(COLUMNS)}[,status]")
    for n, row in enumerate(reader):
        _add_row(table, row, f"{name}: row {n + 1}")
    if not table.entries:
        raise ProfileError(f"{name}: no profile rows")
    return table


def parse_yaml(text: str, name: str) -> ProfileTable:
    from optsearch.spec.base import load_yaml

    data = load_yaml(text, name, error=ProfileError)  # a duplicate key names both lines
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ProfileError(f"{name}: expected a mapping with `entries:` (a list of rows) and optional `metadata:`")
    table = ProfileTable(name=name, metadata={str(k): str(v) for k, v in (data.get("metadata") or {}).items()})
    for n, row in enumerate(data["entries"]):
        if not isinstance(row, dict):
            raise ProfileError(f"{name}: entries[{n}] must be a mapping")
        unknown = [c for c in row if c not in COLUMNS and c not in OPTIONAL_COLUMNS]
        if unknown:
            raise ProfileError(f"{name}: entries[{n}]: unknown key(s) {unknown}")
        _add_row(table, row, f"{name}: entries[{n}]")
    if not table.entries:
        raise ProfileError(f"{name}: no profile rows")
    return table


PROFILE_LIMIT_BYTES = 256 * 2**20


def load_table(path: Path) -> ProfileTable:
    from optsearch.spec.base import read_text

    text = read_text(path, limit_bytes=PROFILE_LIMIT_BYTES, error=ProfileError)  # regular UTF-8 files only
    if path.suffix.lower() in (".yaml", ".yml"):
        return parse_yaml(text, str(path))
    return parse_csv(text, str(path))
