"""Command options from ``[tool.advisor]``: Click defaults read from the closest config file.

A project fixes its diagnose settings once (pip-tools feeds its config to Click's
``default_map`` the same way)::

    [tool.advisor]
    steps = 40
    warmup = 10
    repeats = 5
    unsafe-fixes = true

Every option of the command is a key, named as its long option without the dashes, except those
in :data:`NOT_IN_CONFIG` (per-run choices, output, and the selection keys the config module
reads itself). The list is taken from the Click command, so a new option is a config key without
an edit here. The command line wins: Click uses ``default_map`` only for options not given.
A value is checked with the option's own Click type; a bad one is a one-line usage error naming
the file and the key, as an unknown key is (with the closest key suggested).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from advisor import api
from advisor.errors import UsageError

NOT_IN_CONFIG: frozenset[str] = frozenset({
    # what to run and where its results go: one run's choice, not a project's
    "script", "script_args", "as_module", "out_dir", "fmt", "output",
    # which node this is and where its job meets: one launch's choice (differs per node)
    "node_rank", "rdzv_endpoint", "rdzv_id",
    # --diff/--write: writing the user's files needs an explicit flag on each run; so does
    # deleting an earlier run (--replace)
    "show_diff", "write", "replace_out",
    # chatter on stderr is the caller's choice
    "quiet", "verbose", "help",
    # selection keys: read by advisor.config with their own layering (extend-select adds up)
    "select", "extend_select", "ignore", "preview",
})
"""Parameter names (Python names) that are not config keys."""


def config_key(param: click.Parameter) -> str | None:
    """Return the config key of an option (``--profile-steps`` -> ``profile-steps``); None if not one."""
    if not isinstance(param, click.Option) or param.name in NOT_IN_CONFIG or param.hidden:
        return None
    longs = [opt for opt in param.opts if opt.startswith("--")]
    return longs[0][2:] if longs else None


def option_keys(command: click.Command) -> dict[str, click.Option]:
    """Return the command's config keys: key -> its Click option."""
    keys: dict[str, click.Option] = {}
    for param in command.params:
        key = config_key(param)
        if key is not None and isinstance(param, click.Option):
            keys[key] = param
    return keys


def config_defaults(command: click.Command, ctx: click.Context, start: Path) -> dict[str, Any]:
    """Read the closest config file above ``start``; return parameter name -> checked value.

    Raises:
        UsageError: the file is invalid, holds an unknown key, or a value its option refuses.
    """
    keys = option_keys(command)
    defaults: dict[str, Any] = {}
    for key, (value, source) in api.config_options(start, keys).items():
        param = keys[key]
        # NOTE: the file named as advisor.config names it in its own errors
        table = ": [tool.advisor]" if source.name == "pyproject.toml" else ""
        where = f"{source}{table}: {key}"
        if param.is_flag and not param.multiple:
            if not isinstance(value, bool):
                raise UsageError(f"{where}: expected true or false")
        elif isinstance(value, bool):
            # NOTE: int(True) is 1: "steps = true" would otherwise run one step without a word.
            raise UsageError(f"{where}: expected a value as --{key} takes, not true/false")
        if param.multiple and not isinstance(value, list):
            value = [value]
        if isinstance(value, (dict, list)) and not param.multiple:
            raise UsageError(f"{where}: expected one value, as --{key} takes")
        try:
            defaults[param.name or key] = param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise UsageError(f"{where}: {exc.message}") from None
    return defaults


class ConfiguredCommand(click.Command):
    """A command whose option defaults come from the config file closest to its script.

    The config file is searched from the script's folder (from the working directory with
    ``-m``), as the rule selection is, so the arguments are read once before Click parses them.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Set ``ctx.default_map`` from the config file, then parse as Click does."""
        if not ctx.resilient_parsing:
            start = self._config_start(ctx, args)
            if start is not None:
                ctx.default_map = {**(ctx.default_map or {}), **config_defaults(self, ctx, start)}
        return super().parse_args(ctx, args)

    def _config_start(self, ctx: click.Context, args: Sequence[str]) -> Path | None:
        """Return the folder the config search starts from; None for --help or a bad command line."""
        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except click.UsageError:
            return None  # NOTE: Click's own parse reports it, with its usual message
        if opts.get("help") or not opts.get("script"):
            return None
        if opts.get("as_module"):
            return Path.cwd()
        return (Path.cwd() / str(opts["script"])).resolve().parent


def given_as(ctx: click.Context, name: str, flag: str) -> str:
    """How the user set option ``name``: ``flag`` when typed, ``'no-fixes' in the config file`` when read from it.

    A conflict found between a typed option and a config value must name what the user wrote: the
    config key, not a flag they never typed.
    """
    if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT_MAP:
        return f"'{flag.lstrip('-')}' in the config file"
    return flag

