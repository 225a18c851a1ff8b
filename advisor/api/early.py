"""A head start for ``advisor analyze``: decode a large trace while the command loads the rest.

This module imports no stage but the trace reader's pandas-free part; see
:mod:`advisor.trace.early`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def head_start(paths: Sequence[str | Path]) -> bool:
    """Start decoding the trace now when ``paths`` is one large plain trace file; say whether it started.

    The decode is read by the analysis that follows (``analyze_report`` on the same file); one
    nobody reads ends with this process.
    """
    if len(paths) != 1:
        return False
    from advisor.trace.early import head_start as start  # noqa: PLC0415 - only this command wants it

    return start(Path(paths[0]))
