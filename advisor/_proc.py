"""Process hygiene shared by the stages that start long-lived children (capture, TensorBoard).

Children run in their own session so that a terminal's Ctrl-C reaches only advisor, which then
stops them in order (the capture child saves its trace first). The price is that nothing else
stops them when advisor itself dies abruptly (SIGKILL, an OOM kill, a closed CI job): a training
script would keep the GPU busy, a TensorBoard server would keep the port. On Linux the kernel can
send a signal to a process when its parent dies (``prctl(PR_SET_PDEATHSIG)``); this module asks
for it.
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Call it first thing in a child (or as ``preexec_fn``). When the parent is already gone by
    then (it died between fork and this call, and the child was re-parented), the signal is sent
    at once, as the kernel would have.

    Returns:
        True when the request was registered; False where the platform has no such mechanism.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent == 1:  # re-parented to init already: the parent we were started by is gone
        os.kill(os.getpid(), sig)
    return True
