"""Serve a run's traces in TensorBoard's PyTorch Profiler plugin (torch-tb-profiler).

The plugin is deprecated upstream and drops every ``user_annotation`` event except
``ProfilerStep#*`` from torch 2.x traces, so DataLoader time shows as 0 (FACTS.md). We therefore
serve a prepared *copy* of the traces, made in a temporary folder while TensorBoard runs (so a
run directory stores each trace once), in which those events' category is rewritten to
``cpu_op``; the originals are never touched. Runs are named ``<script>-<time>-<variant>`` and
workers ``rank<N>`` so the plugin's Diff view can compare them; its page loads Google Charts
from the internet, which we say every time (:data:`OFFLINE_NOTE`). TensorBoard runs in a
child process bound to 127.0.0.1 by default, and Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from advisor._proc import die_with_parent
from advisor.errors import InputError, UsageError
from advisor.rundir import (
    CAPTURE_FILE,
    RANK_DIR_RE,
    REPORT_FILE,
    TENSORBOARD_DIR,
    TRACES_DIR,
    TRIALS_DIR,
)

TB_DIR = TENSORBOARD_DIR
"""Folder inside a run directory where older advisors kept the prepared copy; never read as traces."""
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
PLUGIN_RUNS_PATH = "/data/plugin/pytorch_profiler/runs"
PERFETTO_URL = "https://ui.perfetto.dev"
_RUN_MARKERS = (CAPTURE_FILE, REPORT_FILE)


@dataclass(frozen=True)
class PreparedLogdir:
    """A TensorBoard log directory ready to serve.

    Attributes:
        logdir: The ``--logdir`` to pass to TensorBoard.
        run: The first run name the plugin will list.
        traces: The prepared trace copies.
        originals: The trace files they were made from (open these in Perfetto).
        rewritten: ``user_annotation`` events re-labelled ``cpu_op`` across all copies.
        temporary: True when ``logdir`` is a temp folder, removed when TensorBoard stops.
        runs: Every run name the plugin will list (script, time and variant for run directories).
    """

    logdir: Path
    run: str
    traces: tuple[Path, ...]
    originals: tuple[Path, ...]
    rewritten: int
    temporary: bool
    runs: tuple[str, ...] = ()


def is_trace_file(path: Path) -> bool:
    """Return True for a Chrome-trace JSON file name (``.json`` or ``.json.gz``)."""
    name = path.name
    return path.is_file() and (name.endswith(".json") or name.endswith(".json.gz")) and name not in _RUN_MARKERS


def find_traces(path: Path) -> list[Path]:
    """Return the trace files of a run directory, a trace directory or a single trace file.

    Raises:
        InputError: Nothing that looks like a trace is there.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; pass a run directory or a trace file")
    if path.is_file():
        if not is_trace_file(path):
            raise InputError(f"{path} is not a trace (.json or .json.gz)")
        return [path]
    capture = path / CAPTURE_FILE
    listed: list[Path] = []
    if capture.is_file():
        try:
            data = json.loads(capture.read_text(encoding="utf-8"))
            listed = [path / p for p in data.get("trace_files", []) if (path / p).is_file()]
        except (OSError, ValueError):
            listed = []
    if listed:
        return sorted(listed)
    tb = (path / TB_DIR).resolve()
    found = [
        p
        for p in path.rglob("*")
        if is_trace_file(p) and tb not in p.resolve().parents and (p.name.endswith(TRACE_SUFFIXES) or p.parent.name == TRACES_DIR)
    ]
    if not found:
        found = [p for p in path.rglob("*") if is_trace_file(p) and tb not in p.resolve().parents]
    if not found:
        raise InputError(f"no trace files (*.pt.trace.json[.gz]) under {path}; run `advisor diagnose` first")
    return sorted(found)


def read_trace_json(path: Path) -> dict:
    """Read a Chrome-trace JSON file (plain or gzip) as a dict with ``traceEvents`` (never unpickles).

    Raises:
        InputError: The file is not a readable Chrome trace.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    # NOTE: the garbage collector, not the parser, dominates loading big traces (FACTS.md).
    enabled = gc.isenabled()
    gc.disable()
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path} is not a readable trace ({exc}); re-record it") from exc
    finally:
        if enabled:
            gc.enable()
    if isinstance(data, list):  # bare event arrays are valid Chrome traces
        data = {"traceEvents": data}
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a Chrome trace object")
    return data


def rewrite_annotations(data: dict) -> int:
    """Re-label ``user_annotation`` events (except ``ProfilerStep#*``) as ``cpu_op``, in place.

    Returns:
        How many events were re-labelled.
    """
    n = 0
    for ev in data.get("traceEvents") or ():
        if (
            isinstance(ev, dict)
            and ev.get("cat") == "user_annotation"
            and not str(ev.get("name", "")).startswith("ProfilerStep#")
        ):
            ev["cat"] = "cpu_op"
            n += 1
    return n


def _target_name(src: Path) -> str:
    """Return a file name the plugin accepts (``<worker>.pt.trace.json[.gz]``)."""
    name = src.name
    if name.endswith(TRACE_SUFFIXES):
        return name
    gz = name.endswith(".gz")
    stem = name[: -len(".json.gz")] if gz else name[: -len(".json")]
    return f"{stem.replace('.', '_')}.pt.trace.json" + (".gz" if gz else "")


BASELINE = "baseline"
"""Variant name of a run's own capture (trial runs are named by their trial folder)."""


@dataclass(frozen=True)
class _Source:
    """One trace to serve: the TensorBoard run and worker it goes under."""

    trace: Path
    run: str
    worker: str | None  # None: keep the file's own worker name


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_file() for m in _RUN_MARKERS)


def run_label(run_dir: Path, variant: str = BASELINE) -> str:
    """Name a run for TensorBoard: ``<script>-<YYYYmmdd-HHMMSS>-<variant>``.

    Script and time tell runs of one project apart, the variant tells a baseline from a fix's
    run, so TensorBoard's run list and its Diff view (which compares two runs) read as what they
    are. The time is when the capture was saved; the script is the run directory's name when the
    capture does not name one (traces recorded elsewhere).
    """
    capture = run_dir / CAPTURE_FILE
    script = ""
    stamp_of = capture if capture.is_file() else run_dir / REPORT_FILE
    try:
        script = str(json.loads(capture.read_text(encoding="utf-8")).get("script") or "")
    except (OSError, ValueError, AttributeError):
        script = ""
    stem = Path(script).stem if script else run_dir.name
    try:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp_of.stat().st_mtime))
    except OSError:
        stamp = "undated"
    return f"{stem}-{stamp}-{variant}"


def _worker_of(trace: Path, run_dir: Path) -> str:
    """``rank<N>`` from a torchrun rank folder, else ``rank0`` (one process)."""
    for parent in trace.relative_to(run_dir).parents:
        if RANK_DIR_RE.match(parent.name):
            return parent.name
    return "rank0"


def _run_sources(run_dir: Path) -> list[_Source]:
    """Return the traces of one run directory: its capture (``baseline``), then any profiled trial run."""
    sources = [_Source(t, run_label(run_dir), _worker_of(t, run_dir)) for t in find_traces(run_dir)]
    trials = run_dir / TRIALS_DIR
    for trial in sorted(p for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else ():
        try:
            found = find_traces(trial)
        except InputError:
            continue  # trial runs are timed without the profiler: most have no trace
        sources += [_Source(t, run_label(run_dir, trial.name), _worker_of(t, trial)) for t in found]
    return sources


def _sources(path: Path) -> list[_Source]:
    """Every trace under ``path`` with its TensorBoard run and worker.

    A run directory gives one run per variant; a folder of run directories (``advisor-runs``)
    gives each of them its own runs; other folders and lone files keep the old layout (one run
    named after the folder or file, workers named as the files are).
    """
    if _is_run_dir(path):
        return _run_sources(path)
    if path.is_dir():
        runs = sorted(p for p in path.iterdir() if _is_run_dir(p))
        if runs:
            out: list[_Source] = []
            for run in runs:
                try:
                    out += _run_sources(run)
                except InputError:
                    continue  # a run that failed before its profiled steps has no trace
            if out:
                return out
    run = (path.name if path.is_dir() else path.name.split(".")[0]) or "run"
    return [_Source(t, run, None) for t in find_traces(path)]


def prepare_logdir(path: Path, logdir: Path | None = None) -> PreparedLogdir:
    """Copy traces into a TensorBoard log directory, fixing what the plugin drops.

    The copy is made in a temporary folder (deleted when TensorBoard stops) unless ``logdir``
    is given, so a run directory keeps each trace once. Runs are named by :func:`run_label`
    and workers ``rank<N>``, so TensorBoard's Diff view can put a baseline and a fix's run, or
    two diagnoses of one script, side by side.

    Args:
        path: A run directory, a folder of run directories, a folder of traces, or one trace.
        logdir: Where to write; default a new temporary folder (never next to the traces).

    Returns:
        The prepared log directory.
    """
    path = Path(path).resolve()
    sources = _sources(path)
    temporary = logdir is None
    if temporary:
        remove_stale_copies()
        logdir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
        (logdir / OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")
    logdir = Path(logdir)
    out: list[Path] = []
    rewritten = 0
    used: set[Path] = set()
    for src in sources:
        name = _target_name(src.trace)
        if src.worker is not None:
            # NOTE: the plugin reads "<worker>[.<span>].pt.trace.json[.gz]"; the digits after the
            # worker (torch's time stamp) become the span, so runs of one script line up.
            span = name.split(".")[1] if name.count(".") > 3 and name.split(".")[1].isdigit() else ""
            name = f"{src.worker}{'.' + span if span else ''}.pt.trace.json" + (".gz" if name.endswith(".gz") else "")
        dst = logdir / src.run / name
        if dst in used:  # same file name in two rank folders
            dst = dst.with_name(f"{src.trace.parent.name}_{name}")
        used.add(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_file() and dst.stat().st_mtime >= src.trace.stat().st_mtime:
            out.append(dst)  # already prepared from this version of the trace
            continue
        data = read_trace_json(src.trace)
        rewritten += rewrite_annotations(data)
        tmp = dst.with_name(dst.name + ".tmp")
        opener = gzip.open if dst.name.endswith(".gz") else open
        with opener(tmp, "wt", encoding="utf-8") as fh:
            json.dump(data, fh)
        tmp.replace(dst)
        out.append(dst)
    runs = tuple(dict.fromkeys(s.run for s in sources))
    return PreparedLogdir(logdir, runs[0], tuple(out), tuple(s.trace for s in sources), rewritten, temporary, runs)


TEMP_PREFIX = "advisor-tb-"
"""Name prefix of the temporary copies :func:`prepare_logdir` makes."""

OWNER_FILE = "owner.pid"
"""In a temporary copy: the pid of the advisor process that serves it."""


def remove_stale_copies(root: Path | None = None) -> list[Path]:
    """Delete temporary copies whose advisor process is gone; return what was removed.

    A copy is removed when TensorBoard stops, but an advisor killed outright (SIGKILL, the OOM
    killer) runs no clean-up, and its copy of the traces would stay in the temp folder for good.
    The next ``advisor tensorboard`` removes such copies: only folders with our prefix, owned by
    this user, holding an owner pid that no longer runs (a copy without the file is left alone:
    nothing says it is ours to delete).
    """
    root = Path(tempfile.gettempdir()) if root is None else root
    removed: list[Path] = []
    for folder in root.glob(f"{TEMP_PREFIX}*"):
        try:
            if not folder.is_dir() or folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            pid = int((folder / OWNER_FILE).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
        if pid <= 0 or pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    """Return True when a process with ``pid`` exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # NOTE: exists, owned by someone else
    return True


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
    """Return True when ``host:port`` can be bound right now (by a server, as TensorBoard binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # NOTE: SO_REUSEADDR as servers (TensorBoard's werkzeug) set it: without it, connections
        # left in TIME_WAIT by a server that just stopped make a free port look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
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
    check_plugin()
    if not port_free(host, port):
        raise UsageError(f"port {port} on {host} is in use; pass another --port")
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
        echo(f"http://{shown_host}:{port}/#pytorch_profiler")
        # NOTE: the URL is the command's data; flush it now so a pipe gets it while we serve
        # (block-buffered stdout could otherwise lose it if shutdown is interrupted).
        sys.stdout.flush()
        for line in serve_notes(prepared):
            say(line)
        say("advisor: press Ctrl-C to stop")
        while proc.poll() is None:
            time.sleep(0.5)
        if proc.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
            raise UsageError(f"TensorBoard exited with code {proc.returncode}: {_log_tail(log_path) or 'no output'}")
        return 0
    except KeyboardInterrupt:
        say("advisor: stopping TensorBoard")
        return 0
    finally:
        _stop(proc)
        log.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if prepared.temporary:
            shutil.rmtree(prepared.logdir, ignore_errors=True)


OFFLINE_NOTE = (
    "advisor: note: TensorBoard's profiler page loads Google Charts from the internet; without "
    "internet access it shows a spinner forever. Offline, read the self-contained HTML report "
    "(advisor report RUN_DIR -o report.html) or open the trace in chrome://tracing"
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
        raise KeyboardInterrupt

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
    """Stop the child: SIGINT, then SIGTERM, then SIGKILL, a few seconds apart.

    A second Ctrl-C while waiting skips straight to SIGKILL: the user wants out now, and the
    server must not be left running behind us.
    """
    if proc.poll() is not None:
        return
    try:
        for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
