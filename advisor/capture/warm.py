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
(``PR_SET_PDEATHSIG``), and exits when its socket closes; each child gets SIGTERM when the
server dies (the cold child's own stop: it saves what it measured). :class:`WarmServer` is a
context manager: leaving it, normally or by an exception, ends the server.

The warm start is used only where it is safe (:meth:`WarmServer.refusal`): Linux, one process
(no torchrun), no profiler in the run (profiled captures stay cold: their trace and their time
to first step describe the user's real start-up), no GPU visible to a CUDA/ROCm build of torch,
and the environment the server was started with. Elsewhere, and when the server cannot start or
dies, runs start cold; :func:`warm_runner` does that choice per run and re-runs cold a run the
server's death cut short.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import importlib
import importlib.util
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from advisor._proc import die_with_parent, kill_group, own_group
from advisor.capture.model import RunCapture, RunSpec, WarmStartLost

SERVER_MODULES = (
    "torch",
    # NOTE: a script's first optimizer step imports torch._dynamo (and sympy with it, about 800
    # modules and 1.5 s on this machine); in the server it is paid once, not in every run's set-up.
    "torch._dynamo",
    "advisor.capture.child",
    "advisor.capture.hooks",
    "advisor.capture.usercode",
    "advisor.capture.scriptconfig",
)
"""What every server imports: torch and the child's own modules (the cold child imports them all)."""

READY_TIMEOUT_S = 300.0
"""How long the server may take to import everything (a loaded 2-core machine takes a while)."""
GONE_TIMEOUT_S = 15.0
"""After the server's death, how long a child it forked may take to save and exit before it is killed."""
_MAX_MESSAGE = 1 << 20
_FDS = 3  # stdin, stdout, stderr of the run


# ----- the script's imports ------------------------------------------------------------------


def script_imports(path: Path) -> list[str]:
    """Return the modules ``path`` imports at its top level, in order, without running it.

    Plain ``import a.b`` and ``from a.b import c`` statements directly in the module body (not
    inside functions, ``if`` or ``try``, which may be conditional); relative imports and
    ``__future__`` are left out. A file that cannot be read or parsed has none.
    """
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
            names.append(node.module)
    return list(dict.fromkeys(names))


def installed_module(name: str, roots: tuple[str, ...]) -> bool:
    """Tell whether ``name``'s top-level package resolves, on the current ``sys.path``, under ``roots``.

    Only the top-level package is looked up (``find_spec`` of a dotted name would import its
    parents): a module of the user's own folders, one shadowing an installed name, a namespace
    package and a missing one are all not installed.
    """
    top = name.split(".", 1)[0]
    if top in sys.modules:
        file = getattr(sys.modules[top], "__file__", None)
        return isinstance(file, str) and os.path.abspath(file).startswith(roots)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin == "built-in" or origin == "frozen":
        return True
    return isinstance(origin, str) and os.path.isabs(origin) and os.path.abspath(origin).startswith(roots)


# ----- the server process ------------------------------------------------------------------------


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def gpu_visible() -> str | None:
    """Say why a GPU may be in use (a CUDA or ROCm torch with a device node present); None when not.

    Decided without calling CUDA: initialising it before a fork would break every child.
    """
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None) is None and getattr(version, "hip", None) is None:
        return None
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return None
    if glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"):
        return "a GPU is visible to this CUDA/ROCm build of torch, and CUDA cannot be forked"
    return None


def preload(modules: Sequence[str], script: str | None, module: str | None) -> dict[str, Any]:
    """Import what the children will need; return the server's ``ready`` message.

    ``script``'s top-level imports are resolved as its child would resolve them (``sys.path[0]``
    is the script's folder, or the working directory for ``-m``) and imported only when they are
    installed modules. An import that fails is left to the script (its child imports it again
    and fails, or not, as it would cold).
    """
    imported: list[str] = []
    failed: list[str] = []
    refusal = None
    base = None
    for name in modules:
        importlib.import_module(name)  # ours and torch: a failure here is the server's failure
        imported.append(name)
        # NOTE: loading torch's libraries starts one idle native thread (it waits on a futex);
        # every cold child has it too. Any thread started after that is refused.
        base = _threads() if base is None else base
        if _threads() > base and refusal is None:
            refusal = f"importing {name} started a thread, which a fork would not copy"
    base = _threads() if base is None else base
    from advisor.capture.usercode import library_roots

    roots = library_roots()
    refusal = refusal or gpu_visible()
    wanted = script_imports(Path(script)) if script else []
    saved = sys.path[0] if sys.path else None
    if sys.path:
        sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(script or "."))
    try:
        for name in wanted:
            if refusal is not None:
                break
            if name in sys.modules or not installed_module(name, roots):
                continue
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - the script's import, the script's problem
                failed.append(f"{name} ({type(exc).__name__})")
                continue
            imported.append(name)
            if _threads() > base:
                refusal = f"importing {name} started a thread, which a fork would not copy"
        refusal = refusal or shadowed(sys.path[0] if sys.path else "")
    finally:
        if saved is not None:
            sys.path[0] = saved
    return {"ready": refusal is None, "refusal": refusal, "imported": imported, "failed": failed,
            "threads": _threads()}


def shadowed(folder: str) -> str | None:
    """Say which module of ``folder`` (the script's ``sys.path[0]``) the server already imported from elsewhere.

    A cold child imports the script's own ``colorsys.py`` when the script asks for it; a warm
    child would find the library's, imported in the server (torch._dynamo brings hundreds of
    modules): such a script must start cold.
    """
    try:
        entries = os.listdir(folder) if folder else []
    except OSError:
        return None
    for entry in sorted(entries):
        name = entry[:-3] if entry.endswith(".py") else entry
        if not name.isidentifier() or name not in sys.modules:
            continue
        if entry.endswith(".py") or os.path.isfile(os.path.join(folder, entry, "__init__.py")):
            return f"the script's folder has {entry}, and the server imported a module of that name from elsewhere"
    return None


@dataclass
class _Job:
    """What a forked child goes on to run (returned out of the server's loop, in the child only)."""

    config: str
    t0: float


def _send(sock: socket.socket, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the fds it carried; (None, []) when the other end has closed."""
    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, _FDS)
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
        msg, fds = _receive(sock)
        if msg is None:
            return None
        if len(fds) != _FDS:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": f"expected {_FDS} file descriptors, got {len(fds)}"})
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
        _send(sock, {"pid": pid})
    except OSError:
        os.waitpid(pid, 0)
        return pid, None
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        _send(sock, {"exit": code})
    except OSError:
        return pid, None
    return pid, code


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


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m advisor.capture.warm FD SETUP_JSON`` (started by :class:`WarmServer`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m advisor.capture.warm FD SETUP_JSON (started by advisor)", file=sys.stderr)
        raise SystemExit(2)
    die_with_parent(signal.SIGKILL)
    sock = socket.socket(fileno=int(args[0]))
    setup = json.loads(args[1])
    try:
        ready = preload(setup.get("modules", ()), setup.get("script"), setup.get("module"))
    except BaseException as exc:  # noqa: BLE001 - say why, then go: the parent runs cold
        _send(sock, {"ready": False, "refusal": f"the server's imports failed ({type(exc).__name__}: {exc})"})
        raise SystemExit(1) from None
    _send(sock, ready)
    if not ready["ready"]:
        raise SystemExit(0)
    job = serve(sock)
    if job is None:
        raise SystemExit(0)
    from advisor.capture.child import main as child_main

    child_main([job.config], t0=job.t0)


# ----- the parent's side -------------------------------------------------------------------------


class WarmProcess:
    """A child forked by the server, answering like ``subprocess.Popen`` for the capture's waits.

    Its exit status comes from the server (the child is the server's, not ours). When the server
    dies first, the child gets SIGTERM (its parent-death signal) and saves what it measured; the
    process is then ``lost`` and the capture raises :class:`WarmStartLost`.
    """

    def __init__(self, server: WarmServer, pid: int) -> None:
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


@dataclass
class WarmServer:
    """The parent's handle on the fork server: start it, spawn runs through it, end it.

    Attributes:
        spec: The spec the runs derive from (its script's imports are preloaded, its
            environment is the server's).
        modules: Extra modules to import in the server (the fix runtime).
        log: Where the server's own stdout/stderr go (import warnings).
    """

    spec: RunSpec
    modules: tuple[str, ...] = ()
    log: Path | None = None
    ready_timeout_s: float = READY_TIMEOUT_S
    proc: subprocess.Popen[bytes] | None = None
    sock: socket.socket | None = None
    refused: str | None = None
    imported: tuple[str, ...] = ()
    start_s: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> bool:
        """Start the server and wait until it has imported everything; False (``refused`` says why) if not usable."""
        reason = platform_refusal()
        if reason is not None:
            self.refused = reason
            return False
        from advisor.capture.run import child_env

        t0 = time.perf_counter()
        self.env = child_env(self.spec)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        setup = {
            "modules": [*SERVER_MODULES, *self.modules],
            "script": str(Path(self.spec.script).resolve()),
            "module": self.spec.module,
            "run_dir": str(self.spec.out_dir),  # NOTE: unused; names the run on the command line (ps)
        }
        log: BinaryIO | int = subprocess.DEVNULL
        try:
            if self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                log = self.log.open("wb")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "advisor.capture.warm", str(theirs.fileno()), json.dumps(setup)],
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
            if not isinstance(log, int):
                log.close()
        self.sock = ours
        msg = self.receive(self.ready_timeout_s)
        self.start_s = time.perf_counter() - t0
        if msg is None or msg.get("lost") or not msg.get("ready"):
            self.refused = (msg or {}).get("refusal") or (
                "the server did not get ready in time" if msg is None else "the server died while importing"
            )
            self.close()
            return False
        self.imported = tuple(msg.get("imported") or ())
        return True

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
            _send(self.sock, {"config": str(config), "cwd": cwd, "env": env}, (stdin, stdout, stderr))
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
            msg, fds = _receive(self.sock)
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
        try:
            proc.wait(timeout=2.0)  # it exits by itself when its socket closes
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
        self.refused = self.refused or "the warm-start server was closed"

    def __enter__(self) -> WarmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spec_refusal(spec: RunSpec) -> str | None:
    """Say why ``spec`` itself must start cold, whatever the server (None when it may start warm)."""
    if spec.nproc_per_node > 1 or spec.nnodes > 1:
        return "torchrun launches its own processes"
    if spec.profiled_steps > 0 or (spec.cprofile_steps or 0) > 0:
        return "profiled runs start cold"
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
    log: Path | None = None,
) -> Iterator[tuple[Callable[..., RunCapture], WarmStats]]:
    """Yield a runner ``(spec, progress=None) -> RunCapture`` that warm-starts each run it can.

    ``capture`` is :func:`advisor.capture.run.capture`. The server starts on the first run that
    could use it (a loop that runs nothing starts nothing) and ends when the block is left,
    however it is left. A run the server's death cut short is run again cold.
    """
    import inspect

    stats = WarmStats()
    state: dict[str, Any] = {"server": None, "why": None if enabled else "--cold-start was asked for"}
    if enabled and "warm" not in inspect.signature(capture).parameters:
        state["why"] = "the capture stage in use cannot fork runs"  # a test's fake, torchrun's launcher

    def server_for(run: RunSpec) -> WarmServer | None:
        if state["why"] is not None:
            return None
        server = state["server"]
        if server is None:
            server = state["server"] = WarmServer(replace(run, out_dir=spec.out_dir), tuple(modules), log)
            if not server.start():
                state["why"] = server.refused
                return None
            stats.start_s, stats.imported = server.start_s, server.imported
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


if __name__ == "__main__":
    main()
