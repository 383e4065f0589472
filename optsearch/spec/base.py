"""Shared machinery for input specs: strict pydantic models and one-line validation errors."""

from __future__ import annotations

import json
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
    else:
        shown = value if not isinstance(value, (dict, list)) else type(value).__name__
        line = f"{source}: {_field_path(loc)} = {shown!r}: {rule}"
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


def read_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, raising SpecError (never a traceback) when it cannot be read."""
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SpecError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
