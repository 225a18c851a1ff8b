"""Process hygiene shared by the stages that start long-lived children (capture, TensorBoard).

Children run in their own process group (:func:`own_group`) so that a terminal's Ctrl-C reaches
only advisor, which then stops them in order (the capture child saves its trace first). They stay
in the user's session: Linux schedules each session as one group (autogroup), so a child in a
session of its own competes with a busy process beside it as one thread would, not as the
threads it runs; a two-thread training step ran 25x slower so than the same script started
plainly from the same shell. The price is that nothing else
stops them when advisor itself dies abruptly (SIGKILL, an OOM kill, a closed CI job): a training
script would keep the GPU busy, a TensorBoard server would keep the port. On Linux the kernel can
send a signal to a process when its parent dies (``prctl(PR_SET_PDEATHSIG)``); this module asks
for it, and makes the capture child the subreaper of what the script orphans
(:func:`become_subreaper`). It also holds the sweeps that end a whole process tree (:class:`ProcessTree`,
:func:`kill_group`, :func:`end_own_children`) and turns SIGTERM/SIGHUP into the same clean stop as
Ctrl-C (:func:`interrupt_once`), and ends a process without the interpreter's teardown
(:func:`quick_exit`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from advisor import _listeners, _proctree

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36


def own_group(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn`` of a measured child: its own process group in the caller's session, ``sig`` when the parent dies.

    A process group, not a session (``start_new_session``): see the module doc.
    """
    os.setpgid(0, 0)
    die_with_parent(sig)


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


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    A process the script started whose parent exits is re-parented to the nearest subreaper
    ancestor instead of init. The capture child asks for it, so whatever the script leaves --
    a daemon double-forked into a session of its own (``start_new_session=True``), which leaves
    the process group and, orphaned within milliseconds, escaped the parent's tree sweep --
    stays its descendant, and :func:`end_own_children` ends it.

    Returns:
        True when the request was registered; False where the platform has no such mechanism.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pgid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


LAST_GRACE_S = 2.0
"""After a second ^C while the child saves, how long it may still take before it is killed."""

_STOP_POLL_S = 0.05

HURRY = threading.Event()
"""Set by a signal that arrives while the first one's clean-up runs (:func:`interrupt_once`)."""


def stop_child(proc: Any, grace_s: float, last_grace_s: float = LAST_GRACE_S) -> None:
    """SIGTERM ``proc`` (its handler saves what it measured), wait ``grace_s``, then kill its group.

    A second ^C (or SIGTERM, SIGHUP) shortens the wait to ``last_grace_s`` instead of ending it
    at once: a double Ctrl-C, typed 50 ms apart, killed the child in the middle of writing its
    measurements, and the run lost every timed step (issue #30). Inside :func:`interrupt_once`
    the second signal only sets :data:`HURRY`; elsewhere it raises here and is absorbed. The
    caller goes on with the first interrupt, and saves what the child wrote.
    """
    import subprocess
    import time

    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None:
        now = time.monotonic()
        if HURRY.is_set():
            deadline = min(deadline, now + last_grace_s)
        if now >= deadline:
            break
        try:
            proc.wait(timeout=min(_STOP_POLL_S, deadline - now))
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            HURRY.set()
    if proc.poll() is None:
        kill_group(proc.pid)
    proc.wait()


def group_members(pgid: int) -> list[int]:
    """PIDs of the live processes in process group ``pgid`` (empty where psutil is unusable)."""
    try:
        import psutil

        pids = psutil.pids()
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: nothing to sweep
        return []
    members = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid:
                members.append(pid)
    return members


def end_own_children() -> None:
    """Kill this process's descendants and the other members of the process group it leads.

    For a child that leads its own process group (the capture child): whatever the script started,
    including a subprocess whose parent already exited (it stays in our group), must not outlive
    the capture when advisor is no longer there to sweep the group. The folders their
    multiprocessing listeners would have removed at their exit go with them (:mod:`advisor._listeners`).
    """
    me = os.getpid()
    procs: list[Any] = []
    with contextlib.suppress(Exception):  # psutil unusable: the group sweep below still runs
        import psutil

        procs = psutil.Process(me).children(recursive=True)
    group = [pid for pid in group_members(me) if pid != me] if os.getpgrp() == me else []
    left = _listeners.listener_dirs({*(p.pid for p in procs), *group})
    for child in procs:
        with contextlib.suppress(Exception):
            child.kill()
    for pid in group:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _listeners.remove(left)


class ProcessTree:
    """Every process started below ``pid``, remembered while it runs, so all can be ended.

    torchrun starts each rank in a session of its own, and a script may start processes that
    leave its process group (``setsid``) or outlive their parent: ending a process group does not
    reach those. Calling :meth:`refresh` while the job runs remembers each descendant once seen;
    :meth:`kill_all` ends those still alive (``is_running`` guards against PID reuse).
    """

    def __init__(self, pid: int) -> None:
        self.seen: dict[int, Any] = {}
        self.over_budget: int | None = None  # the memory (memory_bytes) that broke a memory budget
        try:
            import psutil

            self._root: Any = psutil.Process(pid)
        except Exception:  # noqa: BLE001 - already gone, or psutil unusable
            self._root = None

    def refresh(self) -> None:
        """Remember the current descendants (read from the tree's own ``/proc`` entries where the kernel lists them)."""
        if self._root is None:
            return
        with contextlib.suppress(Exception):
            import psutil

            for child in _proctree.handles(psutil, self._root, skip=self.seen):
                self.seen[child.pid] = child

    def rss_bytes(self) -> int:
        """Resident memory of the root and every remembered descendant still running, summed.

        An upper bound of :meth:`memory_bytes` (a shared page counts in every process that maps
        it), read in microseconds where USS takes milliseconds per process.
        """
        total = 0
        for proc in (self._root, *self.seen.values()):
            if proc is None:
                continue
            with contextlib.suppress(Exception):
                total += int(proc.memory_info().rss)
        return total

    def memory_bytes(self) -> int:
        """Memory the process tree would hold on a machine of its own, shared pages counted once.

        The root counts its resident size (RSS): everything it maps, libraries included, as it
        would hold them alone (its pages shared with advisor's warm-start server, or any process
        outside the tree, are its own on the user's machine). Each descendant still running adds
        only the memory it does not share (USS): a DataLoader worker forked from the training
        process shares that process's torch and heap pages, which the root's RSS already
        counts. Summing RSS instead counted them once per worker, and a ``--memory-budget``
        stopped runs that fit. A descendant whose USS cannot be read (no
        ``/proc/PID/smaps_rollup``, no permission) counts its RSS.
        """
        total = 0
        if self._root is not None:
            with contextlib.suppress(Exception):
                total += int(self._root.memory_info().rss)
        for proc in self.seen.values():
            with contextlib.suppress(Exception):
                total += _unshared_bytes(proc)
        return total

    def listener_dirs(self) -> list[Path]:
        """Return the listener folders (:mod:`advisor._listeners`) of the root and the remembered processes still running."""
        alive = []
        for proc in (self._root, *self.seen.values()):
            with contextlib.suppress(Exception):
                if proc is not None and proc.is_running():
                    alive.append(proc.pid)
        return _listeners.listener_dirs(alive)

    def kill_all(self) -> None:
        """Kill every remembered process still running, and remove the listener folders they held."""
        left = self.listener_dirs()
        for child in self.seen.values():
            with contextlib.suppress(Exception):
                if child.is_running():
                    child.kill()
        _listeners.remove(left)


def _unshared_bytes(proc: Any) -> int:
    """One process's USS in bytes (memory no other process maps), or its RSS where USS cannot be read."""
    import psutil

    try:
        return int(proc.memory_full_info().uss)
    except (psutil.AccessDenied, AttributeError):  # smaps unreadable, or a psutil without USS
        return int(proc.memory_info().rss)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so the same clean-up runs (children ended, data saved)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Latch:
    """The stop signals seen by the :func:`interrupt_once` blocks in force (nested blocks share it)."""

    def __init__(self) -> None:
        self.depth = 0
        self.signum: int | None = None


_LATCH = _Latch()


@contextlib.contextmanager
def interrupt_once(asked: list[Any] | None = None, final: bool = False) -> Iterator[None]:
    """Inside the block the first SIGINT, SIGTERM or SIGHUP raises; the second only sets :data:`HURRY`.

    The first raises as Ctrl-C does (:class:`KeyboardInterrupt`, or :class:`Interrupted` carrying
    SIGTERM/SIGHUP: without a handler either would end Python at once, no ``finally`` run, the
    script's process tree left running), so the clean-up that saves what was measured runs. A
    second ^C typed 50 ms later landed inside that clean-up -- before the child was even asked
    to save -- and its own KeyboardInterrupt skipped the save: no capture, no report (issue #30,
    seen in CI); typed 200 ms later it printed a traceback during the exit. Now it hurries the
    clean-up instead (:func:`stop_child` gives the child ``LAST_GRACE_S``). A third raises again:
    the user insists, or the first raise was swallowed where Python ignores exceptions (a
    ``__del__``). Nested blocks share one count, so the CLI's block covers the whole exit.
    ``asked[0]`` is set to each signal's number. Outside the main thread it does nothing; a
    signal the process ignores (``nohup`` ignores SIGHUP) stays ignored.

    ``final``: the process ends after the block (the CLI's). Once a signal was seen its handlers
    stay, so a second ^C during the exit (the error line, the exit's collection) is absorbed
    too instead of printing a traceback.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, _frame: object) -> None:
        if asked is not None:
            asked[0] = signum
        if _LATCH.signum is not None and not HURRY.is_set():
            HURRY.set()
            return
        _LATCH.signum = _LATCH.signum or signum
        raise KeyboardInterrupt if signum == signal.SIGINT else Interrupted(signum)

    if _LATCH.depth == 0:
        _LATCH.signum = None
        HURRY.clear()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # NOTE: ignored on purpose (``nohup advisor ...``): keep ignoring it
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, on_signal)
    _LATCH.depth += 1
    try:
        yield
    finally:
        _LATCH.depth -= 1
        if final and _LATCH.signum is not None:
            previous.clear()
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)


def exit_code_of(exc: SystemExit) -> int:
    """Return the process exit code Python would use for this SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # Python prints a non-int exit argument to stderr
    return 1


def quick_exit(code: int, join_threads: bool = True) -> NoReturn:
    """Wait for non-daemon threads, run the exit hooks, flush stdout and stderr, and end the process with ``code``.

    These are the parts of a normal exit that run anyone's code, in the interpreter's order
    (``weakref.finalize`` and ``tempfile`` clean-ups are exit hooks). What is skipped is the
    freeing of every object, and with it the flush of a file left open, so it ends processes
    whose files are closed or not ours to flush: a measured run that its script ended (a process
    that imported torch and ``torch._dynamo`` spent 0.65-1.05 s in CPython's shutdown here,
    against 0.04 s so; finding open files would take a scan of every object, 0.15-0.3 s), and
    the command line after its command returned (``advisor analyze`` of a 385 MB trace: 55-68 ms
    of teardown, 12-16 ms so). ``join_threads=False`` leaves threads running: a program that
    left one behind by mistake would otherwise never end (torchrun's, :mod:`advisor.distributed.torchrun_main`).
    """
    if join_threads:
        main, me = threading.main_thread(), threading.current_thread()
        for thread in threading.enumerate():
            if thread is not main and thread is not me and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    flush_std_streams()
    os._exit(code)


def flush_std_streams() -> None:
    """Flush stdout and stderr, as an exit would, before ``os._exit``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed or broken stream: nothing left to lose
            pass
