"""Dataclass <-> JSON helpers shared by every stage that is saved to disk.

Loaders are forgiving in one direction only: unknown keys from a newer writer are ignored and
missing keys take the field's default (pyinstrument's ``Session.from_json`` habit), so an older
advisor can still read a newer run directory's common fields.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    """Turn dataclasses, tuples, paths and non-finite floats into plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value  # vocabularies (advisor._vocab) are written as their words
    if isinstance(value, float) and not math.isfinite(value):
        # NOTE: JSON has no NaN/inf; None keeps files valid for every reader.
        return None
    if hasattr(value, "item") and callable(value.item) and type(value).__module__ == "numpy":
        return to_jsonable(value.item())
    return value


def from_dict(cls: type[T], data: Any) -> T:
    """Build dataclass ``cls`` from ``data``, recursing into nested dataclass fields."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _coerce(hints.get(f.name, Any), data[f.name])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if value is None:
        return None
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value)
            except (TypeError, ValueError):
                continue
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value)
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v) for v in value)
        return tuple(value)
    if origin is list and isinstance(value, list):
        return [_coerce(args[0], v) for v in value] if args else list(value)
    if origin is dict and isinstance(value, dict):
        return {k: _coerce(args[1], v) for k, v in value.items()} if args else dict(value)
    if tp is Path and isinstance(value, str):
        return Path(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            return value  # NOTE: a word from a newer writer is kept as a plain string, not refused
    return value


def dump_json(obj: Any, path: Path) -> None:
    """Write ``obj`` as indented JSON atomically (temp file + rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
