"""Issue #20 item 3: one Perfetto-ready file per run, ranks and profiled runs as separate processes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.errors import InputError
from advisor.report.perfetto import MERGED_FILE, label_of, timeline_file


def _trace(path: Path, pid: int, names: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    events = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"python {pid}"}},
        *({"ph": "X", "cat": "cpu_op", "name": n, "ts": i, "dur": 1, "pid": pid, "tid": 1} for i, n in enumerate(names)),
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "pid": 0, "tid": 7},  # a GPU track: pid = device
    ]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    return path


def _load(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_one_trace_is_its_own_timeline(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "traces" / "h_1.1.pt.trace.json.gz", 1, ["a"])
    assert timeline_file(tmp_path) == trace
    assert not (tmp_path / MERGED_FILE).exists()  # stored once: nothing merged for one trace


def test_ranks_and_a_profiled_trial_are_merged_as_separate_processes(tmp_path: Path) -> None:
    r0 = _trace(tmp_path / "rank0" / "traces" / "h_1.1.pt.trace.json.gz", 1, ["a", "b"])
    r1 = _trace(tmp_path / "rank1" / "traces" / "h_1.1.pt.trace.json.gz", 1, ["c"])  # same pid on another node
    kept = _trace(tmp_path / "trials" / "kept" / "traces" / "h_9.1.pt.trace.json.gz", 9, ["d"])
    _trace(tmp_path / "tensorboard" / "run" / "old.pt.trace.json.gz", 5, ["x"])  # an old prepared copy: ignored
    assert [label_of(t, tmp_path) for t in (r0, r1, kept)] == ["rank0", "rank1", "kept"]
    merged = timeline_file(tmp_path)
    assert merged == tmp_path / MERGED_FILE
    events = _load(merged)
    ops = {e["name"]: e["pid"] for e in events if e.get("cat") == "cpu_op"}
    assert set(ops) == {"a", "b", "c", "d"} and ops["a"] == ops["b"]
    assert len({ops["a"], ops["c"], ops["d"]}) == 3  # each source its own process
    kernels = {e["pid"] for e in events if e.get("cat") == "kernel"}
    assert len(kernels) == 3 and not kernels & set(ops.values())  # GPU tracks do not collide either
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names[ops["a"]] == "rank0 · python 1" and names[ops["d"]] == "kept · python 9"
    assert names[ops["c"]] == "rank1 · python 1"
    assert {"rank0 · 0", "rank1 · 0", "kept · 0"} <= set(names.values())  # GPU tracks named too
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert order[ops["a"]] < order[ops["c"]] < order[ops["d"]]
    assert timeline_file(tmp_path) == merged and merged.stat().st_mtime >= r1.stat().st_mtime  # reused


def test_no_trace_no_timeline(tmp_path: Path) -> None:
    assert timeline_file(tmp_path) is None


def test_a_broken_trace_is_an_input_error(tmp_path: Path) -> None:
    _trace(tmp_path / "rank0" / "traces" / "a.pt.trace.json.gz", 1, ["a"])
    (tmp_path / "rank1" / "traces").mkdir(parents=True)
    (tmp_path / "rank1" / "traces" / "b.pt.trace.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable trace"):
        timeline_file(tmp_path)
    assert not list(tmp_path.glob("perfetto*"))  # nothing half-written
