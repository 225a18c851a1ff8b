"""Where a capture child finds modules: advisor's own from its install, the script's from its folder.

The children advisor starts (``python -m advisor.capture.child``, the warm-start server, torchrun
and its ranks) run with ``-P`` (Python 3.11+): without it ``-m`` puts the working directory first
on ``sys.path``, and a folder there named ``advisor`` (a project of that name, advisor's own
source tree) or a module named like one advisor imports would be imported instead of advisor's
own, before any of our code runs. The script still gets its folder first on ``sys.path``, as
``python script.py`` gives it: inserted there under ``-P``, in place of the working directory
otherwise.

torchrun's ranks get the same flags: ``advisor.distributed.launch`` hands it the whole command
(``--no-python``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

PYTHON_FLAGS: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()
"""Interpreter flags of the child processes advisor starts."""


def _safe() -> bool:
    return bool(getattr(sys.flags, "safe_path", False))


def put_first(folder: str) -> None:
    """Make ``folder`` the first entry of ``sys.path`` for the script, as Python does for a script's folder."""
    if _safe():
        sys.path.insert(0, folder)
    elif sys.path:
        sys.path[0] = folder
    else:
        sys.path.append(folder)


@contextlib.contextmanager
def first_for_a_while(folder: str) -> Iterator[None]:
    """Put ``folder`` first on ``sys.path`` inside the block (resolving a script's imports ahead of it)."""
    if _safe():
        sys.path.insert(0, folder)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
        return
    saved = sys.path[0] if sys.path else None
    if saved is not None:
        sys.path[0] = folder
    try:
        yield
    finally:
        if saved is not None:
            sys.path[0] = saved
