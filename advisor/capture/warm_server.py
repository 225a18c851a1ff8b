"""The warm-start server process: ``python -m advisor.capture.warm`` imports, then forks one child per run.

:func:`main` preloads (:mod:`advisor.capture.warm_preload`), says whether it is ready, then
:func:`serve` forks a child per request on its socket; each child leaves the server's loop and
becomes exactly the cold child (:func:`advisor.capture.child.main`). The parent's half, and why
forking is safe, are in :mod:`advisor.capture.warm`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor._proc import die_with_parent, flush_std_streams
from advisor.capture.warm_preload import preload, preload_more

MAX_MESSAGE = 1 << 20
FDS = 3  # stdin, stdout, stderr of the run


@dataclass
class _Job:
    """What a forked child goes on to run (returned out of the server's loop, in the child only)."""

    config: str
    t0: float


def send_message(sock: socket.socket, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Send one message, with ``fds`` passed along it (the run's fds 0-2)."""
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def receive_message(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """Return one message and the fds it carried; (None, []) when the other end has closed."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


def serve(sock: socket.socket) -> _Job | None:
    """Fork a child per request until the parent closes the socket (then return None).

    In the forked child this returns the child's job instead: its stack unwinds out of the
    server's loop, so the child runs exactly as ``python -m advisor.capture.child`` would.
    """
    server = os.getpid()
    while True:
        msg, fds = receive_message(sock)
        if msg is None:
            return None
        if "preload" in msg and not fds:  # what the capture showed the runs need besides
            send_message(sock, preload_more(msg["preload"]))
            continue
        if "end" in msg and not fds:  # how long a plain run's exit takes (advisor.capture.end_probe)
            send_message(sock, _time_the_end())
            continue
        if len(fds) != FDS:
            for fd in fds:
                os.close(fd)
            send_message(sock, {"error": f"expected {FDS} file descriptors, got {len(fds)}"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            t0 = time.perf_counter()
            sock.close()
            _become_child(msg, fds, server)
            return _Job(config=str(msg["config"]), t0=t0)
        for fd in fds:
            os.close(fd)
        _, status = _report_run(sock, pid)
        if status is None:
            return None  # the parent is gone: so are we (the child has its own stop, SIGTERM)


def _report_run(sock: socket.socket, pid: int) -> tuple[int, int | None]:
    """Tell the parent the child's pid, reap the child, tell its exit code; None once the parent is gone."""
    try:
        send_message(sock, {"pid": pid})
    except OSError:
        os.waitpid(pid, 0)
        return pid, None
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        send_message(sock, {"exit": code})
    except OSError:
        return pid, None
    return pid, code


def _time_the_end() -> dict[str, Any]:
    """Fork a child that only exits the usual way, and return its wall and CPU seconds.

    The child holds what the server imported (the script's imports) and nothing the script
    made, so its exit is CPython's shutdown as a plain run of the script pays it after its
    last step. ``SystemExit`` leaves the server's loop in the child, and ``main`` has no handler
    for it: the interpreter then ends as a script's would.
    """
    flush_std_streams()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        die_with_parent(signal.SIGKILL)
        raise SystemExit(0)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        return {"end": None}
    return {"end": {"wall_s": round(wall, 4), "cpu_s": round(usage.ru_utime + usage.ru_stime, 4)}}


def _become_child(msg: dict[str, Any], fds: list[int], server: int) -> None:
    """Turn the fresh fork into what Popen would have started: session, signals, cwd, env, fds 0-2."""
    # NOTE: its own process group (the parent ends it whole), in the user's session: a session
    # of its own is scheduled as one group beside everything else (Linux autogroup, see
    # advisor.capture.run.started), which slowed a two-thread script 25x beside a busy process.
    os.setpgid(0, 0)
    die_with_parent(signal.SIGTERM)
    if os.getppid() != server:  # the server died before the request above was registered
        os.kill(os.getpid(), signal.SIGTERM)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if msg.get("cwd"):
        os.chdir(msg["cwd"])
    os.environ.clear()
    os.environ.update(msg.get("env") or {})
    sys.argv = [sys.modules["advisor.capture.child"].__file__ or "", str(msg["config"])]
    # NOTE: every fork would otherwise share the server's random state; a cold child seeds
    # random (and numpy, on import) from the OS. The run's --seed, when set, comes after.
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        with contextlib.suppress(Exception):
            numpy.random.seed()


def _exit_now() -> None:
    """End the server at once: it holds nothing to save, and tearing down torch's modules took 0.6-1.1 s the parent waited for."""
    flush_std_streams()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m advisor.capture.warm FD SETUP_JSON`` (started by :class:`advisor.capture.warm.WarmServer`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m advisor.capture.warm FD SETUP_JSON (started by advisor)", file=sys.stderr)
        raise SystemExit(2)
    die_with_parent(signal.SIGKILL)
    sock = socket.socket(fileno=int(args[0]))
    setup = json.loads(args[1])
    t0 = time.perf_counter()
    try:
        ready = preload(setup.get("modules", ()), setup.get("script"), setup.get("module"))
        ready["import_s"] = time.perf_counter() - t0
    except BaseException as exc:  # noqa: BLE001 - say why, then go: the parent runs cold
        send_message(sock, {"ready": False, "refusal": f"the server's imports failed ({type(exc).__name__}: {exc})"})
        raise SystemExit(1) from None
    send_message(sock, ready)
    job = serve(sock) if ready["ready"] else None
    if job is None:
        _exit_now()
    from advisor.capture.child import main as child_main

    child_main([job.config], t0=job.t0)
