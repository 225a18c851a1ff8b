"""``advisor verify RUN_DIR``: time the kept fixes as a user would, beside the report's claim."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from advisor import api
from advisor._terminal import printable_line
from advisor.errors import Interrupted

VERIFY_EPILOG = """\b
Examples:
  advisor verify advisor-runs/demo               3 pairs, from the current folder
  advisor verify advisor-runs/demo --pairs 6     a narrower interval, twice the time
\b
Each pair runs the script as it is and with the run's fix.diff applied (in memory: the script
is not touched), as whole processes one after the other, the order flipped every pair. Each run
goes to the script's end, as when you run it: what it writes (checkpoints, logs), it writes.
Run it from the folder the diagnose ran in, on a machine as quiet as you can make it.
"""


@click.command(epilog=VERIFY_EPILOG)
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--pairs", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Pairs of whole runs (original, patched) to time.")
@click.option("--cwd", "cwd", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Folder to run the script from [default: the current one].")
def verify(run_dir: Path, pairs: int, cwd: Path | None) -> int:
    """Time a run's script plainly, without and with its fix.diff, and set the ratio beside the claim."""
    from advisor.api.process import interrupt_signal

    where = (cwd or Path.cwd()).resolve()
    click.echo(f"advisor verify: load {os.getloadavg()[0]:.2f}; {pairs} pair(s) of whole runs to the script's end "
               f"(what it writes, it writes) from {printable_line(str(where))}; Ctrl-C keeps the pairs timed so far",
               err=True)
    timed: list[Any] = []

    def shown(v: Any) -> None:
        timed.append(v)
        click.echo(api.verification_pair_line(v), err=True)

    try:
        done = api.verify_run(run_dir, pairs, where, on_pair=shown)
    except KeyboardInterrupt as exc:
        saved = printable_line(str(run_dir / api.VERIFY_FILE))
        raise Interrupted(f"interrupted after {len(timed)} pair(s) of {pairs}; they are saved in {saved}",
                          signum=interrupt_signal(exc)) from None
    for line in api.verification_lines(done):
        click.echo(line)
    click.echo(f"Saved:    {printable_line(str(run_dir / api.VERIFY_FILE))}")
    return 0
