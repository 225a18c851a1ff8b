"""The backend of ``advisor fixes``: the fix catalog listed and explained."""

from __future__ import annotations

from typing import Any

from advisor.errors import UsageError


def list_fixes() -> list[tuple[str, str, str]]:
    """Return every fix in the catalog: id, safety, what it changes (``advisor fixes``)."""
    from advisor.fixes import catalog
    from advisor.fixes.docs import table_rows

    return list(table_rows(catalog.get_fixes().values()))


def fixes_reference() -> str:
    """Return the whole fix reference as Markdown (``docs/fixes.md``)."""
    from advisor.fixes.docs import fixes_markdown

    return fixes_markdown()


def explain_fixes(fix_id: str | None, as_json: bool = False) -> list[Any]:
    """Explain one fix (or every fix when ``fix_id`` is None), as text or JSON-able dicts.

    Raises:
        UsageError: ``fix_id`` is not in the catalog (with a close match when there is one).
    """
    from advisor.engine.condition import did_you_mean
    from advisor.fixes import catalog
    from advisor.fixes.docs import doc, explain

    fixes = catalog.get_fixes()
    if fix_id is not None and fix_id not in fixes:
        hint = did_you_mean(fix_id, fixes) or f"; `advisor fixes` lists them ({len(fixes)})"
        raise UsageError(f"unknown fix id {fix_id!r}{hint}")
    chosen = list(fixes.values()) if fix_id is None else [fixes[fix_id]]
    return [doc(f) if as_json else explain(f) for f in chosen]
