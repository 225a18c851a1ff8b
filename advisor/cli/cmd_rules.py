"""``advisor rules`` (list the rules) and ``advisor rule CODE`` (explain one, ruff's template).

Both read the same rule files the engine evaluates, so the documentation cannot drift from
the behaviour.
"""

from __future__ import annotations

import json
import re
import sys

import click

from advisor import api
from advisor._terminal import printable
from advisor.api import Rule, RuleSet

RULES_EPILOG = """\b
Examples:
  advisor rules
  advisor rules --format json
  advisor rules --format markdown > docs/rules.md
  advisor rule DL001
  advisor rule --all --format json
"""


def _ruleset() -> RuleSet:
    return api.rule_set()


@click.command(epilog=RULES_EPILOG)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="markdown: the full rule reference (docs/rules.md, written by `make docs`).",
)
def rules(fmt: str) -> int:
    """List every rule: code, name, category, severity, fixes."""
    ruleset = _ruleset()
    if fmt == "markdown":
        # NOTE: the one door (advisor._terminal): a rule's text printed raw ESC/BEL here (issue #30 campaign)
        click.echo(printable(rules_markdown(ruleset)), nl=False)
        return 0
    if fmt == "json":
        rows = [
            {
                "code": r.code,
                "name": r.name,
                "category": r.category,
                "severity": r.severity,
                "status": r.status,
                "summary": r.summary,
                "fixes": [{"id": f.id, "safety": f.safety} for f in r.fixes],
            }
            for r in ruleset
        ]
        click.echo(json.dumps(rows, indent=2))
        return 0
    _print_table(list(ruleset))
    return 0


@click.command(epilog=RULES_EPILOG)
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="Explain every rule.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rule(code: str | None, show_all: bool, fmt: str) -> int:
    """Explain one rule (what it detects, why, example -> instead, fix safety, references)."""
    from advisor.errors import UsageError

    ruleset = _ruleset()
    if show_all == (code is not None):
        raise UsageError("give one rule code (e.g. `advisor rule DL001`) or --all")
    chosen = list(ruleset) if show_all else [ruleset.lookup(code or "")]
    if fmt == "json":
        docs = [r.doc() for r in chosen]
        click.echo(json.dumps(docs if show_all else docs[0], indent=2))
        return 0
    click.echo(printable("\n\n".join(explain(r) for r in chosen)))
    return 0


def explain(r: Rule) -> str:
    """Render the rule's documentation as plain text (Markdown-friendly), in ruff's order."""
    fixes = (
        "\n".join(f"- `{f.id}` ({f.safety}{': keeps numerics' if f.safety == 'safe' else ': may change numerics or memory'})" for f in r.fixes)
        if r.fixes
        else "No automatic fix: the change is in your code (see Instead)."
    )
    aliases = f"\nAliases: {', '.join(r.aliases)}" if r.aliases else ""
    preview = " (preview: needs --preview)" if r.status == "preview" else ""
    return "\n".join(
        [
            f"# {r.name} ({r.code}){preview}",
            "",
            f"Category: {r.category}    Severity: {r.severity}    Status: {r.status}{aliases}",
            "",
            "## What it detects",
            r.summary,
            "",
            f"Fires when: `{r.when.source}`",
            f"Recoverable share of the step ({r.impact_basis}): `{r.impact.source}`",
            "",
            "## Why it matters",
            r.why.strip(),
            "",
            "## Example",
            "```python",
            r.example.rstrip(),
            "```",
            "",
            "Instead:",
            "```python",
            r.instead.rstrip(),
            "```",
            "",
            "## Fix and its safety",
            fixes,
            "",
            "## References",
            *(f"- {ref}" for ref in r.references),
        ]
    )


def _print_table(rows: list[Rule]) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(show_lines=False)
        for col in ("code", "name", "category", "severity", "fixes"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.code, r.name, r.category, r.severity, _fix_text(r))
        Console().print(table)
        return
    # NOTE: plain aligned columns when piped, so `advisor rules | grep SY` stays greppable.
    header = ("code", "name", "category", "severity", "fixes")
    data = [(r.code, r.name, r.category, r.severity, _fix_text(r)) for r in rows]
    widths = [max(len(str(row[i])) for row in (header, *data)) for i in range(len(header) - 1)]
    for row in (header, *data):
        click.echo("  ".join(str(cell).ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1])


def _fix_text(r: Rule) -> str:
    return ", ".join(f"{f.id} ({f.safety})" for f in r.fixes) or "-"


DOCS_HEADER = """\
<!-- Generated from rules/<category>/<CODE>.yaml by `advisor rules --format markdown`.
     Do not edit: change the rule files and run `make docs`. -->

# Rule reference

Every rule advisor evaluates, generated from the same YAML files the engine loads. Select or
ignore rules by code or prefix (`--select SY`, `--ignore DL002`, `[tool.advisor]` in
pyproject.toml), or suppress a finding on one line with `# advisor: ignore[CODE]`.
Fix safety: *safe* fixes keep the numerical result; *unsafe* ones may change numerics or
memory behaviour and run only with `--unsafe-fixes`.
"""

# NOTE: an underscore inside a word (grad_accumulation.py) never starts emphasis in CommonMark,
# so only the others are escaped; that keeps the generated file readable as plain text.
_MD_SPECIAL = re.compile(r"([\\*\[\]<>|&~`]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# Line starts that would turn prose into a list, heading or setext underline.
_MD_LINE_START = re.compile(r"^([ \t]*)([-+*]|#{1,6}|\d+[.)])(?=[ \t]|$)|^([ \t]*)([=-]+[ \t]*)$", re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def rules_markdown(ruleset: RuleSet) -> str:
    """Render the whole rule reference as Markdown (``docs/rules.md``): an index, then one section per rule.

    Text taken from the rule files is escaped so it renders as written: Markdown punctuation
    is backslash-escaped (``|`` included, for table cells), except inside the backtick code
    spans the rule authors write on purpose; code goes into fences longer than any backtick
    run it holds. The output has no date or version, so it only changes when a rule does.
    """
    out = [DOCS_HEADER, "| code | name | category | severity | fixes |", "| --- | --- | --- | --- | --- |"]
    for r in ruleset:
        fixes = ", ".join(f"`{f.id}` ({f.safety})" for f in r.fixes) or "none"
        out.append(
            f"| [{r.code}](#{_anchor(r)}) | {_md_cell(r.name)} | {_md_code(r.category)} "
            f"| {_md_code(r.severity)} | {fixes} |"
        )
    for r in ruleset:
        out += ["", *_rule_section(r)]
    return "\n".join(out) + "\n"


def _rule_section(r: Rule) -> list[str]:
    status = f"{r.status} (runs with `--preview`)" if r.status == "preview" else r.status
    meta = [
        f"- Category: `{r.category}`",
        f"- Severity: `{r.severity}`",
        f"- Status: {status}",
    ]
    if r.aliases:
        meta.append(f"- Former codes: {', '.join(_md_code(a) for a in r.aliases)}")
    if r.locations:
        meta.append(f"- Points at: {', '.join(_md_code(k) for k in r.locations)} locations in your code")
    if r.fixes:
        fixes = [
            f"- {_md_code(f.id)}: {f.safety} ("
            + ("keeps numerics; tried by default" if f.safety == "safe" else "may change numerics or memory; needs `--unsafe-fixes`")
            + ")"
            for f in r.fixes
        ]
    else:
        fixes = ["No automatic fix: the change is in your code (see Instead)."]
    return [
        f"## {r.code} {r.name}",
        "",
        _md_text(r.summary),
        "",
        *meta,
        "",
        "### When it fires",
        "",
        *_fence(r.when.source, "text"),
        "",
        f"Recoverable share of the step ({r.impact_basis}): {_md_code(r.impact.source)}",
        "",
        "### Message",
        "",
        *_fence(r.message.source, "text"),
        *(
            ["", "Parts in `[[...]]` are printed only when every value inside is known (see rules/README.md)."]
            if "[[" in r.message.source
            else []
        ),
        "",
        "### Fixes and their safety",
        "",
        *fixes,
        "",
        "### Why it matters",
        "",
        _md_text(r.why),
        "",
        "### Example",
        "",
        *_fence(r.example, "python"),
        "",
        "Instead:",
        "",
        *_fence(r.instead, "python"),
        "",
        "### References",
        "",
        *(f"- {_md_link(ref)}" for ref in r.references),
    ]


def _anchor(r: Rule) -> str:
    """GitHub's heading anchor for ``## CODE name`` (codes and names are validated slugs)."""
    return f"{r.code.lower()}-{r.name}"


def _md_escape(text: str) -> str:
    """Backslash-escape Markdown punctuation in plain text."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def _md_line_starts(text: str) -> str:
    """Escape list, heading and underline markers at the start of lines."""

    def fix(m: re.Match[str]) -> str:
        marker = m.group(2)
        if marker is not None and marker[0].isdigit():
            return m.group(1) + marker[:-1] + "\\" + marker[-1]  # 1. -> 1\.
        if marker is not None:
            return m.group(1) + "\\" + marker
        return m.group(3) + "\\" + m.group(4)

    return _MD_LINE_START.sub(fix, text)


def _md_text(text: str) -> str:
    """Escape prose, keeping the author's backtick code spans (with ``|`` escaped inside them too)."""
    out: list[str] = []
    pos = 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_md_escape(text[pos : match.start()]))
        out.append(match.group(0).replace("|", "\\|"))
        pos = match.end()
    out.append(_md_escape(text[pos:]))
    return _md_line_starts("".join(out).strip())


def _md_cell(text: str) -> str:
    """Escape text for one table cell (one line, ``|`` escaped)."""
    return _md_line_starts(_md_escape(" ".join(text.split())))


def _md_code(text: str) -> str:
    """Return an inline code span that survives backticks and ``|`` in ``text``."""
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text.replace('|', chr(92) + '|')}{pad}{ticks}"


def _md_link(url: str) -> str:
    """Return an autolink for a plain URL, else the URL as escaped text."""
    if re.fullmatch(r"https?://[^\s<>]+", url):
        return f"<{url}>"
    return _md_escape(url)


def _fence(code: str, lang: str) -> list[str]:
    """Return a fenced code block longer than any backtick run in ``code``."""
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`+", code)), default=0) + 1)
    return [f"{ticks}{lang}", code.rstrip("\n"), ticks]
