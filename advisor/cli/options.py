"""Options shared by several commands, defined once and stacked per command (pip-tools habit)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

# NOTE: literal copies (checked equal by tests/cli) so that building the CLI imports no stage.
FORMATS = ("text", "markdown", "html", "json", "sarif", "github")
COMPARE_FORMATS = ("text", "markdown", "html", "json")
FAIL_ON = ("never", "info", "warning", "error")
TRACE_BUDGET_DEFAULT = "256MB"  # advisor.capture.budget.DEFAULT_TRACE_BUDGET_BYTES, as typed


class PositiveSeconds(click.ParamType):
    """A finite number of seconds above zero: ``nan``, ``inf``, ``0`` and negatives are refused.

    ``click.FloatRange(min=0, min_open=True)`` lets ``nan`` through (every comparison with it is
    false), and ``--timeout nan`` would then disable the timeout without a word.
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """Parse ``value``; fail with Click's usage error (exit 2) when it is not a positive finite number."""
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return seconds


class ByteSize(click.ParamType):
    """A memory size: ``2GB``, ``1.5GiB``, ``512M``, ``800MiB`` or plain bytes (1 GB = 2**30 here, as tools report memory)."""

    name = "size"
    _UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
              "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """Parse ``value`` into bytes; fail with a usage error (exit 2) when it is not a positive size."""
        if isinstance(value, int) and not isinstance(value, bool):
            number, unit = float(value), ""
        else:
            text = str(value).strip().upper().replace(" ", "")
            digits = text.rstrip("KMGTIB")
            number_text, unit = digits, text[len(digits):]
            try:
                number = float(number_text)
            except ValueError:
                self.fail(f"{value!r} is not a memory size (examples: 2GB, 512MiB, 1.5G)", param, ctx)
        if unit not in self._UNITS:
            self.fail(f"{value!r}: unknown unit {unit!r} (use K, M, G or T, with or without B/iB)", param, ctx)
        size = number * self._UNITS[unit]
        if not math.isfinite(size) or size < 1:
            self.fail(f"{value!r} is not a positive memory size", param, ctx)
        return int(size)


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format (default: from -o's extension, else text); sarif and github list the findings for CI.",
)
compare_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(COMPARE_FORMATS),
    default=None,
    help="Output format (default: from -o's extension, else text).",
)
def _output_option(extensions: str) -> Callable[[F], F]:
    return click.option(
        "-o",
        "--output",
        type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
        default=None,
        help=f"Write to FILE instead of stdout ({extensions}).",
    )


output_option = _output_option(".txt, .md, .html, .json, .sarif")
# NOTE: compare writes no SARIF (it has no findings of its own to list for CI)
compare_output_option = _output_option(".txt, .md, .html, .json")
fail_on_option = click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default="never",
    show_default=True,
    help="Exit 1 when findings at or above this severity remain (for CI gates); they are listed on stderr.",
)
output_options = _stack(format_option, output_option, fail_on_option)

inline_ignores_option = click.option(
    "--no-inline-ignores",
    is_flag=True,
    default=False,
    help="Report findings even where the script has `# advisor: ignore[CODE]` comments.",
)

rule_selection_options = _stack(
    click.option("--select", multiple=True, metavar="CODE", help="Only these rules (codes or prefixes, repeatable)."),
    click.option("--extend-select", multiple=True, metavar="CODE", help="Add rules to the selection."),
    click.option("--ignore", multiple=True, metavar="CODE", help="Skip these rules (codes or prefixes, repeatable)."),
    click.option("--preview", is_flag=True, default=False, help="Also run preview rules."),
    inline_ignores_option,
)

verbosity_options = _stack(
    click.option("-q", "--quiet", count=True, help="Less chatter on stderr (no live progress)."),
    click.option("-v", "--verbose", count=True, help="More chatter on stderr."),
)


def split_codes(values: tuple[str, ...]) -> tuple[str, ...]:
    """Accept both ``--select DL --select SY`` and ``--select DL,SY``."""
    return tuple(code.strip() for value in values for code in value.split(",") if code.strip())


def advisor_options_in(script_args: tuple[str, ...]) -> list[str]:
    """Return the arguments after SCRIPT that are spelled like the running command's own long options.

    Options typed after SCRIPT go to the script (``advisor sweep train.py --batch-sizes 2``); the
    commands name them when the run then fails for want of them.
    """
    ctx = click.get_current_context()
    own = {opt for param in ctx.command.params for opt in param.opts if opt.startswith("--")}
    return [arg for arg in script_args if arg.split("=", 1)[0] in own]
