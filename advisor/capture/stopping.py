"""How a capture child stops: SIGTERM kept as advisor's stop request, and the way out once stopped."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, NoReturn

from advisor import _listeners
from advisor._proc import end_own_children, flush_std_streams
from advisor.capture.phases import StopScript


class StopSignalKept:
    """While the script runs, SIGTERM stays advisor's stop request whatever the script sets.

    advisor asks this child to save with SIGTERM (a timeout, Ctrl-C in advisor, a memory
    budget). A script that ignores SIGTERM, or handles it its own way, took that request away:
    the child was killed after its grace and the timed steps measured were lost (issue #30).
    The script's ``signal.signal(SIGTERM, ...)`` is recorded and answered as if it took effect
    (``getsignal`` returns it), but the handler installed stays ours.
    """

    def __init__(self) -> None:
        self._signal, self._getsignal = signal.signal, signal.getsignal
        self._script_handler: Any = signal.SIG_DFL

        def set_handler(signalnum: Any, handler: Any) -> Any:
            if signalnum == signal.SIGTERM:
                previous, self._script_handler = self._script_handler, handler
                return previous
            return self._signal(signalnum, handler)

        def get_handler(signalnum: Any) -> Any:
            return self._script_handler if signalnum == signal.SIGTERM else self._getsignal(signalnum)

        signal.signal, signal.getsignal = set_handler, get_handler  # type: ignore[assignment]

    def restore(self) -> None:
        """Give ``signal.signal`` and ``signal.getsignal`` back (the script has ended)."""
        signal.signal, signal.getsignal = self._signal, self._getsignal  # type: ignore[assignment]


def caused_by_stop(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a :class:`StopScript` unwound the script (its context chain)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 20:
        if isinstance(cur, StopScript):
            return True
        cur = cur.__context__
        seen += 1
    return False


def end_children_now() -> None:
    """End what the script started, before the stop unwinds it; its clean-up then joins them at once.

    torch's SIGCHLD handler would raise at a DataLoader worker's death (the iterator is still
    alive): the default action replaces it. A mask would not do: any thread may take the signal.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    end_own_children()


def leave(code: int) -> NoReturn:
    """End a run advisor cut short: flush the logs, end what the script started, and exit with ``code``.

    Interpreter shutdown (the script's atexit handlers, DataLoader iterator teardown, non-daemon
    threads) is skipped: it could hang, or run code the script expected to run only after a
    full run.
    """
    flush_std_streams()
    end_children_now()  # NOTE: a persistent DataLoader iterator outlives the unwinding
    _reap()
    _listeners.remove(_listeners.listener_dirs([os.getpid()]))
    os._exit(code)


REAP_S = 2.0
"""How long :func:`leave` waits for the processes it ended (a SIGKILLed process is gone in milliseconds)."""


def _reap() -> None:
    """Wait for the ended processes: none is still dying as the next run starts, and their CPU time is this run's.

    ``getrusage(RUSAGE_CHILDREN)`` (a benchmark's CPU time of advisor's whole tree) counts only
    descendants their parents waited for; this process, a subreaper, inherits the orphans.
    """
    deadline = time.monotonic() + REAP_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.002)
