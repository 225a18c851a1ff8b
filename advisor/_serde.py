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


def load_checked(cls: type[T], data: Any, where: str, redo: str) -> T:
    """Check ``data`` against ``cls`` (:func:`check_types`) and build it; a mismatch is an InputError.

    Args:
        cls: The dataclass to build.
        data: The parsed JSON document.
        where: The file it came from, named in the error.
        redo: What the user should do about a bad file (``re-create it with advisor sweep``).
    """
    from advisor.errors import InputError

    try:
        check_types(cls, data, cls.__name__)
    except TypeError as exc:
        raise InputError(f"{where}: {exc}; {redo}") from None
    return from_dict(cls, data)


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


def check_types(cls: Any, data: Any, where: str = "") -> None:
    """Check that ``data`` fits dataclass ``cls`` field by field, before :func:`from_dict` builds it.

    :func:`from_dict` keeps a value of the wrong type as it is (a newer writer's liberty), and
    the code that later reads the field then fails far from the cause. Loaders of files a user
    may have edited call this first. ``None`` is accepted anywhere (non-finite floats are saved
    as null); unknown keys are ignored, as :func:`from_dict` ignores them.

    Raises:
        TypeError: ``<field.path>: expected <type>, got <type>``.
    """
    _check(cls, data, where or getattr(cls, "__name__", "value"))


def _check(tp: Any, value: Any, where: str) -> None:
    if value is None or tp is Any:
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in args:
            try:
                _check(arg, value, where)
                return
            except TypeError as exc:
                errors.append(exc)
        raise errors[0] if errors else TypeError(f"{where}: unexpected value")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {_kind(value)}")
        hints = typing.get_type_hints(tp)
        for f in dataclasses.fields(tp):
            if f.name in value:
                _check(hints.get(f.name, Any), value[f.name], f"{where}.{f.name}")
        return
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected a list, got {_kind(value)}")
        inner = args[0] if args and (origin is list or (len(args) == 2 and args[1] is Ellipsis)) else Any
        for i, item in enumerate(value):
            _check(inner, item, f"{where}[{i}]")
        return
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {_kind(value)}")
        if len(args) == 2:
            for key, item in value.items():
                _check(args[1], item, f"{where}.{key}")
        return
    expected = {str: (str,), Path: (str,), bool: (bool,), int: (int,), float: (int, float)}.get(tp)
    if expected is None:
        return  # a type this checker does not know: from_dict keeps the value
    if not isinstance(value, expected):
        raise TypeError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {_kind(value)}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), type(value).__name__)


def dump_json(obj: Any, path: Path) -> None:
    """Write ``obj`` as indented JSON atomically (unique temp file + rename), so a crash never leaves half a file."""
    from advisor._files import write_text

    write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n", what="output folder")
