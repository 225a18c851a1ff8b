"""File names for CI formats (SARIF, GitHub annotations): relative to the repository's root.

GitHub code scanning and workflow annotations resolve a path from the repository's root, not
from the folder advisor ran in; ``examples/train.py`` written from inside ``examples/`` read as
``train.py`` and pointed nowhere (issue #32). The root is ``GITHUB_WORKSPACE`` when set (the
checkout in a GitHub workflow), else the closest folder above the working directory holding
``.git``; a file outside it keeps the terminal's form (:func:`advisor._paths.display_path`).
"""

from __future__ import annotations

import os
from pathlib import Path

from advisor._paths import display_path


def repo_root(start: Path | None = None) -> Path | None:
    """Return the repository root: ``GITHUB_WORKSPACE``, else the closest ``.git`` above ``start``."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and Path(workspace).is_dir():
        return Path(workspace).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def repo_path(file: str, root: Path | None = None) -> str:
    """Return ``file`` relative to the repository root when under it, else as the terminal shows it."""
    if not file or file.startswith("<"):
        return file
    root = root if root is not None else repo_root()
    if root is None:
        return display_path(file)
    path = Path(file) if os.path.isabs(file) else Path.cwd() / file
    try:
        return path.resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return display_path(file)
