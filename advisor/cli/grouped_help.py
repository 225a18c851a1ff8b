"""``--help`` with the options in named sections instead of one flat list.

``advisor diagnose --help`` listed 33 options in one list, the multi-node rendezvous among the
everyday ones (issue #32). A command built on :class:`GroupedHelpCommand` names its sections and
the options in each, by their Python names; an option no section names is listed last, under
"Other options", so a new option is never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

HelpGroups = Sequence[tuple[str, Sequence[str]]]
"""``(section title, parameter names)`` in display order."""


class GroupedHelpCommand(click.Command):
    """A Click command whose help lists its options by section (:data:`HelpGroups`)."""

    help_groups: HelpGroups = ()

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write each section's options under its title, then any option no section names."""
        help_option = self.get_help_option(ctx)
        # NOTE: options only (arguments are in the usage line); the help option under "help",
        # whatever Click names it internally
        records = {
            ("help" if p is help_option else p.name): p.get_help_record(ctx)
            for p in self.get_params(ctx)
            if isinstance(p, click.Option)
        }
        placed: set[str | None] = set()
        for title, names in self.help_groups:
            rows = [records[n] for n in names if records.get(n) is not None]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)  # type: ignore[arg-type]
        rest = [r for n, r in records.items() if n not in placed and r is not None]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


def grouped(base: type[click.Command], groups: HelpGroups) -> type[click.Command]:
    """Return ``base`` with grouped help (``click.command(cls=grouped(ConfiguredCommand, GROUPS))``)."""
    return type(f"Grouped{base.__name__}", (GroupedHelpCommand, base), {"help_groups": tuple(groups)})
