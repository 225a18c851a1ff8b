"""Ending a measured run whose script finished by itself, without the interpreter's teardown.

A process that imported torch and ``torch._dynamo`` spends 0.65-1.05 s in CPython's shutdown on
this machine (clearing thousands of modules and collecting their objects), against 0.04 s when
it ends with ``os._exit`` after its exit hooks: a fix trial of a script that ends inside its
timed window (``regression/main.py``: 0.3 ms steps, ~830 in all) paid that second in every one
of its runs, for nothing it measures.

:func:`quick_exit` keeps the parts of a normal exit that run the script's own code, in the
interpreter's order: its non-daemon threads are waited for, then its ``atexit`` hooks run
(``weakref.finalize`` and ``tempfile`` clean-ups among them), then stdout and stderr are
flushed. What it skips is the freeing of every object, and with it the flush of a file the
script left open: a run advisor stops (the usual end of a measured run) has always ended that
way, and finding such files would take a scan of every object (0.15-0.3 s here), most of what
is saved.
``--full`` runs, where the user asked for the script's whole run as it is, end the normal way.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def quick_exit(code: int) -> None:
    """Wait for the script's threads, run its exit hooks, flush stdout and stderr, and end the process with ``code``."""
    main, me = threading.main_thread(), threading.current_thread()
    for thread in threading.enumerate():
        if thread is not main and thread is not me and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed or broken stream: nothing left to lose
            pass
    os._exit(code)
