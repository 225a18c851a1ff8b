"""In-source suppression: ``# advisor: ignore[...]`` comments over a Diagnosis built by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.engine.evaluate import choose_primary
from advisor.engine.model import Diagnosis, Finding, Location
from advisor.engine.rules import default_rules
from advisor.engine.suppress import (
    IgnoreComment,
    SourceCache,
    apply_inline_ignores,
    parse_ignore_comments,
    suppress_findings,
)

RULES = default_rules()


def finding(code: str, *locs: tuple[str, int], impact: float = 0.3) -> Finding:
    rule = RULES.get(code)
    assert rule is not None
    return Finding(
        code=code,
        name=rule.name,
        category=rule.category,
        severity=rule.severity,
        message="m",
        evidence={},
        locations=tuple(Location(file=f, line=n) for f, n in locs),
        impact_frac=impact,
    )


def diagnosis(*findings: Finding) -> Diagnosis:
    return Diagnosis(findings=findings, primary=choose_primary(findings), breakdown={}, warnings=("earlier",))


def write(path: Path, lines: dict[int, str], total: int = 20) -> Path:
    """A script whose line N is ``lines[N]`` (others are plain statements)."""
    body = [lines.get(i, f"x{i} = {i}") for i in range(1, total + 1)]
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    return path


# --- parsing -----------------------------------------------------------------------------


def test_parse_codes_prefixes_and_bare() -> None:
    src = "\n".join(
        [
            "a = 1  # advisor: ignore[SY001]",
            "b = 2  # advisor: ignore[sy001, DL]",
            "c = 3  # advisor: ignore",
            "d = 4  # Advisor:Ignore[ME002]",
            "e = 5  # type: ignore  # advisor: ignore[HD]",
            "f = 6  # advisor: ignored is not a directive",
            "g = 7  # advisor: ignore[]",
        ]
    )
    found = parse_ignore_comments(src)
    assert found[1] == IgnoreComment(line=1, codes=("SY001",))
    assert found[2].codes == ("SY001", "DL")
    assert found[3] == IgnoreComment(line=3)
    assert found[4].codes == ("ME002",)
    assert found[5].codes == ("HD",)
    assert 6 not in found
    assert found[7].empty_list and not found[7].matches("SY001")


def test_directive_inside_a_string_is_not_a_comment() -> None:
    src = 's = "# advisor: ignore[SY001]"\nt = 1  # advisor: ignore[DL001]\n'
    assert set(parse_ignore_comments(src)) == {2}


def test_unparseable_file_still_has_its_directives() -> None:
    src = "def broken(:\n    x = (  # advisor: ignore[SY001]\n"
    assert parse_ignore_comments(src)[2].codes == ("SY001",)


def test_two_directives_on_one_line_merge() -> None:
    src = "a = 1  # advisor: ignore[SY001]  # advisor: ignore[DL]\n"
    assert parse_ignore_comments(src)[1].codes == ("SY001", "DL")
    src = "a = 1  # advisor: ignore[SY001]  # advisor: ignore\n"
    assert parse_ignore_comments(src)[1].codes == ()


def test_matching_codes_prefixes_aliases() -> None:
    assert IgnoreComment(1, ("SY",)).matches("SY001")
    assert IgnoreComment(1, ("SY00",)).matches("SY002")
    assert not IgnoreComment(1, ("SY001",)).matches("SY002")
    assert IgnoreComment(1, ("XX999",)).matches("SY001", aliases=("XX999",))
    assert IgnoreComment(1).matches("CM004")


# --- suppression -------------------------------------------------------------------------


def test_single_location_suppressed_and_counted(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", {12: "    loss.item()  # advisor: ignore[SY001]"})
    d = diagnosis(finding("SY001", (str(script), 12), impact=0.4), finding("DL001", (str(script), 3), impact=0.2))
    out = apply_inline_ignores(d, [tmp_path])
    assert [f.code for f in out.findings] == ["DL001"]
    # the primary is chosen again from what remains
    assert d.primary is not None and d.primary.category == "sync"
    assert out.primary is not None and out.primary.category == "data_loading"
    assert out.warnings == ("earlier",)  # the count is information: a note, not a warning
    (note,) = out.notes
    assert note.startswith("1 finding suppressed by `# advisor: ignore` comments: SY001 at ")
    assert "train.py:12" in note and "--no-inline-ignores" in note


def test_relative_names_resolve_in_search_dirs(tmp_path: Path) -> None:
    write(tmp_path / "train.py", {5: "y = f(x)  # advisor: ignore"})
    d = diagnosis(finding("SY001", ("train.py", 5)))
    assert apply_inline_ignores(d, []).findings == d.findings  # nowhere to look
    out = apply_inline_ignores(d, [tmp_path / "elsewhere", tmp_path])
    assert out.findings == () and out.primary is None
    assert "SY001 at train.py:5" in out.notes[-1]


def test_every_readable_location_must_be_covered(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", {4: "a()  # advisor: ignore[SY001]", 9: "b()  # advisor: ignore[SY]"})
    both = finding("SY001", (str(script), 4), (str(script), 9))
    partial = finding("SY001", (str(script), 4), (str(script), 10))
    wrong_code = finding("SY002", (str(script), 4))
    result = suppress_findings([both, partial, wrong_code], SourceCache([tmp_path]), RULES)
    assert [s.finding for s in result.suppressed] == [both]
    assert result.suppressed[0].locations == both.locations
    assert list(result.kept) == [partial, wrong_code]
    note = apply_inline_ignores(diagnosis(both), [tmp_path]).notes[-1]
    assert "SY001 at " in note and "train.py:4 and 1 more line (--no" in note


def test_unreadable_locations_neither_suppress_nor_keep(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", {4: "a()  # advisor: ignore[SY001]"})
    elsewhere = "/home/someone/on/another/machine/train.py"
    mixed = finding("SY001", (str(script), 4), (elsewhere, 4), ("<string>", 1))
    only_missing = finding("SY001", (elsewhere, 4))
    no_location = finding("SY001")
    out = apply_inline_ignores(diagnosis(mixed, only_missing, no_location), [tmp_path])
    assert list(out.findings) == [only_missing, no_location]


def test_no_comment_returns_the_same_diagnosis(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", {})
    d = diagnosis(finding("SY001", (str(script), 3)))
    assert apply_inline_ignores(d, [tmp_path]) is d


def test_unknown_code_warns_once_with_file_line_and_suggestion(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    script = write(
        tmp_path / "train.py",
        {3: "a()  # advisor: ignore[SY01]", 7: "b()  # advisor: ignore[ZZ9, SY002]", 8: "c()  # advisor: ignore[]"},
    )
    # two findings at the same commented line: still one warning per code
    d = diagnosis(finding("SY001", (str(script), 3)), finding("SY002", (str(script), 3)))
    out = apply_inline_ignores(d, [tmp_path])
    assert len(out.findings) == 2  # SY01 matches nothing
    warnings = [w for w in out.warnings if w != "earlier"]
    assert warnings == [
        "unknown rule code 'SY01' in `# advisor: ignore` at train.py:3 (did you mean 'SY001' or 'SY002' or 'SY'?)",
        "unknown rule code 'ZZ9' in `# advisor: ignore` at train.py:7",
        "`# advisor: ignore[]` at train.py:8 names no rule code; it suppresses nothing",
    ]


def test_files_are_read_once_and_never_written(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", {4: "a()  # advisor: ignore[SY001]"})
    before = (script.read_bytes(), os.stat(script).st_mtime_ns)
    cache = SourceCache([tmp_path])
    d = diagnosis(finding("SY001", (str(script), 4)), finding("SY001", ("train.py", 4)))
    first = apply_inline_ignores(d, sources=cache)
    assert first.findings == ()
    assert (script.read_bytes(), os.stat(script).st_mtime_ns) == before
    script.unlink()  # a second lookup would now fail: the cache must answer
    assert cache.get(str(script)) is not None and cache.get("train.py") is not None
    assert len(cache.files()) == 1


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary\x00", b"# -*- coding: nope -*-\nx = 1\n"])
def test_undecodable_files_are_skipped_silently(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "weird.py"
    bad.write_bytes(content)
    d = diagnosis(finding("SY001", (str(bad), 1)))
    assert apply_inline_ignores(d, [tmp_path]) is d


def test_encoding_cookie_is_honoured(tmp_path: Path) -> None:
    script = tmp_path / "latin.py"
    script.write_bytes("# -*- coding: latin-1 -*-\ns = 'caf\xe9'  # advisor: ignore[SY001]\n".encode("latin-1"))
    assert apply_inline_ignores(diagnosis(finding("SY001", (str(script), 2))), [tmp_path]).findings == ()
