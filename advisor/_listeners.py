"""The folders multiprocessing's fd-passing listeners leave behind when their process is killed.

A DataLoader worker hands each batch's tensors to the main process as file descriptors (torch's
``file_descriptor`` sharing strategy) through multiprocessing's resource sharer, which listens on
a Unix socket in a folder of its own, ``<tmp>/pymp-XXXXXXXX/listener-YYYYYYYY``. The process's
exit hooks remove the folder; a process killed outright runs none, and the folder stays (this
machine's ``/tmp`` held 583 of them after a day of stopped and timed-out runs). Before advisor
kills what a script started, :func:`listener_dirs` finds those folders from the sockets the
processes hold (``/proc``, Linux only; elsewhere nothing is found), and :func:`remove` deletes
them once the processes are gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

_PREFIX = "pymp-"
_SOCKET = "listener-"


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    fd_dir = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                target = os.readlink(f"{fd_dir}/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def listener_dirs(pids: Iterable[int], unix_table: str = "/proc/net/unix") -> list[Path]:
    """Return the ``pymp-*`` folders of the resource-sharer sockets that the processes ``pids`` hold.

    Only a folder directly in the temporary directory whose socket is named ``listener-*``
    counts: nothing else is multiprocessing's to leave, or advisor's to remove.
    """
    inodes: set[str] = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    if not inodes:
        return []
    root = Path(tempfile.gettempdir()).resolve()
    found: set[Path] = set()
    with contextlib.suppress(OSError), open(unix_table, encoding="utf-8", errors="replace") as fh:
        next(fh, None)  # the header
        for line in fh:
            fields = line.split()
            if len(fields) < 8 or fields[6] not in inodes:
                continue
            path = Path(fields[7])
            if path.name.startswith(_SOCKET) and path.parent.name.startswith(_PREFIX) and path.parent.parent == root:
                found.add(path.parent)
    return sorted(found)


def remove(dirs: Iterable[Path]) -> None:
    """Delete ``dirs`` (from :func:`listener_dirs`) when they hold nothing but listener sockets."""
    for folder in dirs:
        with contextlib.suppress(OSError):
            if all(entry.name.startswith(_SOCKET) for entry in folder.iterdir()):
                shutil.rmtree(folder, ignore_errors=True)
