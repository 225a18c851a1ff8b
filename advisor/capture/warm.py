"""Warm start for timed runs: a fork server that imports torch once and forks one child per run.

A cold capture child is a fresh interpreter: ``python -m advisor.capture.child`` imports
advisor, torch and the script's libraries before the script's first line, every run. The fix
loop runs the same script dozens of times, so :class:`WarmServer` starts one long-lived process
(``python -m advisor.capture.warm``) that imports them once -- torch, advisor's child-side
modules, the modules the parent names (the fix runtime) and the script's own top-level imports
of installed modules, read from its AST (:func:`script_imports`; the script's code never runs
there) -- and then, per run, forks a child that becomes exactly the cold child: its own process group,
the run's working directory, environment and log files on fds 0-2, then
:func:`advisor.capture.child.main` with the same ``config.json``. The parent drives it through
:class:`WarmProcess`, which answers like ``subprocess.Popen`` (``pid``, ``poll``, ``wait``,
``send_signal``, ``returncode``), so the capture's watchdogs, sampler and process-group kills
work unchanged.

Fork safety: the server computes nothing before it forks. torch's intra-op (OpenMP) and
inter-op pools start at the first parallel op, CUDA at its first call, Kineto with the first
profiler: none happens in the server, so each child starts them itself, as a cold child does
(``torch.get_num_threads()`` in a warm child is the cold child's default; the ``cpu_threads``
fix sets it per child). A library that starts a thread while it is imported makes the server
refuse to serve (a fork copies only the forking thread), and the runs start cold.

Lifetime: the server leads its own process group, gets SIGKILL when advisor dies
(``PR_SET_PDEATHSIG``), and exits (``os._exit``) when its socket closes; :meth:`WarmServer.pause`
stops it while measured steps run beside its imports (the diagnose launches it before its
capture). Each child gets SIGTERM when the server dies (the cold child's own stop: it saves
what it measured). :class:`WarmServer` is a
context manager: leaving it, normally or by an exception, ends the server.

The warm start is used only where it is safe (:meth:`WarmServer.refusal`): Linux, one process
(no torchrun), no profiler in the run (profiled captures stay cold: their trace and their time
to first step describe the user's real start-up; the kept fixes' profiled run, whose trace alone
is read, is the exception: ``RunSpec.startup_reported``), no GPU visible to a CUDA/ROCm build of torch
(unless ``ADVISOR_WARM_GPU=1``, an experiment: :func:`advisor.capture.warm_preload.cuda_started`),
and the environment the server was started with. Elsewhere, and when the server cannot start or
dies, runs start cold; :func:`warm_runner` does that choice per run and re-runs cold a run the
server's death cut short.

This module is the parent's half and the server's command line; the server process itself is
:mod:`advisor.capture.warm_server`, what it imports :mod:`advisor.capture.warm_preload`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from advisor._proc import kill_group, own_group
from advisor.capture.model import RunCapture, RunSpec, WarmStartLost
from advisor.capture.syspath import PYTHON_FLAGS
from advisor.capture.warm_preload import LAZY_MODULES, ON_SIGHT_MODULES
from advisor.capture.warm_process import WarmProcess
from advisor.capture.warm_server import main, receive_message, send_message

SERVER_MODULES = (
    "torch",
    # NOTE: a script's first optimizer imports torch._dynamo (and sympy with it, about 800
    # modules and 1.5 s on this machine); in the server it is paid once, not in every run's set-up
    # (WarmServer.skip leaves it out for a script that never imports it).
    *LAZY_MODULES,
    *ON_SIGHT_MODULES,
    "advisor.capture.child",
    "advisor.capture.hooks",
    "advisor.capture.usercode",
    "advisor.capture.scriptconfig",
)
"""What every server imports: torch and the child's own modules (the cold child imports them all)."""

READY_TIMEOUT_S = 300.0
"""How long the server may take to import everything (a loaded 2-core machine takes a while)."""
@dataclass
class WarmServer:
    """The parent's handle on the fork server: start it, spawn runs through it, end it.

    Attributes:
        spec: The spec the runs derive from (its script's imports are preloaded, its
            environment is the server's).
        modules: Extra modules to import in the server (the fix runtime).
        skip: Modules of :data:`SERVER_MODULES` to leave out (a lazily imported one the script
            was seen not to import); by default compile's, imported only where the script was
            seen to compile.
        log: Where the server's own stdout/stderr go (import warnings).
    """

    spec: RunSpec
    modules: tuple[str, ...] = ()
    log: Path | None = None
    skip: tuple[str, ...] = ON_SIGHT_MODULES
    ready_timeout_s: float = READY_TIMEOUT_S
    proc: subprocess.Popen[bytes] | None = None
    sock: socket.socket | None = None
    refused: str | None = None
    imported: tuple[str, ...] = ()
    start_s: float = 0.0
    waited_s: float = 0.0
    launched_at: float = 0.0
    is_ready: bool = False
    env: dict[str, str] = field(default_factory=dict)
    paused_s: float = 0.0
    _awaited: int = 1  # ready messages still to read: the start's, then one per extend()
    _extensions: int = 0
    _stopped_at: float = 0.0
    _output: BinaryIO | None = None

    def start(self) -> bool:
        """Start the server and wait until it has imported everything; False (``refused`` says why) if not usable."""
        return self.launch() and self.ready()

    def launch(self) -> bool:
        """Start the server's process and return at once; :meth:`ready` waits for its imports.

        Between the two the caller does its own work (the diagnose analyses the capture while the
        server imports torch on the other core). False (``refused`` says why) when it cannot start.
        """
        if self.proc is not None or self.refused is not None:
            return self.refused is None
        reason = platform_refusal()
        if reason is not None:
            self.refused = reason
            return False
        from advisor.capture.run import child_env

        self.launched_at = time.perf_counter()
        self.env = child_env(self.spec)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        setup = {
            "modules": [*(m for m in SERVER_MODULES if m not in self.skip), *self.modules],
            "script": str(Path(self.spec.script).resolve()),
            "module": self.spec.module,
            "run_dir": str(self.spec.out_dir),  # NOTE: unused; names the run on the command line (ps)
        }
        log: BinaryIO | int = subprocess.DEVNULL
        try:
            if self.log is not None:
                # NOTE: an unnamed file, written into ``log`` when the server ends: a server
                # launched before the capture must not put a file in a folder the capture has
                # yet to check and prepare.
                log = self._output = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, "-m", "advisor.capture.warm", str(theirs.fileno()), json.dumps(setup)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=str(self.spec.cwd) if self.spec.cwd is not None else None,
                env=self.env, pass_fds=(theirs.fileno(),),
                preexec_fn=partial(own_group, signal.SIGKILL),  # noqa: PLW1509 - setpgid and prctl only
            )
        except OSError as exc:
            self.refused = f"the server could not start ({exc.strerror or exc})"
            ours.close()
            return False
        finally:
            theirs.close()
        self.sock = ours
        return True

    def ready(self) -> bool:
        """Wait until the launched server has imported everything (at once if it has); False (``refused``) if it cannot serve.

        ``start_s`` is then its whole start, ``waited_s`` the part the caller spent waiting for it.
        """
        return self._ready_within(self.ready_timeout_s)

    def _ready_within(self, timeout: float) -> bool:
        if self.is_ready or self.refused is not None or self.sock is None:
            return self.is_ready and self.refused is None
        self.resume()
        t0 = time.perf_counter()
        while self._awaited:
            msg = self.receive(max(0.0, timeout - (time.perf_counter() - t0)))
            now = time.perf_counter()
            if msg is None and timeout < self.ready_timeout_s:
                self.waited_s += now - t0
                return False  # not yet
            # NOTE: the server's own clock: a ready message read late (by pause()) is not a slow start
            own = (msg or {}).get("import_s")
            first = self._awaited > self._extensions  # the start's message, read before any extension's
            self.start_s += (own if isinstance(own, float) else now - self.launched_at) - (self.paused_s if first else 0.0)
            if msg is None or msg.get("lost") or not msg.get("ready"):
                self.waited_s += now - t0
                self.refused = (msg or {}).get("refusal") or (
                    "the server did not get ready in time" if msg is None else "the server died while importing"
                )
                self.close()
                return False
            self.imported += tuple(msg.get("imported") or ())
            self._awaited -= 1
        self.waited_s += time.perf_counter() - t0
        self.is_ready = True
        return True

    def extend(self, modules: Sequence[str]) -> bool:
        """Have the server import ``modules`` too before its next run, without waiting (False: it cannot).

        The request waits in the socket while the server is still starting; :meth:`ready` then
        waits for both. ``skip`` loses the modules; ``imported``, ``start_s`` and ``waited_s``
        count the extension's part.
        """
        if not self.alive or self.sock is None:
            return False
        try:
            send_message(self.sock, {"preload": list(modules)})
        except OSError:
            self._died()
            return False
        self.skip = tuple(m for m in self.skip if m not in modules)
        self._awaited += 1
        self._extensions += 1
        self.is_ready = False
        return True

    def pause(self, busy: bool = False) -> None:
        """Stop the server's imports (SIGSTOP) while a measurement runs beside them, unless it is ready and not ``busy``.

        The diagnose launches the server before its capture, so that torch is imported beside
        the capture's own start; from the capture's first step until :meth:`resume`, the server
        must take no CPU from the steps being measured (nor its child timing an exit: ``busy``).
        """
        if self._stopped_at or self.proc is None or self.proc.poll() is not None or self._ready_within(0.0) and not busy:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGSTOP)
            self._stopped_at = time.perf_counter()

    def resume(self) -> None:
        """Let a paused server go on importing (SIGCONT); nothing when it is not paused."""
        if not self._stopped_at or self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.paused_s += time.perf_counter() - self._stopped_at
        self._stopped_at = 0.0

    @property
    def alive(self) -> bool:
        """Whether runs can be forked now."""
        return self.refused is None and self.sock is not None and self.proc is not None and self.proc.poll() is None

    def refusal(self, spec: RunSpec) -> str | None:
        """Say why ``spec`` must start cold; None when this server can run it."""
        code = self.proc.poll() if self.proc is not None else None
        if code is not None and self.refused is None:
            self.refused = f"the warm-start server died (exit code {code})"
        if not self.alive:
            return self.refused or "the warm-start server is not running"
        why = spec_refusal(spec)
        if why is not None:
            return why
        if Path(spec.script).resolve() != Path(self.spec.script).resolve() or spec.module != self.spec.module:
            return "the server preloaded another script's imports"
        from advisor.capture.run import child_env

        if child_env(spec) != self.env:
            return "the run's environment differs from the server's"
        if (spec.cwd or None) != (self.spec.cwd or None):
            return "the run's working directory differs from the server's"
        return None

    def spawn(self, config: Path, cwd: str | None, env: dict[str, str], stdin: int, stdout: int, stderr: int) -> WarmProcess:
        """Fork a child that runs ``config`` with these fds as 0-2; raise WarmStartLost if the server is gone."""
        if not self.alive or self.sock is None:
            raise WarmStartLost(self.refused or "the warm-start server is not running")
        try:
            send_message(self.sock, {"config": str(config), "cwd": cwd, "env": env}, (stdin, stdout, stderr))
        except OSError as exc:
            self._died()
            raise WarmStartLost(f"the warm-start server is gone ({exc.strerror or exc})") from None
        msg = self.receive(self.ready_timeout_s)
        if msg is None or "pid" not in msg:
            self._died()
            raise WarmStartLost("the warm-start server did not fork the run")
        return WarmProcess(self, int(msg["pid"]))

    def popen(self, cmd: list[str], spec: RunSpec, stdout: BinaryIO, stderr: BinaryIO) -> WarmProcess:
        """Start a run as :func:`advisor.capture.run.started` would with Popen (``cmd[-1]`` is its config)."""
        from advisor.capture.run import child_env

        with open(os.devnull, "rb") as null:
            return self.spawn(Path(cmd[-1]), str(spec.cwd) if spec.cwd is not None else None,
                              child_env(spec), null.fileno(), stdout.fileno(), stderr.fileno())

    def receive(self, timeout: float | None) -> dict[str, Any] | None:
        """Return the server's next message (None after ``timeout`` s); ``{"lost": True}`` once it has died."""
        if self.sock is None:
            return {"lost": True}
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return None
            msg, fds = receive_message(self.sock)
        except (OSError, ValueError):
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:
            self._died()
            return {"lost": True}
        return msg

    def _died(self) -> None:
        self.refused = self.refused or "the warm-start server died"
        self.close()

    def close(self) -> None:
        """End the server (its socket closes, then the process); safe to call twice."""
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        proc = self.proc
        if proc is None:
            return
        self.resume()  # a stopped process would never see its socket close
        if not self.is_ready:
            kill_group(proc.pid)  # still importing: it reads no socket, and has nothing to save
        try:
            proc.wait(timeout=2.0)  # it exits by itself when its socket closes
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
        self.refused = self.refused or "the warm-start server was closed"
        self._keep_log()

    def _keep_log(self) -> None:
        """Write what the server printed (import warnings) to ``log``; nothing when it printed nothing."""
        output, self._output = self._output, None
        if output is None:
            return
        with output, contextlib.suppress(OSError):
            output.seek(0)
            data = output.read()
            if data and self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                self.log.write_bytes(data)

    def __enter__(self) -> WarmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spec_refusal(spec: RunSpec) -> str | None:
    """Say why ``spec`` itself must start cold, whatever the server (None when it may start warm)."""
    if spec.multi_process:
        return "torchrun launches its own processes"
    if spec.startup_reported and (spec.profiled_steps > 0 or (spec.cprofile_steps or 0) > 0):
        return "profiled runs start cold"
    if spec.fresh_process:
        return "the fix measured depends on the allocator state a forked run inherits"
    return platform_refusal()


def platform_refusal() -> str | None:
    """Say why this platform cannot warm-start (None on Linux with fork and fd passing)."""
    if not sys.platform.startswith("linux"):
        return "the warm start forks, which only Linux does safely"
    if not hasattr(os, "fork") or not hasattr(socket, "send_fds"):
        return "this Python has no fork or fd passing"
    return None


# ----- the runner -----------------------------------------------------------------------------


@dataclass
class WarmStats:
    """What the warm start did over a loop, for its report: runs per start kind and why some were cold."""

    warm: int = 0
    cold: int = 0
    server_pid: int | None = None
    start_s: float = 0.0
    waited_s: float = 0.0
    imported: tuple[str, ...] = ()
    cold_reasons: dict[str, int] = field(default_factory=dict)

    def notes(self, runs: str = "trial runs") -> list[str]:
        """One line for the report; ``runs`` names the runs (``cell runs`` in a sweep)."""
        if not self.warm and not self.cold:
            return []
        why = "; ".join(f"{reason} ({n})" for reason, n in self.cold_reasons.items())
        line = f"{runs}: {self.warm} warm-started, {self.cold} cold"
        if self.warm:
            shown = ", ".join(m for m in self.imported if not m.startswith("advisor."))
            line += f" (forked from a server that imported {shown} once, in {self.start_s:.1f} s)"
        return [line + (f"; cold because {why}" if why else "")]


Capture = Callable[..., RunCapture]


@contextlib.contextmanager
def warm_runner(
    spec: RunSpec, capture: Capture, *, enabled: bool = True, modules: Sequence[str] = (),
    log: Path | None = None, launched: WarmServer | None = None,
) -> Iterator[tuple[Callable[..., RunCapture], WarmStats]]:
    """Yield a runner ``(spec, progress=None) -> RunCapture`` that warm-starts each run it can.

    ``capture`` is :func:`advisor.capture.run.capture`. The server starts on the first run that
    could use it (a loop that runs nothing starts nothing) and ends when the block is left,
    however it is left. A run the server's death cut short is run again cold. ``launched`` is a
    server the caller already started for ``spec`` (:func:`launch_early`), whose imports ran
    while the caller worked: the first run waits for it instead of starting one, and it ends
    with the block like one started here.
    """
    stats = WarmStats()
    state: dict[str, Any] = {"server": launched, "why": None if enabled else "--cold-start was asked for"}
    if enabled and not forks(capture):
        state["why"] = "the capture stage in use cannot fork runs"  # a test's fake, torchrun's launcher

    def server_for(run: RunSpec) -> WarmServer | None:
        if state["why"] is not None:
            return None
        server = state["server"]
        if server is None:
            server = state["server"] = WarmServer(replace(run, out_dir=spec.out_dir), tuple(modules), log)
        if not server.is_ready and not server.start():
            state["why"] = server.refused
            return None
        if stats.server_pid is None:  # NOTE: a launched server may have got ready while paused (WarmServer.pause)
            stats.start_s, stats.waited_s, stats.imported = server.start_s, server.waited_s, server.imported
            stats.server_pid = server.proc.pid if server.proc is not None else None
        return server

    def cold(run: RunSpec, progress: Any, why: str | None) -> RunCapture:
        stats.cold += 1
        reason = why or "the warm start was not usable"
        stats.cold_reasons[reason] = stats.cold_reasons.get(reason, 0) + 1
        return capture(run, progress=progress)

    def run(run: RunSpec, progress: Any = None) -> RunCapture:
        # NOTE: the spec's own reasons first: a profiled run must not start the server.
        why = spec_refusal(run) if state["why"] is None else None
        if why is not None:
            return cold(run, progress, why)
        server = server_for(run)
        if server is None:
            return cold(run, progress, state["why"])
        why = server.refusal(run)
        if why is not None:
            return cold(run, progress, why)
        try:
            result = capture(run, progress=progress, warm=server)
        except WarmStartLost as exc:
            state["why"] = f"{exc}; later runs started cold"
            return cold(run, progress, str(exc))
        stats.warm += 1
        return result

    try:
        yield run, stats
    finally:
        if state["server"] is not None:
            state["server"].close()


def forks(capture: Capture) -> bool:
    """Whether ``capture`` can run a spec forked from a server (it takes ``warm``); torchrun's launcher cannot."""
    import inspect

    return "warm" in inspect.signature(capture).parameters


def launch_early(
    spec: RunSpec, capture: Capture, *, enabled: bool = True, modules: Sequence[str] = (),
    log: Path | None = None, skip: Sequence[str] = ON_SIGHT_MODULES,
) -> WarmServer | None:
    """Start a server for the runs of ``spec`` now, without waiting for it (None where runs of it start cold).

    For :func:`warm_runner`'s ``launched`` (with the same ``capture``): the caller's next seconds
    of work (the diagnose's analysis) then overlap the server's imports. The caller must end it
    (leaving the runner's block does), also when no run follows. ``skip``: see
    :attr:`WarmServer.skip`.
    """
    if not enabled or not forks(capture) or spec_refusal(replace(spec, profiled_steps=0, cprofile_steps=0)) is not None:
        return None
    server = WarmServer(spec, tuple(modules), log, tuple(skip))
    if not server.launch():
        return None
    return server


if __name__ == "__main__":
    main()
