"""Shared machinery for input specs: strict pydantic models and one-line validation errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from optsearch.errors import SpecError

S = TypeVar("S", bound=BaseModel)


class Spec(BaseModel):
    """Base of every input spec: unknown keys are errors, numbers are finite, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _value_at(data: Any, loc: tuple[Any, ...]) -> Any:
    cur = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def format_validation_error(source: str, err: ValidationError, data: Any) -> str:
    """One line: `source: field.path = value: rule` for the first error (and a count of the rest)."""
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = tuple(first["loc"])
    rule = first["msg"]
    if rule.startswith("Value error, "):
        rule = rule[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        rule = "unknown key"
    value = first.get("input", _value_at(data, loc))
    if first["type"] == "missing":
        line = f"{source}: {_field_path(loc)}: missing (required)"
    elif first["type"] == "value_error" and isinstance(value, dict):
        # a rule across fields (a model validator): its message names the fields; the path says where they are
        line = f"{source}: {rule}" if not loc else f"{source}: {_field_path(loc)}: {rule}"
    elif isinstance(value, (dict, list)):
        line = f"{source}: {_field_path(loc)} = (a {'mapping' if isinstance(value, dict) else 'list'}): {rule}"
    else:
        line = f"{source}: {_field_path(loc)} = {value!r}: {rule}"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more)"
    return line


def validate(cls: type[S], data: Any, source: str) -> S:
    """Validate `data` as `cls`, raising SpecError with a one-line message."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(source, err, data)) from None


MAX_SPEC_BYTES = 8 * 2**20  # a spec or plan file is a few KiB; 8 MiB leaves room and bounds the time to read one


def read_text(path: Path, *, limit_bytes: int = MAX_SPEC_BYTES, error: type[Exception] = SpecError) -> str:
    """The UTF-8 text of a regular file of at most `limit_bytes`, or `error` with one line saying why not.

    Devices, FIFOs and sockets (/dev/urandom, /dev/zero, a named pipe) are refused before they are opened for
    reading, so nothing blocks or fills memory; a file of UTF-16 or binary bytes is refused by name."""
    path = Path(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError) as err:
        raise error(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{path}: is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: not a regular file (a device, FIFO or socket); give a file")
    if info.st_size > limit_bytes:
        raise error(f"{path}: {info.st_size:,} bytes: larger than the {limit_bytes // 2**20} MiB limit for this file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit_bytes + 1)  # /proc files report size 0: read at most the limit
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror or err}") from None
    if len(raw) > limit_bytes:
        raise error(f"{path}: larger than the {limit_bytes // 2**20} MiB limit for this file")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(f"{path}: UTF-16 text; save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise error(f"{path}: binary data (a NUL byte at offset {nul}), not UTF-8 text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})") from None


def read_mapping(path: Path, *, limit_bytes: int = MAX_SPEC_BYTES, kind: str | None = None,
                 expected: str = "a mapping at the top level") -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, raising SpecError (never a traceback) when it cannot be read.
    kind: "JSON" or "YAML" whatever the suffix (default: JSON for .json, else YAML)."""
    text = read_text(path, limit_bytes=limit_bytes)
    kind = kind or ("JSON" if path.suffix.lower() == ".json" else "YAML")
    try:
        data = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SpecError(f"{path}: not valid {kind}: {first}") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected {expected}, got {type(data).__name__}")
    return data
