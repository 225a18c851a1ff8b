"""``advisor rules`` (list the rules) and ``advisor rule CODE`` (explain one, ruff's template).

Both read the same rule files the engine evaluates, so the documentation cannot drift from
the behaviour.
"""

from __future__ import annotations

import json
import sys

import click

from advisor.engine.rules import Rule, RuleSet, default_rules

RULES_EPILOG = """\b
Examples:
  advisor rules
  advisor rules --format json
  advisor rule DL001
  advisor rule --all --format json
"""


def _ruleset() -> RuleSet:
    return default_rules()


@click.command(epilog=RULES_EPILOG)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules(fmt: str) -> int:
    """List every rule: code, name, category, severity, fixes."""
    ruleset = _ruleset()
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
    click.echo("\n\n".join(explain(r) for r in chosen))
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
            f"Recoverable share of the step: `{r.impact.source}`",
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
