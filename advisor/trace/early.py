"""A head start: a large trace's decode workers forked before the rest of advisor has loaded.

``advisor analyze big.json`` spends its first half second importing pandas, the metrics and
the report while every core but one idles. :func:`head_start` maps the file and forks the
decode workers (:mod:`advisor.trace.fanout`) right away, with only numpy and msgspec imported
(nothing this module imports loads pandas); the command then imports the rest while they
decode, and :func:`advisor.trace.load.load_trace` reads their parts through :func:`claim`.

A started decode that nobody claims (the command failed first) is killed and reaped at exit,
and the workers die with this process in any case (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from advisor.errors import TraceError
from advisor.trace import fanout
from advisor.trace.decode import Started, start_parallel
from advisor.trace.read import GZIP_MAGIC, _read_bytes

_pending: dict[Path, tuple[tuple[int, int, int, int], Started]] = {}


def _identity(path: Path) -> tuple[Path, tuple[int, int, int, int]] | None:
    try:
        st = path.stat()
        return path.resolve(), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def head_start(path: str | Path) -> bool:
    """Start decoding ``path`` in worker processes if it is a plain trace file large enough for that.

    Anything unusual (a folder, a gzip file, a small or unreadable file) starts nothing: the load
    then finds and reports it as it always does.

    Returns:
        Whether workers were started.
    """
    path = Path(path)
    ident = _identity(path)
    if ident is None or ident[1][2] < fanout.PARALLEL_BYTES or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == GZIP_MAGIC:  # decompressing is the load's own business
                return False
        started = start_parallel(path, _read_bytes(path))
    except (OSError, TraceError):
        return False
    if started is None:
        return False
    key, stamp = ident
    old = _pending.pop(key, None)
    if old is not None:
        old[1].workers.close()
    _pending[key] = (stamp, started)
    return True


def claim(path: Path) -> Started | None:
    """Take the head-started decode of ``path``, if there is one and the file is unchanged since."""
    if not _pending or os.getpid() != _owner:  # a forked child: the workers are its parent's
        return None
    ident = _identity(path)
    if ident is None:
        return None
    key, stamp = ident
    entry = _pending.pop(key, None)
    if entry is None:
        return None
    if entry[0] != stamp:
        entry[1].workers.close()
        return None
    return entry[1]


def close_all() -> None:
    """End every decode started and not claimed (run at exit)."""
    while _pending:
        _key, (_stamp, started) = _pending.popitem()
        if os.getpid() == _owner:
            started.workers.close()


_owner = os.getpid()
atexit.register(close_all)
