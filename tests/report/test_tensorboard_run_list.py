"""`advisor tensorboard` on a run with fix trials and a kept fix (issue #32).

It served 27 runs for one diagnose, 26 of them trial runs' ``child.json`` and ``config.json``
copied in as ``rank0.pt.trace.json``; the kept fixes' after-fix trace (``kept/``) was left out,
so the Diff view had no pair; and a stop could leave its data server and a ``tensorboard.main``
worker running. The run directory is built here as diagnose leaves it, without a diagnose.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from proc_helpers import interrupt
from report_fixtures import record_cpu_trace

from advisor.report.tensorboard_logdir import PLUGIN_RUNS_PATH, prepare_logdir, run_label


@pytest.fixture(scope="module")
def diagnosed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as diagnose leaves it: a capture, unprofiled trial runs, and ``kept/``."""
    run = tmp_path_factory.mktemp("tb-trials") / "train-run"
    trace = record_cpu_trace(run)
    (run / "report.json").write_text("{}", encoding="utf-8")
    for trial in ("baseline-1", "pin_memory-1", "baseline-2", "dataloader_workers-w2-1"):
        folder = run / "trials" / trial
        folder.mkdir(parents=True)
        # NOTE: what a trial run holds: no profiler ran, so no trace; only its own JSON files
        for name in ("child.json", "config.json", "capture.json"):
            (folder / name).write_text(json.dumps({"schema_version": 1, "trace_files": []}), encoding="utf-8")
        (folder / "events.jsonl").write_text("", encoding="utf-8")
    kept = run / "kept"
    (kept / "traces").mkdir(parents=True)
    after = kept / "traces" / trace.name
    shutil.copy(trace, after)
    (kept / "child.json").write_text("{}", encoding="utf-8")
    (kept / "capture.json").write_text(
        json.dumps({"schema_version": 1, "trace_files": [str(after.relative_to(kept))]}), encoding="utf-8"
    )
    return run


def test_only_real_traces_are_served_and_the_kept_run_comes_second(diagnosed_run: Path) -> None:
    prepared = prepare_logdir(diagnosed_run)
    try:
        stamp = r"\d{8}-\d{6}"
        assert [re.sub(stamp, "T", r) for r in prepared.runs] == ["train-run-T-baseline", "train-run-T-kept"]
        assert {p.parent.name for p in prepared.originals} == {"traces"}
        assert not any(p.name in ("child.json", "config.json") for p in prepared.originals)
        assert len(prepared.traces) == 2
    finally:
        shutil.rmtree(prepared.logdir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runs(port: int) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{PLUGIN_RUNS_PATH}", timeout=5) as resp:
            return json.loads(resp.read()).get("runs")
    except (OSError, ValueError):
        return None


@pytest.mark.e2e
def test_tensorboard_lists_the_pair_and_leaves_no_process_behind(diagnosed_run: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "tensorboard", str(diagnosed_run), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    family: set[int] = set()
    try:
        url = proc.stdout.readline() if proc.stdout else ""
        assert url.strip() == f"http://localhost:{port}/#pytorch_profiler", proc.stderr.read() if proc.stderr else ""
        want = [run_label(diagnosed_run), run_label(diagnosed_run, "kept")]
        runs = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            family |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            runs = _runs(port)
            if runs and set(want) <= set(runs):
                break
            time.sleep(0.5)
        assert runs is not None and sorted(runs) == sorted(want), runs
        family |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        assert family, "TensorBoard should be running under advisor"
    finally:
        _, err = interrupt(proc, timeout_s=60)
    assert proc.returncode == 130, err  # 128 + SIGINT (issue #30)
    assert "child.json" not in err and "config.json" not in err
    left = []
    deadline = time.monotonic() + 10
    for pid in family:
        while time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        else:
            left.append(pid)
    for pid in left:
        psutil.Process(pid).kill()  # NOTE: never leak a server into the next test
    assert left == [], f"outlived advisor tensorboard's stop: {left}"


@pytest.mark.e2e
def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # TensorBoard's leader exits on Ctrl-C; a worker of its group that ignores SIGINT (as the data
    # server did) once outlived it, because only the leader's pid was signalled.
    from advisor.report.tensorboard import _stop

    pidfile = tmp_path / "worker.pid"
    worker = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)"
    leader = (
        "import subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, '-c', {worker!r}])\n"
        f"open({str(pidfile)!r}, 'w').write(str(w.pid))\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", leader], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pidfile.is_file() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.05)
    time.sleep(0.3)  # NOTE: the worker installs its SIGINT handler after it starts
    worker_pid = int(pidfile.read_text())
    _stop(proc)
    try:
        state = psutil.Process(worker_pid).status()
    except psutil.NoSuchProcess:
        state = "gone"
    if state not in ("gone", psutil.STATUS_ZOMBIE):
        psutil.Process(worker_pid).kill()
    assert state in ("gone", psutil.STATUS_ZOMBIE), f"the group's worker outlived the stop ({state})"
