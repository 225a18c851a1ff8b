"""Message templates: ``str.format``-style text filled with a finding's evidence, safely.

Only plain field names are allowed (``{data_loading_frac:.0%}``): no attribute access, no
indexing, no nested fields, so a rule file cannot reach into Python objects through a template.
Field names are declared metrics, or ``locations`` (the finding's top ``file:line`` places).

Format specs are Python's, plus three of ours:

* ``bool``: a 0/1 flag as ``True``/``False``;
* ``bytes``: a byte count in binary units (``18.4 MiB``);
* ``int``: a count rounded to a whole number with thousands separators;
* ``ms``: milliseconds, unit included, with the report's precision (``0.13 ms``, ``12.4 ms``).

A ``None`` value renders as ``n/a`` whatever the spec, so missing evidence never breaks a
message.

Optional segments: text between ``[[`` and ``]]`` is kept only when every field inside it is
known, and dropped whole otherwise, so a message can mention values only some runs have (the
DataLoader settings come from capture.json; a bare trace does not know them) without printing
``n/a``::

    Load batches in worker processes.[[ Main DataLoader: num_workers={dataloader_num_workers:int}.]]

* "Known" means the value is present and not None/NaN; inside a segment ``{locations}`` is
  known when the finding has at least one source location.
* The text inside is kept verbatim (the brackets go), so put the separating space or
  punctuation inside the segment, as above.
* Segments do not nest, must close, and must hold at least one field (a segment without one
  could never be dropped); ``[[`` and ``]]`` are reserved for this. A malformed segment fails
  at rule load like any other template error.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor._num import ms_text
from advisor.engine.condition import ConditionError, clean_value, did_you_mean

SPECIAL_FIELDS = ("locations",)
"""Template fields that are not metrics."""

_CUSTOM_SPECS = ("bool", "bytes", "int", "ms")
MAX_SPEC_NUMBER = 100
"""Largest width or precision a format spec may ask for: ``{x:>2500000000}`` would build a
2.5 GB string, so it is refused when the rule loads."""
_SPEC_NUMBERS = re.compile(r"\d+")
_SAMPLE = 0.5  # value used to validate a format spec at load time


_Part = tuple[str, str | None, str]
"""One parsed piece: literal text, then a field name (or None) and its format spec."""

_SEGMENT_MARKS = re.compile(r"(\[\[|\]\])")


@dataclass(frozen=True)
class _Segment:
    """A run of parts; an ``optional`` one is dropped when any of its fields is unknown."""

    parts: tuple[_Part, ...]
    optional: bool = False


@dataclass(frozen=True)
class Template:
    """A validated message template.

    Attributes:
        source: The template text.
        names: Metric names it reads, sorted (``locations`` excluded).
    """

    source: str
    names: tuple[str, ...]
    _segments: tuple[_Segment, ...]

    def render(self, values: Mapping[str, Any], locations: str = "") -> str:
        """Fill the template; ``locations`` is the text for a ``{locations}`` field.

        Optional ``[[...]]`` segments with an unknown field (None/NaN, or no locations) are
        left out whole; elsewhere an unknown value renders as ``n/a``.
        """
        out: list[str] = []
        for segment in self._segments:
            pieces: list[str] = []
            known = True
            for literal, field, spec in segment.parts:
                pieces.append(literal)
                if field is None:
                    continue
                if field == "locations":
                    known = known and bool(locations)
                    pieces.append(locations or "no source location recorded")
                    continue
                value = clean_value(values.get(field))
                known = known and value is not None
                pieces.append(format_value(value, spec))
            if known or not segment.optional:
                out.extend(pieces)
        return "".join(out)


def parse_template(text: Any, is_declared: Callable[[str], bool], known: Iterable[str] = ()) -> Template:
    """Parse and validate a message template.

    Raises:
        ConditionError: bad braces, a field that is not a plain declared name, a bad spec, or a
            malformed optional segment (unclosed, nested, stray ``]]``, or without a field).
    """
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("expected a non-empty message string")
    known = tuple(known)
    names: set[str] = set()
    segments: list[_Segment] = []
    chunk: list[str] = []
    optional = False
    for token in _SEGMENT_MARKS.split(text):
        if token == "[[":
            if optional:
                raise ConditionError("optional segments '[[...]]' cannot be nested")
            segments.append(_Segment(_parse_parts("".join(chunk), is_declared, known, names)))
            chunk, optional = [], True
        elif token == "]]":
            if not optional:
                raise ConditionError("']]' closes no optional segment (open one with '[[')")
            parts = _parse_parts("".join(chunk), is_declared, known, names)
            if not any(field is not None for _, field, _ in parts):
                inner = "".join(chunk)
                raise ConditionError(f"optional segment '[[{inner}]]' has no {{field}}, so nothing could drop it")
            segments.append(_Segment(parts, optional=True))
            chunk, optional = [], False
        else:
            chunk.append(token)
    if optional:
        raise ConditionError("optional segment '[[' is never closed with ']]'")
    segments.append(_Segment(_parse_parts("".join(chunk), is_declared, known, names)))
    kept = tuple(seg for seg in segments if seg.parts)
    return Template(source=text, names=tuple(sorted(names)), _segments=kept)


def _parse_parts(
    text: str, is_declared: Callable[[str], bool], known: tuple[str, ...], names: set[str]
) -> tuple[_Part, ...]:
    """Parse ``str.format`` fields in ``text``, validating each; adds metric names to ``names``."""
    try:
        pieces = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ConditionError(f"bad template: {exc}") from None
    parts: list[_Part] = []
    for literal, field, spec, conversion in pieces:
        if field is None:
            if literal:
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
            _check_spec_size(field, spec)
            try:
                if spec not in _CUSTOM_SPECS:
                    format(_SAMPLE, spec)
            except ValueError as exc:
                raise ConditionError(f"field {{{field}:{spec}}}: bad format spec ({exc})") from None
        elif spec:
            raise ConditionError(f"field {{{field}}} takes no format spec")
        parts.append((literal, field, spec))
    return tuple(parts)


def _check_spec_size(field: str, spec: str) -> None:
    """Refuse a width or precision above :data:`MAX_SPEC_NUMBER` before anything is formatted."""
    for number in _SPEC_NUMBERS.findall(spec):
        if len(number) > 3 or int(number) > MAX_SPEC_NUMBER:
            raise ConditionError(
                f"field {{{field}:{spec}}}: width or precision {number[:12]} is larger than {MAX_SPEC_NUMBER}"
            )


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
    if spec == "ms":
        return ms_text(float(value))
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
