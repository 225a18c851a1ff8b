"""The parent's handle on a run the warm-start server forked: :class:`WarmProcess`, answering like Popen.

See :mod:`advisor.capture.warm` for the server and why the fork is safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any, Protocol

from advisor._proc import kill_group


class Server(Protocol):
    """What a run needs of its server (:class:`advisor.capture.warm.WarmServer`): its messages."""

    def receive(self, timeout: float | None) -> dict[str, Any] | None:
        """Return the next message about the run (None after ``timeout`` s; ``{"lost": True}`` once the server died)."""


GONE_TIMEOUT_S = 15.0
"""After the server's death, how long a child it forked may take to save and exit before it is killed."""


class WarmProcess:
    """A child forked by the server, answering like ``subprocess.Popen`` for the capture's waits.

    Its exit status comes from the server (the child is the server's, not ours). When the server
    dies first, the child gets SIGTERM (its parent-death signal) and saves what it measured; the
    process is then ``lost`` and the capture raises :class:`WarmStartLost`.
    """

    def __init__(self, server: Server, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self.lost = False
        self.args = [f"warm:{pid}"]

    def poll(self) -> int | None:
        """Return the exit code when the child has ended, else None."""
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child's end; raise ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the child alone (as Popen does); nothing once it has ended."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def _read(self, timeout: float | None) -> None:
        msg = self.server.receive(timeout)
        if msg is None:
            return
        if "exit" in msg:
            self.returncode = int(msg["exit"])
        elif msg.get("lost"):
            self.lost = True
            self._gone()

    def _gone(self) -> None:
        """Give the child its grace to save after the server's death, then end its group (it is not ours to reap)."""
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while not _ended(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_group(self.pid)
        self.returncode = -signal.SIGTERM


def _ended(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - gone (NoSuchProcess), or psutil unusable: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
