"""Shared machinery for input specs: strict pydantic models and one-line validation errors."""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import types
import typing
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


def _model_at(cls: Any, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The spec class of the mapping at `loc` inside `cls` (through lists, tuples, dicts, Optional), or None."""

    def unwrap(t: Any, want_item: bool) -> Any:
        for _ in range(8):
            origin, args = typing.get_origin(t), typing.get_args(t)
            if origin is typing.Annotated:
                t = args[0]
            elif origin in (typing.Union, types.UnionType):
                inner = [a for a in args if a is not type(None)]
                t = next((a for a in inner if typing.get_origin(a) in (list, tuple, dict) or
                          (isinstance(a, type) and issubclass(a, BaseModel))), inner[0] if inner else None)
            elif want_item and origin in (list, tuple, dict):
                t, want_item = args[-1] if origin is dict else args[0], False
            else:
                return t
        return t

    t: Any = cls
    for part in loc:
        t = unwrap(t, isinstance(part, int))
        if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
            field = t.model_fields.get(part)
            if field is None:
                return None
            t = field.annotation
        elif isinstance(part, str) and typing.get_origin(t) is dict:
            t = typing.get_args(t)[-1]
    t = unwrap(t, False)
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


# Other programs' names for spec keys (Megatron-LM's arguments, Hugging Face configs): an unknown key with one of
# these names says `did you mean` the spec's key, where its mapping takes that key.
KEY_ALIASES = {
    "num_query_groups": "num_kv_heads", "num_key_value_heads": "num_kv_heads", "kv_channels": "head_dim",
    "max_position_embeddings": "seq_length", "seq_len": "seq_length", "num_hidden_layers": "num_layers",
    "intermediate_size": "ffn_hidden_size", "normalization": "norm", "position_embedding_type": "position_embedding",
    "swiglu": "gated_mlp", "num_moe_experts": "num_experts", "num_local_experts": "num_experts",
    "tie_word_embeddings": "tied_embeddings", "untie_embeddings_and_output_weights": "tied_embeddings",
    "n_layer": "num_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads", "n_positions": "seq_length",
}


def _unknown_key_hint(cls: Any, errors: list[dict[str, Any]], extra: dict[str, Any]) -> str:
    """' (did you mean X?)' for an unknown key close to a key its mapping takes (a missing one first), or another
    program's name for one (KEY_ALIASES), or ''."""
    loc = tuple(extra["loc"])
    key = str(loc[-1])
    missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == loc[:-1]]
    model = _model_at(cls, loc[:-1]) if cls is not None else None
    valid = list(model.model_fields) if model is not None else []
    alias = KEY_ALIASES.get(key.lower().replace("-", "_"))
    if alias is not None and alias in valid:
        return f" (did you mean {alias}?)"
    close = difflib.get_close_matches(key, missing, n=1, cutoff=0.6) or difflib.get_close_matches(key, valid, n=1,
                                                                                                  cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def format_validation_error(source: str, err: ValidationError, data: Any, cls: Any = None) -> str:
    """One line: `source: field.path = value: rule` for the first error (and a count of the rest).

    An unknown key goes first when a key of the same mapping is missing: a misspelt key gives both errors, and the
    missing one alone would hide the cause. An unknown key near a valid one says `did you mean`."""
    errors = err.errors(include_url=False)
    first = errors[0]
    missing_at = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "missing"}
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if first["type"] == "missing":
        first = next((e for e in extra if tuple(e["loc"][:-1]) in missing_at), first)
    loc = tuple(first["loc"])
    rule = first["msg"]
    if rule.startswith("Value error, "):
        rule = rule[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        rule = "unknown key" + _unknown_key_hint(cls, errors, first)
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
    others = [e for e in errors if e is not first]
    if 0 < len(others) <= 3:  # few: each named (one line), so that fixing one does not reveal the next
        line += "; also " + "; ".join(_short(e, data) for e in others)
    elif others:
        line += f" (and {len(others)} more)"
    return line


def _short(error: dict[str, Any], data: Any) -> str:
    """`field.path = value: rule` of one more error (format_validation_error's second and later errors)."""
    loc = tuple(error["loc"])
    rule = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return f"{_field_path(loc)}: unknown key"
    if error["type"] == "missing":
        return f"{_field_path(loc)}: missing (required)"
    value = error.get("input", _value_at(data, loc))
    shown = f"(a {'mapping' if isinstance(value, dict) else 'list'})" if isinstance(value, (dict, list)) else repr(value)
    return f"{_field_path(loc)} = {shown}: {rule}"


def validate(cls: type[S], data: Any, source: str) -> S:
    """Validate `data` as `cls`, raising SpecError with a one-line message."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(source, err, data, cls)) from None


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


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping (PyYAML's safe_load keeps the last silently)."""

    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        super().__init__(f"duplicate key {key!r} (lines {first_line} and {second_line}): a key may appear once in "
                         "a mapping; keep one")
        self.key, self.first_line, self.second_line = key, first_line, second_line


class StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key repeated in one mapping, and reads 2e10 as a number (YAML 1.2's float
    grammar; YAML 1.1, which PyYAML follows, wants a dot, 2.0e10, and reads 2e10 as text)."""


def _unique_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; an explicit key may override those
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping says so
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise DuplicateKeyError(key, first, line)
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str, source: str, *, error: type[Exception] = SpecError) -> Any:
    """YAML text as Python data (StrictLoader), or `error` with one line naming the source: a duplicate key names
    the key and both lines."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except DuplicateKeyError as err:
        raise error(f"{source}: {err}") from None
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None)
        if problem and mark is not None and problem not in first:
            first = f"{first.rstrip(':')}: {problem}"
        raise error(f"{source}: not valid YAML: {where}{first}") from None
    except RecursionError:
        raise error(f"{source}: not valid YAML: nested too deeply") from None


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}: a key may appear once in an object; keep one")
        out[key] = value
    return out


def read_mapping(path: Path, *, limit_bytes: int = MAX_SPEC_BYTES, kind: str | None = None,
                 expected: str = "a mapping at the top level") -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, raising SpecError (never a traceback) when it cannot be read.
    kind: "JSON" or "YAML" whatever the suffix (default: JSON for .json, else YAML)."""
    text = read_text(path, limit_bytes=limit_bytes)
    kind = kind or ("JSON" if path.suffix.lower() == ".json" else "YAML")
    if kind != "JSON":
        data = load_yaml(text, str(path))
    else:
        try:
            data = json.loads(text, object_pairs_hook=_unique_json_object)
        except json.JSONDecodeError as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise SpecError(f"{path}: not valid {kind}: {first}") from None
        except ValueError as err:  # a duplicate key (_unique_json_object)
            raise SpecError(f"{path}: {err}") from None
        except RecursionError:
            raise SpecError(f"{path}: not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected {expected}, got {type(data).__name__}")
    return data
