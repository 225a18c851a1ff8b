"""The run directory: every file name advisor keeps in one, how one is created, and its readers.

A run directory is what ``advisor diagnose`` leaves behind and every later command reads::

    <run>/config.json           what the capture child was asked to do (written first)
    <run>/stdout.log, stderr.log
    <run>/events.jsonl          the child's live progress, one JSON line per step
    <run>/child.json            what the child measured (merged into capture.json)
    <run>/capture.json          the RunCapture
    <run>/profile.pstats        cProfile output
    <run>/traces/               torch.profiler Chrome traces (TensorBoard layout)
    <run>/rank<N>/              one run directory per torchrun rank
    <run>/torchrun-logs/        torchrun's own logs while it runs
    <run>/trials/               one run directory per fix trial
    <run>/kept/                 the kept fixes run once under the profiler (the "after" trace)
    <run>/tensorboard/          traces prepared for TensorBoard
    <run>/report.json           the Report
    <run>/sweep.json            the SweepTable of ``advisor sweep`` (rewritten after every cell run)
    <run>/sweep.diff            the diff that sets the sweep's recommended cell
    <run>/trials/*/sweep_flops.json  a sweep cell run's counted FLOPs of one step

Rules this module keeps: a fresh run directory never shares a folder with another run (a suffix
is added, the folder is created atomically); a folder the user names with ``--out`` is reused only
when it is empty or already an advisor run directory, and then only the names above are removed;
``-o`` never writes over one of those names.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from advisor.errors import InputError, UsageError

CONFIG_FILE = "config.json"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
EVENTS_FILE = "events.jsonl"
CHILD_FILE = "child.json"
CAPTURE_FILE = "capture.json"
PSTATS_FILE = "profile.pstats"
REPORT_FILE = "report.json"
FIX_DIFF_FILE = "fix.diff"
SWEEP_FILE = "sweep.json"
SWEEP_DIFF_FILE = "sweep.diff"
SWEEP_FLOPS_FILE = "sweep_flops.json"
TRACES_DIR = "traces"
NODE_FILE = "node.json"
"""A multi-node job's per-node run directory: which node it is (node rank, host) and its ranks."""
TORCHRUN_LOGS_DIR = "torchrun-logs"
TRIALS_DIR = "trials"
KEPT_DIR = "kept"
TENSORBOARD_DIR = "tensorboard"
RANK_DIR_RE = re.compile(r"^rank(\d+)$")

MANAGED_FILES = (
    CONFIG_FILE, STDOUT_LOG, STDERR_LOG, EVENTS_FILE, CHILD_FILE, CAPTURE_FILE, PSTATS_FILE, REPORT_FILE, NODE_FILE,
    SWEEP_FILE, SWEEP_DIFF_FILE, FIX_DIFF_FILE,
)
"""Files of a run directory; replaced when a run directory is reused."""
MANAGED_DIRS = (TRACES_DIR, TORCHRUN_LOGS_DIR, TRIALS_DIR, TENSORBOARD_DIR, KEPT_DIR)
"""Folders of a run directory (``rank<N>`` too); removed when a run directory is reused."""
_MAX_SUFFIX = 10_000


def rank_dir_name(rank: int) -> str:
    """Name the folder of torchrun rank ``rank`` inside a run directory."""
    return f"rank{int(rank)}"


def is_managed_name(name: str) -> bool:
    """Tell whether advisor keeps ``name`` in a run directory (a file, a folder or a rank folder)."""
    return name in MANAGED_FILES or name in MANAGED_DIRS or RANK_DIR_RE.match(name) is not None


def is_run_dir(path: str | Path) -> bool:
    """Tell whether ``path`` is a folder advisor created as a run directory.

    It holds a capture or a report, or at least the capture's ``config.json`` (a run killed
    before it saved anything).
    """
    p = Path(path)
    if not p.is_dir():
        return False
    if (p / CAPTURE_FILE).is_file() or (p / REPORT_FILE).is_file():
        return True
    config = read_json(p / CONFIG_FILE) if (p / CONFIG_FILE).is_file() else None
    return config is not None and "spec" in config and "run_dir" in config


def rank_dirs(run_dir: str | Path) -> list[tuple[int, Path]]:
    """List the ``rank<N>`` folders of a run directory, ordered by rank."""
    root = Path(run_dir)
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        m = RANK_DIR_RE.match(path.name)
        if m and path.is_dir():
            found.append((int(m.group(1)), path))
    return sorted(found)


def read_json(path: str | Path) -> dict[str, Any] | None:
    """Read a JSON object from ``path``; None when it is missing, unreadable, not a regular file or not an object.

    NOTE: a FIFO (or /dev/zero) named capture.json blocked ``diagnose --out`` forever (issue #30 campaign).
    """
    try:
        if not Path(path).is_file():
            return None
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def read_child(folder: str | Path) -> dict[str, Any] | None:
    """Read what a capture child saved (``child.json``) in ``folder``, or None."""
    return read_json(Path(folder) / CHILD_FILE)


def create_unique(base: str | Path) -> Path:
    """Create a new, empty run directory at ``base`` or, when that exists, ``base-2``, ``base-3``...

    ``mkdir`` without ``exist_ok`` is atomic: two runs started in the same second never share one.

    Raises:
        InputError: The parent cannot be created or written.
    """
    base = Path(base).absolute()
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        for i in range(1, _MAX_SUFFIX):
            candidate = base if i == 1 else base.with_name(f"{base.name}-{i}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            return candidate
    except OSError as exc:
        raise InputError(
            f"cannot create a run directory in {base.parent} ({exc.strerror or exc}); pass --out DIR in a writable place"
        ) from exc
    raise InputError(f"too many run directories named {base.name}-*; pass --out DIR")


def prepare(out_dir: str | Path) -> Path:
    """Make ``out_dir`` (a folder the user named) ready for a new capture; return it absolute.

    A missing or empty folder is used as it is. A folder that is already an advisor run directory
    has the capture's own files and folders removed (never anything else). Any other non-empty
    folder is refused: advisor does not mix its files with the user's.

    Raises:
        UsageError: ``out_dir`` is a file, or a non-empty folder that is not a run directory.
        InputError: It cannot be created or cleaned.
    """
    run_dir = check(out_dir)
    try:
        if not run_dir.exists():
            run_dir.mkdir(parents=True)
        elif any(run_dir.iterdir()):
            _clean(run_dir)
    except OSError as exc:
        raise InputError(f"cannot prepare {run_dir} ({exc.strerror or exc}); choose another --out") from exc
    return run_dir


def check(out_dir: str | Path, replace: bool = True) -> Path:
    """Refuse an ``--out`` that :func:`prepare` would refuse, touching nothing; return it absolute.

    The command line checks first, so a refused folder is an error before the live progress
    starts (and before any process does). With ``replace`` False (what the user gets without
    ``--replace``) a folder that already holds a run is refused too, saying what it holds: a
    reused ``--out`` silently deleted another run's report, traces and trials (issue #30).

    Raises:
        UsageError: ``out_dir`` is a file, a non-empty folder that is not a run directory, or
            (``replace`` False) a run directory.
        InputError: It cannot be read.
    """
    run_dir = Path(out_dir).absolute()
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{run_dir} exists and is not a folder; choose another --out")
    try:
        if run_dir.is_dir() and any(run_dir.iterdir()):
            if not is_run_dir(run_dir):
                raise UsageError(
                    f"{run_dir} is not empty and is not an advisor run directory; "
                    "pass --out with a new or empty folder"
                )
            if not replace:
                raise UsageError(
                    f"{run_dir} already holds {describe_run(run_dir)}; pass --replace to delete it and "
                    "run again there, or choose another --out"
                )
    except OSError as exc:
        raise InputError(f"cannot read {run_dir} ({exc.strerror or exc}); choose another --out") from exc
    return run_dir


def check_not_inside_a_run(out_dir: str | Path) -> None:
    """Refuse an ``--out`` the user named inside another run directory (its trials are made by advisor).

    ``--out runB/traces/new`` put a second run's trace among runB's, and ``advisor analyze
    runB/traces`` then read both as one job (issue #30 campaign).

    Raises:
        UsageError: A folder above ``out_dir`` is a run directory.
    """
    run_dir = Path(out_dir).absolute()
    with contextlib.suppress(OSError):
        host = next((p for p in run_dir.parents if is_run_dir(p)), None)
        if host is not None:
            raise UsageError(f"{run_dir} is inside the run directory {host}; choose an --out outside it")


def describe_run(run_dir: Path) -> str:
    """Say in a few words what a run directory holds: whose run, its status, its trials."""
    found = read_json(run_dir / CAPTURE_FILE) or (read_json(run_dir / CONFIG_FILE) or {}).get("spec") or {}
    script = found.get("script") if isinstance(found, dict) else None
    status = found.get("status") if isinstance(found, dict) else None
    what = "a run" + (f" of {Path(str(script)).name}" if script else "") + (f" ({status})" if status else "")
    trials = run_dir / TRIALS_DIR
    count = sum(1 for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else 0
    extras = [name for name in (REPORT_FILE, TRACES_DIR) if (run_dir / name).exists()]
    if count:
        extras.append(f"{count} trial run(s)")
    return what + (f" with {', '.join(extras)}" if extras else "")


def _clean(run_dir: Path) -> None:
    """Remove what an earlier capture left (replaced, never mixed with new files)."""
    for name in MANAGED_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in MANAGED_DIRS:
        folder = run_dir / name
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    for _, folder in rank_dirs(run_dir):
        if not folder.is_symlink():
            shutil.rmtree(folder)


def refuse_managed_output(path: str | Path) -> None:
    """Refuse an output path (``-o``) that is, or lies inside, a run directory's own name.

    Raises:
        UsageError: ``path`` would overwrite a file advisor keeps in a run directory.
    """
    p = Path(path).absolute()
    child = p
    for parent in p.parents:
        if is_run_dir(parent) and is_managed_name(child.name):
            raise UsageError(
                f"{path} would overwrite {child.name} of the run directory {parent}; choose another -o path"
            )
        child = parent
