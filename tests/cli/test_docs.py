"""docs/rules.md is generated from the rule files and must be kept up to date (``make docs``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.cli.cmd_rules import _md_cell, _md_code, _md_text, rules_markdown
from advisor.engine.rules import default_rules, parse_rule
from advisor.engine.ruleset import RuleSet

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "rules.md"


def test_docs_rules_md_is_up_to_date() -> None:
    expected = rules_markdown(default_rules())
    actual = DOCS.read_text(encoding="utf-8") if DOCS.is_file() else ""
    if actual != expected:
        old, new = actual.splitlines(), expected.splitlines()
        line = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        pytest.fail(
            f"docs/rules.md is out of date with rules/ (first difference at line {line + 1}): run `make docs`",
            pytrace=False,
        )


@pytest.mark.e2e
def test_cli_markdown_format_is_the_same_text() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "advisor", "rules", "--format", "markdown"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout
    assert out == rules_markdown(default_rules())


def test_one_section_per_rule_with_every_part() -> None:
    text = rules_markdown(default_rules())
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    rules = list(default_rules())
    assert [s.split()[0] for s in sections] == [r.code for r in rules]
    for section, r in zip(sections, rules, strict=True):
        assert section.startswith(f"{r.code} {r.name}\n")
        for part in ("### When it fires", "### Message", "### Fixes and their safety", "### Why it matters",
                     "### Example", "Instead:", "### References"):
            assert part in section, (r.code, part)
        assert r.when.source in section
        for fix in r.fixes:
            assert f"- `{fix.id}`: {fix.safety} (" in section
        for ref in r.references:
            assert f"- <{ref}>" in section
        # the index links to this section with GitHub's heading anchor
        assert f"[{r.code}](#{r.code.lower()}-{r.name})" in text


def _rule(**overrides: object):  # type: ignore[no-untyped-def]
    data = {
        "code": "SY009",
        "name": "pipes-and-stars",
        "summary": "A | B with *stars* and <tags>",
        "category": "sync",
        "severity": "info",
        "status": "preview",
        "when": "sync_count >= 1",
        "impact": "0",
        "impact_basis": "none",
        "message": "{sync_count:int} calls",
        "fixes": [],
        "why": "Keep `a|b` code.\n- not a list\n1. not a list\n# not a heading\nA [link](x) & _emph_ text.",
        "example": "x = '```'\n",
        "instead": "y = 1\n",
        "references": ["https://example.com/a_b"],
        "locations": [],
    }
    data.update(overrides)
    return parse_rule(data, path="test")


def test_rule_text_is_escaped_as_plain_markdown() -> None:
    text = rules_markdown(RuleSet([_rule()]))
    assert "| pipes-and-stars | `sync` | `info` | none |" in text
    section = text.split("## SY009 pipes-and-stars", 1)[1]
    assert "A \\| B with \\*stars\\* and \\<tags\\>" in section
    assert "Keep `a\\|b` code." in section
    assert "\n\\- not a list\n1\\. not a list\n\\# not a heading\n" in section
    assert "A \\[link\\](x) \\& \\_emph\\_ text." in section
    # a fence longer than the backticks inside the example
    assert "````python\nx = '```'\n````" in section
    assert "Status: preview (runs with `--preview`)" in section


def test_markdown_helpers() -> None:
    assert _md_cell("a|b\nc") == "a\\|b c"
    assert _md_code("a`b") == "``a`b``"
    assert _md_code("x|y") == "`x\\|y`"
    assert _md_text("snake_case_name stays") == "snake_case_name stays"
    assert _md_text("0.43x and 1.2 M") == "0.43x and 1.2 M"
