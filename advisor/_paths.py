"""How paths are shown to users: one rule for every message, report and listing."""

from __future__ import annotations

import os


def display_path(file: str) -> str:
    """Show an absolute path under the working directory relative to it (as ruff and pytest do).

    Traces and captures record absolute file names; ``examples/train.py:41`` reads better than
    the full path and still opens from where the command ran. Relative paths, paths elsewhere
    (another machine's) and pseudo-files such as ``<string>`` stay as given.
    """
    if not file or not os.path.isabs(file):
        return file
    try:
        rel = os.path.relpath(file)
    except ValueError:  # pragma: no cover - another drive on Windows
        return file
    return file if rel.startswith("..") else rel


def location_text(file: str, line: int | None, function: str = "") -> str:
    """``file:line (function)`` (the line and function where known), the file shown by :func:`display_path`.

    The one form of a source location: a finding's message and the report's location lines.
    """
    file = display_path(file)
    where = f"{file}:{line}" if line else file
    return f"{where} ({function})" if function else where
