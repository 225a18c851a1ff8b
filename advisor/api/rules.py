"""The backends of ``advisor rules``/``rule`` and ``advisor config``: the shipped rules and the layered configuration."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from advisor.config import ResolvedConfig
from advisor.engine.model import EngineConfig
from advisor.engine.ruleset import RuleSet
from advisor.engine.selection import Selection


def rule_set() -> RuleSet:
    """Every rule advisor ships (the files under ``rules/``), validated, fix ids included."""
    from advisor.engine.rules import check_fix_refs, default_rules

    rules = default_rules()
    # NOTE: the engine cannot import the fix catalog (the fix stage depends on the engine), so
    # the door checks the rules' fix ids against it.
    check_fix_refs(rules, fix_vocabulary())
    return rules


def fix_vocabulary() -> dict[str, str]:
    """Return the fix catalog's vocabulary, fix id -> safety, that rules must use."""
    from advisor.fixes.catalog import get_fixes

    return {fix.id: fix.safety.value for fix in get_fixes().values()}


def engine_config(
    select: Sequence[str] | None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    start: Path | None = None,
    option_keys: Collection[str] = (),
) -> EngineConfig:
    """Layer ``[tool.advisor]`` from the closest config file under the command line's selection.

    Args:
        select: ``--select`` codes, or None/empty to keep the config file's selection.
        extend_select: ``--extend-select`` codes.
        ignore: ``--ignore`` codes.
        preview: ``--preview``; False keeps the config file's setting.
        start: Where the config search starts (default: the current directory).
        option_keys: The command options the file may also set (see :mod:`advisor.config`).
    """
    from advisor.config import resolve_engine_config

    return resolve_engine_config(
        select=tuple(select) if select else None,
        extend_select=tuple(extend_select),
        ignore=tuple(ignore),
        preview=preview or None,
        start=start or Path.cwd(),
        option_keys=option_keys,
    )


def config_options(start: Path | None, option_keys: Collection[str]) -> dict[str, tuple[Any, Path]]:
    """Return the command options ``[tool.advisor]`` sets for ``start``: key -> (value as written, file).

    Raises:
        UsageError: the config file is invalid or holds an unknown key.
    """
    from advisor.config import options_for

    return options_for(start or Path.cwd(), option_keys)


def config_view(start: Path, option_keys: Collection[str] = ()) -> tuple[ResolvedConfig, Selection]:
    """Return the configuration the closest config file above ``start`` gives, and the rules it selects."""
    from advisor.config import resolve_config
    from advisor.engine.selection import select_rules

    resolved = resolve_config(start=start, option_keys=option_keys)
    return resolved, select_rules(rule_set(), resolved.engine)
