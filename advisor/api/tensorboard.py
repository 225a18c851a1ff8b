"""The backend of ``advisor tensorboard``: a run's traces served to the PyTorch Profiler plugin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.report.tensorboard_logdir import PreparedLogdir


def tensorboard_check() -> None:
    """Raise a clear error when TensorBoard or its PyTorch Profiler plugin is missing."""
    from advisor.report.tensorboard import check_plugin

    check_plugin()


def prepare_tensorboard(run_dir: Path) -> PreparedLogdir:
    """Copy a run's (or a folder of runs') traces into a temporary log folder the plugin reads."""
    import os

    from advisor.report.tensorboard_logdir import prepare_logdir, remove_stale_copies

    try:
        return prepare_logdir(run_dir)
    except BaseException:
        # NOTE: a full temp folder or Ctrl-C mid-copy: the partial copy is ours, gone with us
        remove_stale_copies(owner=os.getpid())
        raise


def serve_tensorboard(
    prepared: PreparedLogdir, *, host: str, port: int, echo: Callable[[str], None], say: Callable[[str], None]
) -> int:
    """Serve a prepared log folder until Ctrl-C; return the exit code."""
    from advisor.report.tensorboard import serve

    return serve(prepared, host=host, port=port, echo=echo, say=say)
