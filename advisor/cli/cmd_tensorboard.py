"""``advisor tensorboard RUN_DIR``: open a run's traces in TensorBoard's PyTorch Profiler plugin."""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable_line

TENSORBOARD_EPILOG = """\b
Serves a temporary, prepared copy of the traces so the deprecated plugin shows DataLoader
time; the original traces are never modified. Runs are named <script>-<time>-<variant>, so
the plugin's Diff view compares them. The plugin's page needs internet (Google Charts).
Ctrl-C stops it.
Examples:
  advisor tensorboard advisor-runs/demo
  advisor tensorboard advisor-runs               every saved run, one TensorBoard run each
  advisor tensorboard advisor-runs/demo --port 6007
"""


@click.command(epilog=TENSORBOARD_EPILOG)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=6006, show_default=True, help="TCP port.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to bind; anything but 127.0.0.1 exposes the traces to the network.",
)
def tensorboard(run_dir: Path, port: int, host: str) -> int:
    """Start TensorBoard on RUN_DIR's traces (or every run in a folder of runs); prints the URL."""
    api.tensorboard_check()  # fail fast, before copying traces
    if host not in ("127.0.0.1", "localhost", "::1"):
        say(f"advisor: warning: binding {host}: anyone who can reach this machine can read the traces")
    say(f"advisor: preparing traces from {run_dir}")
    prepared = api.prepare_tensorboard(run_dir)
    if prepared.rewritten:
        click.echo(
            f"advisor: re-labelled {prepared.rewritten} user_annotation events as cpu_op in the copy "
            "(the plugin drops them from torch 2.x traces)",
            err=True,
        )
    return api.serve_tensorboard(
        prepared,
        host=host,
        port=port,
        echo=lambda msg: click.echo(printable_line(msg)),
        say=say,
    )


def say(message: str) -> None:
    """One line on stderr through the terminal door: the host and the path are the user's text (issue #30 campaign)."""
    click.echo(printable_line(message), err=True)
