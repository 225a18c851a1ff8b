"""``advisor config``: the resolved configuration for a folder, each setting with where it came from.

The same search and loader as ``diagnose`` and ``analyze`` (:func:`advisor.api.config_view`),
so what it prints is what those commands use; ruff's ``--show-settings`` is the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from advisor import api
from advisor._terminal import printable_line
from advisor.api import ResolvedConfig, Setting, describe_source
from advisor.cli.cmd_diagnose import diagnose_option_keys
from advisor.cli.configured import config_defaults
from advisor.errors import UsageError

EPILOG = """\b
Examples:
  advisor config                          settings for the current directory
  advisor config --for examples/train.py  settings a diagnose of that script would use
  advisor config --format json            for tools
"""


@click.command(epilog=EPILOG)
@click.option(
    "--for",
    "target",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    metavar="PATH",
    help="A script or folder: show the settings its closest config file gives (default: the current directory).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def config(target: Path | None, fmt: str) -> int:
    """Show each setting, its value, and where it came from (default or a config file)."""
    resolved, selection = api.config_view(target or Path.cwd(), option_keys=diagnose_option_keys())
    resolved = with_option_defaults(resolved)
    selected = [r.code for r in selection.selected]
    deselected = [r.code for r in selection.deselected]
    if fmt == "json":
        click.echo(json.dumps(as_json(resolved, selected, deselected, selection.warnings), indent=2))
    else:
        click.echo(as_text(resolved, selected, deselected))
    for warning in selection.warnings:
        click.echo(f"advisor: warning: {printable_line(warning)}", err=True)
    refused = _refused_value(target or Path.cwd())
    if refused is not None:
        # NOTE: shown above as written, but `diagnose` stops on it: say so, and fail as it would
        raise UsageError(f"{refused}; advisor diagnose refuses this value")
    return 0


def with_option_defaults(resolved: ResolvedConfig) -> ResolvedConfig:
    """Add every ``diagnose`` option no config file sets, at its default, after the resolved ones.

    The docs promise every key a project may set; only the rule selection and the keys a file set
    were shown (issue #32), so ``steps``, ``repeats`` or ``budget`` could not be looked up here.
    """
    from dataclasses import replace

    from advisor.cli.cmd_diagnose import diagnose
    from advisor.cli.configured import option_keys

    present = {s.key for s in resolved.settings}
    extra = tuple(
        Setting(key, _default_of(opt)) for key, opt in option_keys(diagnose).items() if key not in present
    )
    return replace(resolved, settings=(*resolved.settings, *extra))


def _default_of(opt: click.Option) -> Any:
    """Return an option's default as TOML would hold it (None when it has none; flags false)."""
    default = opt.get_default(click.Context(click.Command("advisor")), call=True)
    if opt.is_flag and not isinstance(default, bool):
        return False
    if isinstance(default, tuple):
        return list(default)
    return default if isinstance(default, (bool, int, float, str, list)) else None


def _refused_value(start: Path) -> str | None:
    """Return the first config value ``advisor diagnose`` would refuse (``steps = "ten"``, ``warmup = -5``), else None."""
    from advisor.cli.cmd_diagnose import diagnose

    folder = start if start.is_dir() else start.parent
    try:
        config_defaults(diagnose, click.Context(diagnose), folder)
    except UsageError as exc:
        return exc.message.rstrip(".")
    return None


def as_json(
    resolved: ResolvedConfig, selected: list[str], deselected: list[str], warnings: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Return the resolved configuration as JSON-able data (absolute paths, values as in TOML)."""
    return {
        "config_file": str(resolved.path) if resolved.path else None,
        "extends": [str(p) for p in resolved.files[1:]],
        "settings": {
            s.key: {
                "value": list(s.value) if isinstance(s.value, tuple) else s.value,
                "default": s.is_default,
                "sources": [str(p) for p in s.sources],
            }
            for s in resolved.settings
        },
        "rules": {"selected": selected, "deselected": deselected},
        "notes": list(resolved.notes),
        "warnings": list(warnings),
    }


def as_text(resolved: ResolvedConfig, selected: list[str], deselected: list[str]) -> str:
    """Aligned columns: setting, value, source; then the rules that would run."""
    here = Path.cwd()
    if resolved.path is None:
        head = ["config file: none found (searched for advisor.toml, .advisor.toml, "
                "pyproject.toml with [tool.advisor] from here upwards); using defaults"]
    else:
        head = [f"config file: {describe_source(resolved.path, here)}"]
        head += [f"  extends: {describe_source(p, here)}" for p in resolved.files[1:]]
    header = ("setting", "value", "source")
    rows = [
        (s.key, _value_text(s), ", ".join(describe_source(p, here) for p in s.sources) or "default")
        for s in resolved.settings
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(2)]
    table = ["  ".join((row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2])).rstrip() for row in (header, *rows)]
    total = len(selected) + len(deselected)
    rules = f"rules: {len(selected)} of {total} selected: {', '.join(selected) or 'none'}"
    notes = [f"note: {n}" for n in resolved.notes]
    return "\n".join([*head, "", *table, "", rules, *notes])


def _value_text(setting: Setting) -> str:
    """Write the value as TOML would; an unset ``select`` says what the default selects."""
    value = setting.value
    if value is None:
        return "(every stable rule)" if setting.key == "select" else "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(value)
