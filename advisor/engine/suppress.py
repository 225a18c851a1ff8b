"""In-source suppression: ``# advisor: ignore[SY001]`` on a line hides findings that point there.

The comment follows ruff's ``# noqa: E501`` (https://docs.astral.sh/ruff/linter/#error-suppression):

* ``# advisor: ignore[SY001]`` or ``# advisor: ignore[SY001, DL]`` names rule codes, former codes
  (aliases) or code prefixes, comma-separated; a bare ``# advisor: ignore`` covers every rule.
* The directive may share a comment with others (``# type: ignore  # advisor: ignore[SY]``);
  ``advisor: ignore`` is matched case-insensitively, as ruff matches ``noqa``.
* It applies to the physical line it is written on.

A finding is suppressed when it has at least one location in a file that can be read and every
such location is covered by a matching comment. Locations in files that cannot be read (a trace
recorded on another machine names paths that do not exist here) neither suppress nor keep a
finding; a finding with no readable location, or no location at all, is never suppressed.

Suppressed findings are not lost: :func:`apply_inline_ignores` returns a new
:class:`~advisor.engine.model.Diagnosis` without them, whose ``warnings`` say which findings the
comments hid (they become the report's notes), and a comment naming an unknown code adds one
``unknown rule code ...`` warning with its ``file:line`` and the closest codes.

Source files are only ever read, each at most once per call (:class:`SourceCache`).
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from advisor._paths import display_path
from advisor.engine.condition import did_you_mean
from advisor.engine.evaluate import choose_primary
from advisor.engine.model import Diagnosis, Finding, Location
from advisor.engine.rules import default_rules
from advisor.engine.ruleset import GROUPS, RuleSet

DIRECTIVE_RE = re.compile(r"#\s*advisor\s*:\s*ignore(?![\w-])(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
"""One ``# advisor: ignore`` or ``# advisor: ignore[CODES]`` directive inside a comment."""

SUPPRESSION_NOTE = "suppressed by `# advisor: ignore` comments"
"""Text in the note that counts suppressed findings (a report can tell it from real warnings)."""

MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""Files larger than this are not scanned (no training script is; a data file named by a frame may be)."""


@dataclass(frozen=True)
class IgnoreComment:
    """An ``# advisor: ignore`` directive on one line.

    Attributes:
        line: 1-based line number.
        codes: Codes or prefixes as written, upper-cased; empty for a bare directive (every rule).
        empty_list: True for ``ignore[]``, which names nothing and so suppresses nothing.
    """

    line: int
    codes: tuple[str, ...] = ()
    empty_list: bool = False

    def matches(self, code: str, aliases: Sequence[str] = ()) -> bool:
        """Tell whether this directive covers rule ``code`` (or one of its former codes)."""
        if self.empty_list:
            return False
        if not self.codes:
            return True
        return any(sel == "ALL" or code.startswith(sel) or sel in aliases for sel in self.codes)


@dataclass(frozen=True)
class SourceFile:
    """The ignore directives of one readable source file.

    Attributes:
        path: The file that was read.
        comments: Line number -> its directive.
    """

    path: Path
    comments: dict[int, IgnoreComment]


@dataclass(frozen=True)
class SuppressedFinding:
    """A finding hidden by comments, with the commented locations that hid it."""

    finding: Finding
    locations: tuple[Location, ...]


@dataclass(frozen=True)
class SuppressionResult:
    """What :func:`suppress_findings` decided.

    Attributes:
        kept: Findings still reported, in their original order.
        suppressed: Findings hidden by comments, in their original order.
        warnings: Problems with the comments themselves (unknown codes, empty lists).
    """

    kept: tuple[Finding, ...]
    suppressed: tuple[SuppressedFinding, ...]
    warnings: tuple[str, ...]


def parse_ignore_comments(source: str) -> dict[int, IgnoreComment]:
    """Find the ``# advisor: ignore`` directives in Python source text.

    Comments are found with :mod:`tokenize`, so a directive inside a string literal does not
    count; a file that does not tokenize (a syntax error, a half-edited file) falls back to a
    per-line search, because a broken script still deserves its suppressions.

    Args:
        source: The file's text.

    Returns:
        Line number -> directive (several directives on one line are merged).
    """
    found: dict[int, IgnoreComment] = {}
    for line, comment in _comments(source):
        for match in DIRECTIVE_RE.finditer(comment):
            found[line] = _merge(found.get(line), _directive(line, match.group("codes")))
    return found


class SourceCache:
    """Reads source files on demand, at most once each, and remembers their directives.

    A missing, unreadable, over-large or undecodable file is remembered as None, silently:
    traces often name files from another machine or from installed packages.

    Args:
        search_dirs: Folders that relative file names (the profiler records bare base names
            such as ``train.py``) are looked up in, first match wins.
    """

    def __init__(self, search_dirs: Iterable[str | Path] = ()) -> None:
        self.search_dirs = tuple(Path(d) for d in search_dirs)
        self._by_name: dict[str, SourceFile | None] = {}
        self._by_path: dict[Path, SourceFile | None] = {}

    def get(self, file: str) -> SourceFile | None:
        """Return the directives of ``file`` as a finding names it, or None when it cannot be read."""
        if file not in self._by_name:
            path = self._resolve(file)
            self._by_name[file] = self._read(path) if path is not None else None
        return self._by_name[file]

    def files(self) -> tuple[SourceFile, ...]:
        """Every file read so far that could be read, sorted by path."""
        return tuple(sorted((f for f in self._by_path.values() if f is not None), key=lambda f: str(f.path)))

    def _resolve(self, file: str) -> Path | None:
        if not file or file.startswith("<"):
            return None
        path = Path(file).expanduser()
        candidates = [path] if path.is_absolute() else [d / path for d in self.search_dirs]
        for candidate in candidates:
            try:
                if candidate.is_file():
                    return candidate.resolve()
            except OSError:
                continue
        return None

    def _read(self, path: Path) -> SourceFile | None:
        if path in self._by_path:
            return self._by_path[path]
        result: SourceFile | None = None
        try:
            if path.stat().st_size <= MAX_SOURCE_BYTES:
                # NOTE: read-only, and decoded by the file's own encoding cookie (PEP 263).
                with tokenize.open(path) as fh:
                    result = SourceFile(path=path, comments=parse_ignore_comments(fh.read()))
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
            result = None
        self._by_path[path] = result
        return result


def suppress_findings(
    findings: Sequence[Finding], sources: SourceCache, ruleset: RuleSet | None = None
) -> SuppressionResult:
    """Split findings into kept and suppressed by the comments at their locations (module doc).

    Args:
        findings: The engine's findings.
        sources: Where the comments are read from.
        ruleset: Known codes and aliases, for matching former codes and warning about unknown
            ones (None: the default rules).
    """
    if ruleset is None:
        ruleset = default_rules()
    aliases_of: dict[str, list[str]] = {}
    for alias, code in ruleset.aliases.items():
        aliases_of.setdefault(code, []).append(alias)
    kept: list[Finding] = []
    suppressed: list[SuppressedFinding] = []
    for finding in findings:
        readable: list[tuple[Location, SourceFile]] = []
        for loc in finding.locations:
            source = sources.get(loc.file)
            if source is not None:
                readable.append((loc, source))
        covering = [
            (loc, src)
            for loc, src in readable
            if (c := src.comments.get(loc.line)) is not None and c.matches(finding.code, aliases_of.get(finding.code, ()))
        ]
        if readable and len(covering) == len(readable):
            suppressed.append(SuppressedFinding(finding, tuple(loc for loc, _ in covering)))
        else:
            kept.append(finding)
    # NOTE: every directive in the files read is checked, not only those at a finding's line:
    # a typo in a code is exactly what makes a comment miss the line it was written for.
    warnings = [
        w
        for src in sources.files()
        for _, comment in sorted(src.comments.items())
        for w in _check_codes(src.path, comment, ruleset)
    ]
    return SuppressionResult(tuple(kept), tuple(suppressed), tuple(warnings))


def apply_inline_ignores(
    diagnosis: Diagnosis,
    search_dirs: Iterable[str | Path] = (),
    ruleset: RuleSet | None = None,
    sources: SourceCache | None = None,
) -> Diagnosis:
    """Return ``diagnosis`` without the findings that ``# advisor: ignore`` comments cover.

    The primary bottleneck is chosen again from the findings that remain, and the diagnosis's
    ``notes`` gain one line counting what was hidden (``2 findings suppressed by ...``) and its
    ``warnings`` any problem with the comments (an unknown code). A diagnosis that no comment touches is returned as is.

    Args:
        diagnosis: The rule engine's output.
        search_dirs: Folders that relative file names are looked up in (e.g. the working
            directory and the script's folder).
        ruleset: Known codes (None: the default rules).
        sources: A cache to read through (None: a new one over ``search_dirs``).
    """
    if not any(f.locations for f in diagnosis.findings):
        return diagnosis
    result = suppress_findings(diagnosis.findings, sources or SourceCache(search_dirs), ruleset)
    if not result.suppressed and not result.warnings:
        return diagnosis
    notes = (suppression_note(result.suppressed),) if result.suppressed else ()
    primary = choose_primary(result.kept) if result.suppressed else diagnosis.primary
    return replace(
        diagnosis,
        findings=result.kept,
        primary=primary,
        warnings=(*diagnosis.warnings, *result.warnings),
        notes=(*diagnosis.notes, *notes),
    )


def suppression_note(suppressed: Sequence[SuppressedFinding]) -> str:
    """One line for the report's notes: ``2 findings suppressed by ...: SY001 at train.py:42, ...``."""
    count = len(suppressed)
    items = []
    for item in suppressed:
        first = item.locations[0]
        more = len(item.locations) - 1
        extra = f" and {more} more line{'s' if more > 1 else ''}" if more else ""
        line = f":{first.line}" if first.line else ""
        items.append(f"{item.finding.code} at {display_path(first.file)}{line}{extra}")
    noun = "finding" if count == 1 else "findings"
    return (
        f"{count} {noun} {SUPPRESSION_NOTE}: {', '.join(items)} "
        "(--no-inline-ignores shows them)"
    )


def _comments(source: str) -> list[tuple[int, str]]:
    """(line, comment text) of every comment; per-line text when the source does not tokenize."""
    if "advisor" not in source.lower():
        return []  # NOTE: the common case; no need to tokenize a file without the word
    try:
        return [
            (tok.start[0], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        return [(i, line[line.index("#"):]) for i, line in enumerate(source.splitlines(), 1) if "#" in line]


def _directive(line: int, codes: str | None) -> IgnoreComment:
    if codes is None:
        return IgnoreComment(line=line)
    parts = tuple(dict.fromkeys(c.strip().upper() for c in codes.split(",") if c.strip()))
    return IgnoreComment(line=line, codes=parts, empty_list=not parts)


def _merge(old: IgnoreComment | None, new: IgnoreComment) -> IgnoreComment:
    """Merge two directives on one line: a bare one covers everything."""
    if old is None or new.empty_list:
        return old or new
    if old.empty_list:
        return new
    if not old.codes or not new.codes:
        return IgnoreComment(line=new.line)
    return IgnoreComment(line=new.line, codes=tuple(dict.fromkeys((*old.codes, *new.codes))))


def _check_codes(path: Path, comment: IgnoreComment, ruleset: RuleSet) -> list[str]:
    """Warnings for a directive: codes that match no rule (with close matches), empty lists."""
    where = f"{display_path(str(path))}:{comment.line}"
    if comment.empty_list:
        return [f"`# advisor: ignore[]` at {where} names no rule code; it suppresses nothing"]
    known = [*ruleset.codes, *ruleset.aliases]
    out = []
    for sel in comment.codes:
        if sel == "ALL" or sel in ruleset.aliases or any(code.startswith(sel) for code in ruleset.codes):
            continue
        hint = did_you_mean(sel, [*known, *GROUPS])
        out.append(f"unknown rule code {sel!r} in `# advisor: ignore` at {where}{hint}")
    return out
