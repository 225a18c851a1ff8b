"""A head start (advisor.trace.early): decode workers forked before the command imports the rest.

The thresholds of tests/trace/test_trace_load_parallel.py are lowered the same way, so that a
trace of a few MB is decoded by three workers. The tests that fork are marked e2e.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import advisor.trace.early as early
import advisor.trace.load as load
from advisor.cli.main import cli
from tests.trace.test_trace_load_parallel import _assert_same, _events, _gone, _serial, _text

ROOT = Path(__file__).resolve().parents[2]


def _trace(tmp_path: Path) -> Path:
    """A trace of 12000 events: three workers' worth at the lowered thresholds of the ``forks`` fixture."""
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    return path


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    early.close_all()


@pytest.mark.e2e
def test_the_load_reads_the_workers_started_ahead(tmp_path, monkeypatch, forks):
    path = _trace(tmp_path)
    assert early.head_start(path)
    assert len(forks) == 3  # forked now, before any load
    trace = load.load_trace(path)
    assert len(forks) == 3 and _gone(forks) and not early._pending  # read, not forked again
    _assert_same(trace, _serial(monkeypatch, path))


@pytest.mark.e2e
def test_a_file_changed_since_is_decoded_again(tmp_path, monkeypatch, forks):
    path = _trace(tmp_path)
    assert early.head_start(path)
    started = list(forks)
    events = _events(9000)
    # replaced, as a profiler writing a new trace does (truncating a mapped file in place would
    # fault the workers still reading it)
    new = tmp_path / "new.json"
    new.write_text(_text(events))
    new.replace(path)
    trace = load.load_trace(path)
    assert _gone(started) and len(forks) == 6  # the stale workers ended, new ones decoded
    assert len(trace.events) == sum(e["ph"] != "s" for e in events)
    _assert_same(trace, _serial(monkeypatch, path))


@pytest.mark.e2e
def test_workers_nobody_reads_end_with_the_command(tmp_path, monkeypatch, forks):
    path = _trace(tmp_path)
    assert early.head_start(path)
    assert early.head_start(path)  # started twice: the first workers end at once
    assert _gone(forks[:3]) and len(forks) == 6
    early.close_all()
    assert _gone(forks) and not early._pending


@pytest.mark.parametrize("name", ["folder", "gzip", "small", "missing"])
def test_nothing_starts_for_what_the_load_handles_its_own_way(tmp_path, monkeypatch, name):
    import advisor.trace.fanout as fanout

    monkeypatch.setattr(fanout, "PARALLEL_BYTES", 4096)  # a gzip file is refused for being gzip
    forked: list[int] = []
    monkeypatch.setattr(os, "fork", lambda: forked.append(1) or pytest.fail("forked"))
    path = {"folder": tmp_path, "gzip": tmp_path / "t.json.gz", "small": tmp_path / "s.json",
            "missing": tmp_path / "nope.json"}[name]
    if name == "gzip":
        import gzip

        path.write_bytes(gzip.compress(_text(_events(3000)).encode()))
        assert path.stat().st_size > fanout.PARALLEL_BYTES
    elif name == "small":
        path.write_text('{"traceEvents": []}')
    assert not early.head_start(path) and not forked and not early._pending


@pytest.mark.e2e
def test_analyze_starts_the_decode_first_and_reports_the_same(tmp_path, monkeypatch, forks):
    path = _trace(tmp_path)
    started: list[bool] = []
    head_start = early.head_start
    monkeypatch.setattr(early, "head_start", lambda p: started.append(head_start(p)) or started[-1])
    runner = CliRunner()
    first = runner.invoke(cli, ["analyze", str(path), "--format", "json"], catch_exceptions=False)
    assert started == [True] and len(forks) == 3 and _gone(forks) and not early._pending
    monkeypatch.setattr(early, "head_start", lambda p: False)
    second = runner.invoke(cli, ["analyze", str(path), "--format", "json"], catch_exceptions=False)
    assert first.exit_code == second.exit_code
    strip = lambda text: [line for line in text.splitlines() if "\"created\"" not in line]  # noqa: E731
    assert strip(first.output) == strip(second.output)


@pytest.mark.e2e
def test_the_head_start_imports_neither_pandas_nor_the_stages():
    code = (
        "import sys, advisor.cli.main, advisor.cli.cmd_analyze, advisor.api.early, advisor.trace.early; "
        "print([m for m in ('pandas', 'torch', 'advisor.metrics', 'advisor.report', 'advisor.api.analysis') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.e2e
def test_ctrl_c_while_the_command_loads_ends_the_workers_it_started_ahead(tmp_path):
    import psutil

    from tests.proc_helpers import gone_within

    # a trace past the real thresholds (two workers of 24 MB): this runs the command as a user does
    block = ",\n".join(__import__("json").dumps(e) for e in _events(12000))
    copies = -(-(52 << 20) // len(block))
    path = tmp_path / "big.pt.trace.json"
    with open(path, "w") as fh:
        fh.write('{"traceEvents": [\n' + ",\n".join([block] * copies) + "\n]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "analyze", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while not parent.children() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        workers = [c.pid for c in parent.children()]
        proc.send_signal(signal.SIGINT)  # while the command still imports the rest
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert workers, "no decode worker was started ahead of the imports"
    # 130, or death by the SIGINT itself: CPython's ``-m`` sometimes re-raises it at exit once a
    # KeyboardInterrupt crossed an extension's import (a shell reports both as 130)
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err
    assert gone_within(str(path), timeout_s=10) == []
    # NOTE: a ^C that lands before advisor can reap its workers leaves them to die with it
    # (PR_SET_PDEATHSIG) and be reaped by init, a moment after the command has exited
    deadline = time.monotonic() + 5
    while not _gone(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(workers)


@pytest.mark.e2e
def test_a_folder_of_one_trace_starts_ahead_and_a_run_directory_does_not(tmp_path, monkeypatch, forks):
    from advisor.api.early import head_start

    folder = tmp_path / "log"
    folder.mkdir()
    (folder / "w0.pt.trace.json").write_text(_text(_events(12000)))
    assert head_start([folder]) and len(forks) == 3
    early.close_all()
    (folder / "w1.pt.trace.json").write_text(_text(_events(12000)))
    assert not head_start([folder])  # two ranks: the analysis takes them one per process
    (folder / "w1.pt.trace.json").unlink()
    (folder / "capture.json").write_text("{}")
    assert not head_start([folder]) and len(forks) == 3  # a run directory: its capture lists the traces
