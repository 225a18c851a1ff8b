"""The prepared copy of a run's traces that TensorBoard's profiler plugin serves.

Finds the traces of a run directory, a folder of runs or a single trace, and copies them into a
log directory in the plugin's layout (runs named ``<script>-<time>-<variant>``, workers
``rank<N>``), with every ``user_annotation`` event's category rewritten to ``cpu_op`` so the
plugin keeps it; the originals are never touched. The copy is temporary, and one left behind by
an advisor killed outright is removed by the next (:func:`remove_stale_copies`). Serving it is
:mod:`advisor.report.tensorboard`.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from advisor._proctree import pid_exists
from advisor.errors import InputError
from advisor.rundir import (
    CAPTURE_FILE,
    KEPT_DIR,
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
            # NOTE: only paths inside the run directory, as advisor writes them (issue #30)
            listed = [path / p for p in data.get("trace_files", [])
                      if not Path(p).is_absolute() and ".." not in Path(p).parts and (path / p).is_file()]
        except (OSError, ValueError):
            listed = []
    if listed:
        return sorted(listed)
    found = profiled_traces(path) if _is_run_dir(path) else []
    if not found:
        tb = (path / TB_DIR).resolve()
        found = [
            p
            for p in path.rglob("*")
            if is_trace_file(p) and tb not in p.resolve().parents
            and (p.name.endswith(TRACE_SUFFIXES) or p.parent.name == TRACES_DIR)
        ]
    if not found and not _is_run_dir(path):
        # NOTE: a folder of someone's traces with other names; never a run directory's own JSON files
        found = [p for p in path.rglob("*") if is_trace_file(p) and (path / TB_DIR).resolve() not in p.resolve().parents]
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
            # NOTE: strict=False reads the raw control characters torch writes unescaped into
            # string fields (a script named with ESC/BEL lands in ``traceName``, issue #30).
            data = json.load(fh, strict=False)
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


def profiled_traces(folder: Path) -> list[Path]:
    """Return the traces a run folder's profiler wrote, and nothing else; [] when it has none.

    Only files its ``capture.json`` lists, else ``*.pt.trace.json[.gz]`` files and files in a
    ``traces/`` folder. Never :func:`find_traces`' last resort of any ``.json`` file: a trial
    run, timed without the profiler, holds ``child.json`` and ``config.json``, which were once
    served as ``rank0.pt.trace.json`` (issue #32: 52 "Failed to parse" lines in TensorBoard).
    """
    capture = folder / CAPTURE_FILE
    if capture.is_file():
        try:
            data = json.loads(capture.read_text(encoding="utf-8"))
            listed = [folder / p for p in data.get("trace_files", []) if (folder / p).is_file()]
        except (OSError, ValueError, AttributeError, TypeError):
            listed = []
        if listed:
            return sorted(listed)
    skip = {(folder / d).resolve() for d in (TB_DIR, TRIALS_DIR, KEPT_DIR)}
    return sorted(
        p for p in folder.rglob("*")
        if is_trace_file(p) and not skip & set(p.resolve().parents)
        and (p.name.endswith(TRACE_SUFFIXES) or p.parent.name == TRACES_DIR)
    )


def _run_sources(run_dir: Path) -> list[_Source]:
    """Return the traces of one run directory: its capture (``baseline``), the kept fixes' run, then trial runs.

    The kept fixes' profiled run (``kept/``) comes second, so the first two runs the plugin lists
    are the before/after pair its Diff view compares.
    """
    sources = [_Source(t, run_label(run_dir), _worker_of(t, run_dir)) for t in find_traces(run_dir)]
    kept = run_dir / KEPT_DIR
    if kept.is_dir():
        sources += [_Source(t, run_label(run_dir, KEPT_DIR), _worker_of(t, kept)) for t in profiled_traces(kept)]
    trials = run_dir / TRIALS_DIR
    for trial in sorted(p for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else ():
        # NOTE: trial runs are timed without the profiler: most have no trace, and are left out
        sources += [_Source(t, run_label(run_dir, trial.name), _worker_of(t, trial)) for t in profiled_traces(trial)]
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


def remove_stale_copies(root: Path | None = None, owner: int | None = None) -> list[Path]:
    """Delete temporary copies whose advisor process is gone (or ``owner``'s); return what was removed.

    ``owner`` (this process's pid) removes the copy a failed preparation left half-written (a
    full temp folder), which no later run would see as stale while this process lives.

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
        if owner is not None:
            if pid != owner:
                continue
        elif pid <= 0 or pid == os.getpid() or pid_exists(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
