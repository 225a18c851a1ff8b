"""``advisor fixes`` (list the fixes) and ``advisor fix ID`` (explain one).

Both read the fix catalog the trials run (through :mod:`advisor.api`), so the documentation
cannot drift from the behaviour; ``advisor fixes --format markdown`` writes ``docs/fixes.md``.
"""

from __future__ import annotations

import json

import click

from advisor import api

FIXES_EPILOG = """\b
Examples:
  advisor fixes
  advisor fixes --format json
  advisor fixes --format markdown > docs/fixes.md
  advisor fix dataloader_workers
  advisor fix --all --format json
"""


@click.command(epilog=FIXES_EPILOG)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="markdown: the full fix reference (docs/fixes.md, written by `make docs`).",
)
def fixes(fmt: str) -> int:
    """List every fix: id, safety, what it changes."""
    if fmt == "markdown":
        click.echo(api.fixes_reference(), nl=False)
        return 0
    rows = api.list_fixes()
    if fmt == "json":
        click.echo(json.dumps([{"id": i, "safety": s, "changes": c} for i, s, c in rows], indent=2))
        return 0
    width = max(len(i) for i, _, _ in rows)
    click.echo(f"{'fix'.ljust(width)}  safety  what it changes")
    for fix_id, safety, changes in rows:
        click.echo(f"{fix_id.ljust(width)}  {safety.ljust(6)}  {changes}")
    return 0


@click.command(epilog=FIXES_EPILOG)
@click.argument("fix_id", metavar="ID", required=False)
@click.option("--all", "show_all", is_flag=True, help="Explain every fix.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def fix(fix_id: str | None, show_all: bool, fmt: str) -> int:
    """Explain one fix: what it changes, its safety, when it applies, how it is measured, its diff."""
    from advisor.errors import UsageError

    if show_all == (fix_id is not None):
        raise UsageError("give one fix id (e.g. `advisor fix dataloader_workers`) or --all")
    docs = api.explain_fixes(None if show_all else fix_id, as_json=fmt == "json")
    if fmt == "json":
        click.echo(json.dumps(docs if show_all else docs[0], indent=2))
    else:
        click.echo("\n\n".join(str(d) for d in docs))
    return 0
