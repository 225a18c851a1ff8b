"""A head start for ``advisor analyze``: decode a large trace while the command loads the rest.

This module imports no stage but the trace reader's pandas-free part; see
:mod:`advisor.trace.early`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from advisor.rundir import CAPTURE_FILE, NODE_FILE


def head_start(paths: Sequence[str | Path]) -> bool:
    """Start decoding the trace now when ``paths`` is one large plain trace file; say whether it started.

    One folder holding one trace file (a ``tensorboard_trace_handler`` folder) counts as that
    file; a run directory does not (its capture says which traces it holds). The decode is read
    by the analysis that follows (``analyze_report`` on the same file); one nobody reads ends
    with this process.
    """
    from advisor.errors import TraceError  # noqa: PLC0415 - only this command wants these
    from advisor.trace.early import head_start as start  # noqa: PLC0415
    from advisor.trace.read import find_trace_files  # noqa: PLC0415

    if len(paths) != 1:
        return False
    path = Path(paths[0])
    if path.is_dir():
        if (path / CAPTURE_FILE).exists() or (path / NODE_FILE).exists():
            return False
        try:
            files = find_trace_files(path)
        except (OSError, TraceError):
            return False  # the analysis reports it
        if len(files) != 1:
            return False
        path = files[0]
    return start(path)
