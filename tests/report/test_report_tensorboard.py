"""`advisor tensorboard`: prepared trace copies, plugin checks, and a real server read over HTTP."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from proc_helpers import gone_within, interrupt, pids_with_args
from report_fixtures import record_cpu_trace

from advisor.errors import InputError, UsageError
from advisor.report.tensorboard import check_plugin, port_free
from advisor.report.tensorboard_logdir import (
    PLUGIN_RUNS_PATH,
    find_traces,
    prepare_logdir,
    rewrite_annotations,
    run_label,
)


@pytest.fixture(scope="module")
def captured_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("tb") / "demo_run"
    record_cpu_trace(run)
    return run


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def test_prepare_rewrites_a_copy_and_never_the_original(captured_run: Path, tmp_path: Path) -> None:
    (original,) = find_traces(captured_run)
    before = _sha(original)
    prepared = prepare_logdir(captured_run, logdir=tmp_path / "logdir")
    assert _sha(original) == before
    # issue #20: runs are named by script (here the folder: the capture names none), time and variant
    assert prepared.run == run_label(captured_run) and prepared.rewritten > 0
    assert re.fullmatch(r"demo_run-\d{8}-\d{6}-baseline", prepared.run)
    (copy,) = prepared.traces
    assert copy.parent == tmp_path / "logdir" / prepared.run
    assert re.fullmatch(r"rank0\.\d+\.pt\.trace\.json(\.gz)?", copy.name)  # worker rank0, span kept
    annotations = {e["name"] for e in _events(original) if e.get("cat") == "user_annotation"}
    assert any(n.startswith("enumerate(DataLoader)") for n in annotations)
    left = [e["name"] for e in _events(copy) if e.get("cat") == "user_annotation"]
    assert left and all(n.startswith("ProfilerStep#") for n in left)
    relabelled = {e["name"] for e in _events(copy) if e.get("cat") == "cpu_op"}
    assert {n for n in annotations if not n.startswith("ProfilerStep#")} <= relabelled


def test_lone_trace_file_goes_to_a_temp_logdir(tmp_path: Path) -> None:
    trace = tmp_path / "bert_trace.json.gz"
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#6", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "opt.step", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
    ]
    with gzip.open(trace, "wt", encoding="utf-8") as fh:
        json.dump({"traceEvents": events}, fh)
    prepared = prepare_logdir(trace)
    try:
        assert prepared.temporary and tmp_path not in prepared.logdir.parents
        assert prepared.traces[0].name == "bert_trace.pt.trace.json.gz"  # a name the plugin accepts
        assert prepared.rewritten == 1
        assert sorted(tmp_path.iterdir()) == [trace]  # nothing written next to the user's file
    finally:
        import shutil

        shutil.rmtree(prepared.logdir)


def test_rewrite_annotations_counts() -> None:
    data = {
        "traceEvents": [
            {"cat": "user_annotation", "name": "ProfilerStep#1"},
            {"cat": "user_annotation", "name": "Optimizer.step#SGD.step"},
            {"cat": "cpu_op", "name": "aten::mm"},
        ]
    }
    assert rewrite_annotations(data) == 1
    assert [e["cat"] for e in data["traceEvents"]] == ["user_annotation", "cpu_op", "cpu_op"]


def test_no_traces_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no trace files"):
        find_traces(tmp_path)


def test_missing_plugin_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_tb_profiler", None)  # makes `import` raise ImportError
    with pytest.raises(UsageError) as exc:
        check_plugin()
    msg = str(exc.value)
    assert "\n" not in msg and "pip install torch-tb-profiler" in msg and "ui.perfetto.dev" in msg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


def _first_line(stream, timeout_s: float) -> str | None:
    """Read one line from a child's pipe, giving up after ``timeout_s`` (readline alone blocks)."""
    box: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout_s)
    except queue.Empty:
        return None


@pytest.mark.e2e
def test_tensorboard_serves_the_run_over_http(captured_run: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}/data/plugin/pytorch_profiler"
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "tensorboard", str(captured_run), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = None
    try:
        # NOTE: wait for the URL on stdout first, as a user does. Polling the plugin alone raced
        # the command's own readiness check: under load the test could finish and send Ctrl-C
        # before advisor had printed the URL. The wait is generous because TensorBoard's start-up
        # (imports, plugin load) takes tens of seconds on a loaded 2-core machine.
        deadline = time.monotonic() + 180
        url = _first_line(proc.stdout, timeout_s=180)
        assert url is not None and proc.poll() is None, "no URL from advisor tensorboard"
        assert url.strip() == f"http://localhost:{port}/#pytorch_profiler"  # data on stdout: the URL
        runs = None
        while time.monotonic() < deadline and proc.poll() is None:
            runs = _get_json(f"http://127.0.0.1:{port}{PLUGIN_RUNS_PATH}")
            if isinstance(runs, dict) and run_label(captured_run) in runs.get("runs", []):
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert isinstance(runs, dict) and runs["runs"] == [run_label(captured_run)], runs
        # DataLoader time is visible only because the copy re-labels user_annotation events.
        overview = None
        while time.monotonic() < deadline:
            overview = _get_json(f"{base}/overview?run={run_label(captured_run)}&worker=rank0&span=1")
            if isinstance(overview, dict) and "steps" in overview:
                break
            time.sleep(0.5)
        assert isinstance(overview, dict), overview
        names = [c["name"] for c in overview["steps"]["columns"] if "name" in c]
        dl = names.index("DataLoader")
        values = [row[1 + 2 * (dl - 1)] for row in overview["steps"]["rows"]]
        assert sum(values) > 0, values
    finally:
        out, err = interrupt(proc)
    assert proc.returncode == 130, err  # 128 + SIGINT, as every command a signal stops (issue #30)
    assert out.strip() == ""  # the URL was the only line of data
    assert "ui.perfetto.dev" in err and "stopping TensorBoard" in err
    assert port_free("127.0.0.1", port)  # the server is really gone


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_killing_advisor_never_leaves_tensorboard_running(captured_run: Path) -> None:
    # TensorBoard runs in its own session (so a terminal's Ctrl-C reaches only advisor); without
    # the parent-death signal a SIGKILLed advisor left the server holding the port.
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "tensorboard", str(captured_run), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _first_line(proc.stdout, timeout_s=180) is not None, "no URL from advisor tensorboard"
        assert pids_with_args("tensorboard.main", str(port)), "TensorBoard should be serving"
        owned = [d for d in Path(tempfile.gettempdir()).glob("advisor-tb-*") if _owner(d) == proc.pid]
        assert len(owned) == 1, owned  # the served copy, marked with its advisor's pid
    finally:
        proc.kill()
        proc.communicate()
    assert gone_within("tensorboard.main", str(port)) == []
    # a SIGKILLed advisor cleans nothing up; the next advisor tensorboard removes its copy
    assert owned[0].is_dir()
    from advisor.report.tensorboard_logdir import remove_stale_copies

    assert owned[0] in remove_stale_copies() and not owned[0].exists()


def _owner(folder: Path) -> int | None:
    try:
        return int((folder / "owner.pid").read_text())
    except (OSError, ValueError):
        return None


# -- issue #20: runs named by script, time and variant; a folder of runs; stored once ----------------


def _fake_run(run: Path, script: str, *, trial: str | None = None, ranks: int = 0) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10, "pid": 1, "tid": 1}]

    def write(folder: Path) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "host_42.1700000000123.pt.trace.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            json.dump({"traceEvents": events}, fh)
        return path.as_posix()

    if ranks:
        files = [write(run / f"rank{r}" / "traces") for r in range(ranks)]
    else:
        files = [write(run / "traces")]
    (run / "capture.json").write_text(json.dumps({
        "schema_version": 1, "script": f"/work/{script}", "trace_files": [str(Path(f).relative_to(run)) for f in files],
    }))
    if trial:
        t = run / "trials" / trial
        tf = write(t / "traces")
        (t / "capture.json").write_text(json.dumps({"schema_version": 1, "trace_files": [str(Path(tf).relative_to(t))]}))
        (run / "trials" / "baseline-1").mkdir()  # an unprofiled trial run: no trace, skipped


def test_a_folder_of_runs_gives_each_run_and_variant_its_own_name(tmp_path: Path) -> None:
    runs = tmp_path / "advisor-runs"
    _fake_run(runs / "train-a", "train.py", trial="kept")
    _fake_run(runs / "eval-b", "eval.py", ranks=2)
    (runs / "not-a-run").mkdir()
    before = sorted(p for p in runs.rglob("*"))
    prepared = prepare_logdir(runs)
    try:
        assert prepared.temporary and runs not in prepared.logdir.parents
        stamp = r"\d{8}-\d{6}"
        assert [re.sub(stamp, "T", r) for r in prepared.runs] == ["eval-T-baseline", "train-T-baseline", "train-T-kept"]
        layout = sorted(p.relative_to(prepared.logdir).as_posix() for p in prepared.traces)
        assert [re.sub(stamp, "T", p) for p in layout] == [
            "eval-T-baseline/rank0.1700000000123.pt.trace.json.gz",
            "eval-T-baseline/rank1.1700000000123.pt.trace.json.gz",
            "train-T-baseline/rank0.1700000000123.pt.trace.json.gz",
            "train-T-kept/rank0.1700000000123.pt.trace.json.gz",
        ]
        assert sorted(p for p in runs.rglob("*")) == before  # nothing written into the runs
    finally:
        shutil.rmtree(prepared.logdir)


def test_what_advisor_tensorboard_says(tmp_path: Path) -> None:
    from advisor.report.tensorboard import serve_notes

    _fake_run(tmp_path / "r", "train.py", trial="kept")
    prepared = prepare_logdir(tmp_path / "r")
    try:
        notes = serve_notes(prepared)
    finally:
        shutil.rmtree(prepared.logdir)
    text = "\n".join(notes)
    assert "serves 2 run(s)" in text and "Diff" in text
    assert "Google Charts" in text and "spinner" in text and "report.html" in text  # the offline truth
    assert text.count("ui.perfetto.dev") == 2 and all(line.startswith("advisor: ") for line in notes)


@pytest.mark.e2e
def test_a_copy_left_by_a_killed_advisor_is_removed_by_the_next_one(tmp_path: Path) -> None:
    from advisor.report.tensorboard_logdir import OWNER_FILE, remove_stale_copies

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no process now (a reused pid would only keep the folder: safe)

    def copy(name: str, owner: str | None) -> Path:
        folder = tmp_path / name
        (folder / "run").mkdir(parents=True)
        (folder / "run" / "rank0.pt.trace.json").write_text("{}")
        if owner is not None:
            (folder / OWNER_FILE).write_text(owner)
        return folder

    stale = copy("advisor-tb-stale", str(dead.pid))
    live = copy("advisor-tb-live", str(os.getpid()))
    unknown = copy("advisor-tb-old", None)  # no owner file: nothing says it is ours to delete
    other = copy("someone-else", str(dead.pid))  # not our prefix
    assert remove_stale_copies(tmp_path) == [stale]
    assert not stale.exists() and live.is_dir() and unknown.is_dir() and other.is_dir()
