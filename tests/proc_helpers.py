"""Finding the processes a test started, and making sure none outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

T = TypeVar("T")


def pids_with_args(*args: str) -> list[int]:
    """PIDs of processes whose command line holds every one of ``args`` as an argument."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if all(a in cmd for a in args):
            found.append(p.info["pid"])
    return found


def gone_within(*args: str, timeout_s: float = 30.0) -> list[str]:
    """Wait for the processes matching ``args`` to end; SIGKILL and describe any still left.

    The kill keeps a failing test from leaking a hung script or a server into the next ones;
    the caller asserts the returned list is empty. Each leftover is ``PID (parent PPID, STATE):
    COMMAND LINE``, so a failure says which process outlived its run.
    """
    deadline = time.monotonic() + timeout_s
    while pids_with_args(*args) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [_describe(pid) for pid in pids_with_args(*args)]
    for pid in pids_with_args(*args):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _describe(pid: int) -> str:
    try:
        p = psutil.Process(pid)
        return f"{pid} (parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())[:300]}"
    except psutil.Error:
        return f"{pid} (gone)"


def survivors(run_dir: Path) -> list[int]:
    """PIDs of processes whose command line names ``run_dir`` (a run's capture children and their workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(run_dir).encode() in cmd:
            found.append(int(entry.name))
    return found


def survivors_after(run_dir: Path, timeout_s: float = 30.0) -> list[int]:
    """Wait (bounded, never a fixed sleep) for the run's processes to end; return those still there.

    A run's process group is sent SIGKILL as advisor exits; its DataLoader workers may take a
    moment to be reaped.
    """
    gone_by = time.monotonic() + timeout_s
    while survivors(run_dir) and time.monotonic() < gone_by:
        time.sleep(0.1)
    return survivors(run_dir)


def signal_when(
    proc: subprocess.Popen[str], ready: Callable[[], T | None], sig: int, waiting_for: str, give_up_s: float,
) -> tuple[T, str]:
    """Poll ``ready()`` while ``proc`` runs; once it returns a value, send ``sig`` and wait for the exit.

    Returns that value and the process's stderr. ``proc`` is killed if it is still running when
    this returns or fails (a broken build must not leave it behind); ``give_up_s`` only bounds a
    wait for a condition that never comes.
    """
    try:
        deadline = time.monotonic() + give_up_s
        while (value := ready()) is None:
            assert proc.poll() is None, f"advisor ended before {waiting_for}: {proc.communicate()}"
            assert time.monotonic() < deadline, f"{waiting_for}: not in {give_up_s:.0f} s"
            time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        return value, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def interrupt(proc: subprocess.Popen, timeout_s: float = 30.0) -> tuple[str, str]:
    """Send ``proc`` SIGINT (what Ctrl-C delivers) and collect its output; SIGKILL it if it hangs."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()
