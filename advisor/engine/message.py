"""Message templates: ``str.format``-style text filled with a finding's evidence, safely.

Only plain field names are allowed (``{data_loading_frac:.0%}``): no attribute access, no
indexing, no nested fields, so a rule file cannot reach into Python objects through a template.
Field names are declared metrics, or ``locations`` (the finding's top ``file:line`` places).

Format specs are Python's, plus three of ours:

* ``bool``: a 0/1 flag as ``True``/``False``;
* ``bytes``: a byte count in binary units (``18.4 MiB``);
* ``int``: a count rounded to a whole number with thousands separators.

A ``None`` value renders as ``n/a`` whatever the spec, so missing evidence never breaks a
message.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor.engine.condition import ConditionError, clean_value, did_you_mean

SPECIAL_FIELDS = ("locations",)
"""Template fields that are not metrics."""

_CUSTOM_SPECS = ("bool", "bytes", "int")
_SAMPLE = 0.5  # value used to validate a format spec at load time


@dataclass(frozen=True)
class Template:
    """A validated message template.

    Attributes:
        source: The template text.
        names: Metric names it reads, sorted (``locations`` excluded).
    """

    source: str
    names: tuple[str, ...]
    _parts: tuple[tuple[str, str | None, str], ...]

    def render(self, values: Mapping[str, Any], locations: str = "") -> str:
        """Fill the template; ``locations`` is the text for a ``{locations}`` field."""
        out: list[str] = []
        for literal, field, spec in self._parts:
            out.append(literal)
            if field is None:
                continue
            if field == "locations":
                out.append(locations or "no source location recorded")
                continue
            out.append(format_value(clean_value(values.get(field)), spec))
        return "".join(out)


def parse_template(text: Any, is_declared: Callable[[str], bool], known: Iterable[str] = ()) -> Template:
    """Parse and validate a message template.

    Raises:
        ConditionError: bad braces, a field that is not a plain declared name, or a bad spec.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("expected a non-empty message string")
    known = tuple(known)
    try:
        pieces = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ConditionError(f"bad template: {exc}") from None
    parts: list[tuple[str, str | None, str]] = []
    names: set[str] = set()
    for literal, field, spec, conversion in pieces:
        if field is None:
            parts.append((literal, None, ""))
            continue
        if conversion:
            raise ConditionError(f"field {{{field}!{conversion}}}: conversions are not allowed")
        if not field.isidentifier() or field.startswith("_"):
            raise ConditionError(
                f"field {{{field}}} is not allowed (plain metric names only, no '.', '[' or '_x')"
            )
        spec = spec or ""
        if "{" in spec or "}" in spec:
            raise ConditionError(f"field {{{field}}}: nested fields are not allowed")
        if field not in SPECIAL_FIELDS:
            if not is_declared(field):
                raise ConditionError(f"unknown metric {field!r}{did_you_mean(field, known)}")
            names.add(field)
            try:
                if spec not in _CUSTOM_SPECS:
                    format(_SAMPLE, spec)
            except ValueError as exc:
                raise ConditionError(f"field {{{field}:{spec}}}: bad format spec ({exc})") from None
        elif spec:
            raise ConditionError(f"field {{{field}}} takes no format spec")
        parts.append((literal, field, spec))
    return Template(source=text, names=tuple(sorted(names)), _parts=tuple(parts))


def format_value(value: Any, spec: str) -> str:
    """Format one evidence value with a Python or custom spec; ``None`` is ``n/a``."""
    if value is None:
        return "n/a"
    if spec == "bool":
        return "True" if value else "False"
    if spec == "bytes":
        return human_bytes(float(value))
    if spec == "int":
        return f"{round(float(value)):,d}"
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        # NOTE: a rank or count may arrive as a string or an int where the spec expects a
        # float; show the raw value rather than failing the whole diagnosis.
        return str(value)


def human_bytes(n: float) -> str:
    """Format a byte count in binary units, e.g. ``18.4 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
