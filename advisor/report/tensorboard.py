"""Serve a run's traces in TensorBoard's PyTorch Profiler plugin (torch-tb-profiler).

The plugin is deprecated upstream and drops every ``user_annotation`` event except
``ProfilerStep#*`` from torch 2.x traces, so DataLoader time shows as 0 (FACTS.md). We therefore
serve a prepared *copy* of the traces (:mod:`advisor.report.tensorboard_logdir`), made in a
temporary folder while TensorBoard runs (so a run directory stores each trace once), in which
those events' category is rewritten to ``cpu_op``; the originals are never touched. Runs are named ``<script>-<time>-<variant>`` and
workers ``rank<N>`` so the plugin's Diff view can compare them; its page loads Google Charts
from the internet, which we say every time (:data:`OFFLINE_NOTE`). TensorBoard runs in a
child process bound to 127.0.0.1 by default, and Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from advisor._proc import Interrupted, die_with_parent, group_members, kill_group
from advisor.errors import UsageError
from advisor.report.tensorboard_logdir import PreparedLogdir

PERFETTO_URL = "https://ui.perfetto.dev"


def check_plugin() -> None:
    """Raise a one-line UsageError when TensorBoard or torch-tb-profiler cannot be imported."""
    try:
        import tensorboard  # noqa: F401
    except Exception as exc:
        raise UsageError(f"TensorBoard cannot be imported ({exc}); install it: pip install tensorboard") from exc
    try:
        import torch_tb_profiler  # noqa: F401
    except Exception as exc:
        raise UsageError(
            f"the PyTorch Profiler plugin (torch_tb_profiler) cannot be imported ({type(exc).__name__}: {exc}); "
            "install it with `pip install torch-tb-profiler`, or open the trace in ui.perfetto.dev"
        ) from exc


def port_free(host: str, port: int) -> bool:
    """Return True when ``host:port`` can be bound right now (by a server, as TensorBoard binds).

    Raises:
        UsageError: ``host`` is no address of this machine (unknown, or not one of its
            interfaces): that was reported as "port 6006 on HOST is in use" (issue #30 campaign).
    """
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError, ValueError) as exc:
        raise UsageError(f"--host {host} is not an address of this machine ({exc}); pass one, e.g. 127.0.0.1") from None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # NOTE: SO_REUSEADDR as servers (TensorBoard's werkzeug) set it: without it, connections
        # left in TIME_WAIT by a server that just stopped make a free port look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise UsageError(f"cannot bind {host}:{port} ({exc.strerror or exc}); pass an address of this machine as --host") from None
    return True


def tensorboard_command(logdir: Path, host: str, port: int) -> list[str]:
    """Return the command line that starts TensorBoard on ``logdir``."""
    return [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        host,
        "--port",
        str(port),
        "--reload_interval",
        "5",
    ]


def tensorboard_env() -> dict[str, str]:
    """Environment for the TensorBoard child.

    ``TORCH_PROFILER_START_METHOD=fork`` lets the plugin's loader parse traces without spawning
    a fresh interpreter per run (FACTS.md); deprecation warnings from the unmaintained plugin
    under pandas 3 are silenced so the terminal stays readable.
    """
    env = dict(os.environ)
    env.setdefault("TORCH_PROFILER_START_METHOD", "fork")
    env.setdefault("PYTHONWARNINGS", "ignore")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float = 150.0) -> bool:
    """Poll ``url`` until it answers, the child exits, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def serve(
    prepared: PreparedLogdir,
    host: str = "127.0.0.1",
    port: int = 6006,
    echo: Callable[[str], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """Run TensorBoard on a prepared log directory until Ctrl-C (or until it exits).

    Args:
        prepared: From :func:`prepare_logdir`.
        host: Interface to bind (127.0.0.1 keeps it on this machine).
        port: TCP port.
        echo: Where the URL goes (stdout: it is the command's data).
        say: Where hints go (stderr).

    Returns:
        0 after a clean stop.

    Raises:
        UsageError: The port is taken, or TensorBoard failed to start.
    """
    echo = echo or print
    say = say or (lambda m: print(m, file=sys.stderr))
    try:
        check_plugin()
        if not port_free(host, port):
            raise UsageError(f"port {port} on {host} is in use; pass another --port")
    except BaseException:
        # NOTE: the copy went only with the next run's stale sweep (issue #30 campaign)
        if prepared.temporary:
            shutil.rmtree(prepared.logdir, ignore_errors=True)
        raise
    log_path = prepared.logdir / "tensorboard.log"
    # NOTE: a log file, not a pipe: nobody drains a pipe while we wait, and a full one would
    # block TensorBoard.
    log = log_path.open("w", encoding="utf-8")
    proc = subprocess.Popen(
        tensorboard_command(prepared.logdir, host, port),
        env=tensorboard_env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        # NOTE: its own process group, so our Ctrl-C handling decides how it stops (and a
        # terminal's SIGINT does not race our shutdown).
        start_new_session=True,
        # NOTE: its own session also means nothing stops it if advisor is killed outright; the
        # kernel's parent-death signal does (Linux), so no orphaned server keeps the port.
        preexec_fn=die_with_parent,
    )
    shown_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    previous = _stop_on_sigterm()
    try:
        say(f"advisor: starting TensorBoard on {host}:{port} (its log: {log_path})")
        if not wait_until_up(f"http://{host}:{port}/data/logdir", proc):
            _stop(proc)
            err = _log_tail(log_path)
            raise UsageError(f"TensorBoard did not start on {host}:{port} ({err or 'no output'}); try another --port")
        # NOTE: the notes go first: whoever reads the URL and stops the server at once (a
        # script, a test under load) has them on stderr already.
        for line in serve_notes(prepared):
            say(line)
        echo(f"http://{shown_host}:{port}/#pytorch_profiler")
        # NOTE: the URL is the command's data; flush it now so a pipe gets it while we serve
        # (block-buffered stdout could otherwise lose it if shutdown is interrupted).
        sys.stdout.flush()
        say("advisor: press Ctrl-C to stop")
        while proc.poll() is None:
            time.sleep(0.5)
        if proc.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
            raise UsageError(f"TensorBoard exited with code {proc.returncode}: {_log_tail(log_path) or 'no output'}")
        return 0
    except KeyboardInterrupt as exc:
        say("advisor: stopping TensorBoard")
        # NOTE: 128 + the signal, as every other command stopped by one exits (issue #30)
        return 128 + int(getattr(exc, "signum", signal.SIGINT))
    finally:
        _stop(proc)
        log.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if prepared.temporary:
            shutil.rmtree(prepared.logdir, ignore_errors=True)


OFFLINE_NOTE = (
    "advisor: offline: the profiler plugin's page loads Google Charts from the internet; without "
    "internet access it shows a spinner forever, whatever advisor serves. What works offline: the "
    "self-contained HTML report (advisor report RUN_DIR -o report.html) and the trace files below "
    "in chrome://tracing (Perfetto's page, too, must first load from the internet)"
)
"""Said every time: the plugin's page cannot load offline, and nothing on our side can tell."""


def serve_notes(prepared: PreparedLogdir) -> list[str]:
    """Return what ``advisor tensorboard`` says on stderr once the server is up (runs, offline, Perfetto)."""
    runs = prepared.runs or (prepared.run,)
    what = "a temporary copy, removed on exit" if prepared.temporary else f"a copy in {prepared.logdir}"
    lines = [
        f"advisor: TensorBoard serves {len(runs)} run(s) ({what}; the traces are untouched): {', '.join(runs)}",
    ]
    if len(runs) > 1:
        lines.append("advisor: compare two of them in the plugin's Views menu: Diff (run, worker, span on each side)")
    lines.append(OFFLINE_NOTE)
    lines += [f"advisor: Perfetto: open {PERFETTO_URL}, 'Open trace file', pick {t}" for t in prepared.originals]
    return lines


def _stop_on_sigterm() -> signal.Handlers | None:
    """Make SIGTERM behave like Ctrl-C while serving, so `kill` also stops TensorBoard cleanly."""

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    try:
        return signal.signal(signal.SIGTERM, handler)  # type: ignore[return-value]
    except ValueError:  # not the main thread (e.g. embedded): leave signals alone
        return None


def _log_tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _stop(proc: subprocess.Popen) -> None:
    """Stop TensorBoard's whole process group: SIGINT, then SIGTERM, then SIGKILL, a few seconds apart.

    TensorBoard starts a data server and the plugin's loader workers in its own group (it leads
    the session it was started in); signalling only its pid once left those behind in one stop
    of three (issue #32). The group gets each signal, and whatever outlives the main process is
    killed. A second Ctrl-C while waiting skips straight to SIGKILL: the user wants out now, and
    the server must not be left running behind us.
    """
    pgid = proc.pid  # NOTE: start_new_session: the child leads its own group
    try:
        if proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                kill_group(pgid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        _sweep_group(pgid)
    except KeyboardInterrupt:
        kill_group(pgid, signal.SIGKILL)
        proc.wait()
        raise


def _sweep_group(pgid: int, timeout_s: float = 3.0) -> None:
    """Stop what is left of a process group after its leader exited: SIGTERM, then SIGKILL."""
    if not group_members(pgid):
        return
    kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    kill_group(pgid, signal.SIGKILL)
