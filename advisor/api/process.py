"""The door's process plumbing: which capture function runs a spec, and signals during long loops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from advisor.capture.model import RunCapture, RunSpec


def capture_function(spec: RunSpec) -> Callable[..., RunCapture]:
    """Pick the capture function for ``spec``: torchrun for multi-process jobs, a plain child otherwise."""
    if spec.multi_process:
        from advisor.distributed.launch import capture_distributed

        return capture_distributed
    from advisor.capture.run import capture

    return capture


def interrupt_signal(exc: BaseException, asked: bool | int = False) -> int:
    """Return the signal number behind a KeyboardInterrupt: its own for SIGTERM/SIGHUP, SIGINT otherwise.

    ``asked`` is the flag :func:`advisor._proc.interrupt_once` set: the signal that asked to stop, when the
    interrupt raised is a checkpoint's re-raise (its first one was swallowed).
    """
    import signal

    if hasattr(exc, "signum"):
        return int(exc.signum)
    return int(asked) if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0 else int(signal.SIGINT)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (main thread only), restoring them after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
