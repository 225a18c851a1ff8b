"""One large trace decoded by forked workers (advisor.trace.fanout) gives the serial table, exactly.

The thresholds are lowered so that a trace of a few MB is cut into many tasks over three
workers; each case is decoded both ways and every column (values, dtypes, category order) and
the metadata are compared (the ``forks`` fixture is in conftest.py). The tests that fork are
marked e2e.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

import advisor.trace.decode as decode
import advisor.trace.fanout as fanout
import advisor.trace.load as load
from advisor.trace.native import check_same_events


def _events(n: int) -> list[dict]:
    """Events of every kind the loader reads args of; names, stacks and shapes keep appearing
    for the first time all along the file (so each worker meets values the others saw first)."""
    evs: list[dict] = []
    for i in range(n):
        k = i % 6
        late = i // 500  # a new family of names every 500 events
        if k == 0:
            evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm" if i % 12 == 0 else f"aten::op{late % 40}",
                        "pid": 1, "tid": 1 + late % 3, "ts": i, "dur": 2,
                        "args": {"External id": i, "Input Dims": [[i % 50, 2], [2, 3]], "Input type": ["float", "float"],
                                 "flops": 12.0 * i, "Call stack": f"train.py({i % 97}): step;model.py({late})"}})
        elif k == 1:
            evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                        "ts": i, "dur": 1, "args": {"External id": i - 1, "correlation": 1000 + i}})
        elif k == 2:
            evs.append({"ph": "X", "cat": "kernel", "name": f"gemm_{late}", "pid": 0, "tid": 7, "ts": i + 0.5,
                        "dur": 3, "args": {"External id": i - 2, "correlation": 1000 + i - 1, "stream": 7 + late % 2,
                                           "device": 0, "grid": [1, 1, 1]}})
        elif k == 3:
            evs.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": i,
                        "s": "t", "args": {"Total Allocated": 10 * i, "Bytes": 4, "Device Type": 1, "Device Id": 0}})
        elif k == 4:
            evs.append({"ph": "X", "cat": "python_function", "name": f"train.py({i % 300}): f", "pid": 1, "tid": 1,
                        "ts": i, "dur": 1, "args": {"Python id": i, "Python parent id": None if i < 12 else i - 6}})
        else:
            evs.append({"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": i, "cat": "ac2g", "name": "launch"})
    # old-style values that send a batch down the loose path, late in the file
    evs[-700]["pid"] = "stream 7"
    evs[-690]["args"] = {"External id": "12"}
    return evs


def _text(events: list[dict]) -> str:
    body = ",\n".join(json.dumps(e) for e in events)
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}]}
    return json.dumps(head)[:-1] + ', "traceEvents": [\n' + body + '\n], "baseTimeNanoseconds": 5}\n'


def _serial(monkeypatch: pytest.MonkeyPatch, path: Path) -> load.Trace:
    with monkeypatch.context() as m:
        m.setattr(fanout, "PARALLEL_BYTES", 1 << 62)
        return load.load_trace(path)


def _assert_same(a: load.Trace, b: load.Trace) -> None:
    check_same_events(a.events, b.events)
    assert a.metadata == b.metadata


def _gone(pids: list[int]) -> bool:
    """Every pid has exited and been reaped (no worker left running, no zombie)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


@pytest.mark.e2e
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_parallel_decode_gives_the_serial_table(tmp_path, monkeypatch, forks, gz):
    events = _events(12000)
    text = _text(events).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    serial = _serial(monkeypatch, path)
    assert not forks
    parallel = load.load_trace(path)
    assert len(forks) == 3 and _gone(forks)
    assert len(parallel.events) == sum(e["ph"] != "s" for e in events)
    _assert_same(parallel, serial)
    if not gz:
        assert path.read_bytes() == text  # the in-place framing wrote only to private pages


@pytest.mark.e2e
def test_a_cut_inside_an_event_falls_back_to_the_safe_path(tmp_path, monkeypatch, forks):
    # ",\n{" inside every event: the workers' batches fail to decode, the whole file is parsed
    # and decoded one event at a time; the swapped bytes of the failed cut are back in place
    evs = _events(6000)
    body = ",\n".join(json.dumps(e)[:-1] + ', "extra": [{"a": 1},\n{"b": 2}]}' for e in evs)
    path = tmp_path / "nested.json"
    path.write_text('{"traceEvents": [\n' + body + "\n]}")
    before = path.read_bytes()
    calls: list[int] = []
    safe = decode._safe_frame
    monkeypatch.setattr(decode, "_safe_frame", lambda *a: calls.append(1) or safe(*a))
    parallel = load.load_trace(path)
    assert forks and calls and _gone(forks) and path.read_bytes() == before
    _assert_same(parallel, _serial(monkeypatch, path))
    assert len(parallel.events) == sum(e["ph"] != "s" for e in evs)


@pytest.mark.e2e
def test_names_written_unescaped_are_repaired_the_same_way(tmp_path, monkeypatch, forks):
    evs = _events(12000)
    evs[4000]["name"] = "aten::bad\x01name"
    text = _text(evs).replace("\\u0001", "\x01")  # torch wrote the control character raw
    path = tmp_path / "raw.json"
    path.write_text(text)
    parallel = load.load_trace(path)
    assert forks and _gone(forks)
    _assert_same(parallel, _serial(monkeypatch, path))
    row = sum(e["ph"] != "s" for e in evs[:4000])  # the flow events before it get no row
    assert parallel.events["name"].iloc[row] == "aten::bad\x01name"


@pytest.mark.e2e
def test_a_worker_that_dies_leaves_the_decode_to_this_process(tmp_path, monkeypatch, forks):
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    monkeypatch.setattr(fanout, "_work", lambda *a: os._exit(3))  # an OOM kill, say
    parallel = load.load_trace(path)
    assert forks and _gone(forks)
    _assert_same(parallel, _serial(monkeypatch, path))


@pytest.mark.e2e
def test_ctrl_c_while_merging_ends_every_worker(tmp_path, monkeypatch, forks):
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    merge = fanout._merge
    merged: list[int] = []

    def interrupted(*args: object) -> None:
        merged.append(1)
        if len(merged) == 2:
            raise KeyboardInterrupt
        merge(*args)

    monkeypatch.setattr(fanout, "_merge", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load.load_trace(path)
    assert len(forks) == 3 and _gone(forks)


def test_small_traces_and_busy_processes_decode_serially(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert fanout.workers_for(fanout.PARALLEL_BYTES - 1) == 1
    assert fanout.workers_for(max(fanout.PARALLEL_BYTES, 3 * fanout.WORKER_BYTES)) == 3
    # each worker gets enough to pay for its start
    assert fanout.workers_for(max(fanout.PARALLEL_BYTES, 2 * fanout.WORKER_BYTES)) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert fanout.workers_for(10 * fanout.PARALLEL_BYTES) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    # another thread might hold a lock the forked child would need
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert fanout.workers_for(10 * fanout.PARALLEL_BYTES) == 1
    finally:
        stop.set()
        thread.join()
    # a rank worker of ``advisor analyze --jobs N``: the cores are taken by the other ranks
    monkeypatch.setitem(sys.modules, "multiprocessing", types.SimpleNamespace(parent_process=lambda: object()))
    assert fanout.workers_for(10 * fanout.PARALLEL_BYTES) == 1


def test_tasks_are_consecutive_batches_covering_the_array():
    ranges = [(i * 10, i * 10 + 9) for i in range(100)]
    tasks = fanout._tasks(ranges, 2)
    assert [r for task in tasks for r in task] == ranges
    assert len(tasks) >= 8


@pytest.mark.e2e
def test_the_callers_other_work_runs_once_while_the_workers_decode(tmp_path, monkeypatch, forks):
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    seen: list[int] = []
    trace = load.load_trace(path, meanwhile=lambda: seen.append(len(forks)))
    assert seen == [3] and len(trace.events) == 10000  # 12000 events, every sixth a flow

    def bad_selection() -> None:
        raise ValueError("unknown rule code")

    forks.clear()
    with pytest.raises(ValueError, match="unknown rule code"):
        load.load_trace(path, meanwhile=bad_selection)
    assert len(forks) == 3 and _gone(forks)


def test_the_callers_other_work_runs_once_before_a_serial_decode(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(_text(_events(1000)))
    seen: list[str] = []
    load.load_trace(path, meanwhile=lambda: seen.append("ran"))
    assert seen == ["ran"]


@pytest.mark.e2e
def test_workers_finish_while_this_process_is_busy(tmp_path, monkeypatch, forks):
    # pipes of one page: the parts do not fit, so a worker that waited for this process to read
    # each one would not get to the end of its tasks before the caller's other work is done
    monkeypatch.setattr(fanout, "_PIPE_BYTES", 4096)
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    done = tmp_path / "done"
    done.mkdir()
    close = fanout._Outbox.close

    def decoded_all(outbox: fanout._Outbox) -> None:  # runs in the workers
        (done / str(os.getpid())).touch()
        close(outbox)

    monkeypatch.setattr(fanout._Outbox, "close", decoded_all)

    def wait_for_the_workers() -> None:
        deadline = time.monotonic() + 10
        while len(list(done.iterdir())) < 3:
            assert time.monotonic() < deadline, "a worker waited for this process to read its parts"
            time.sleep(0.01)

    trace = load.load_trace(path, meanwhile=wait_for_the_workers)
    assert len(forks) == 3 and _gone(forks)
    _assert_same(trace, _serial(monkeypatch, path))


@pytest.mark.e2e
def test_bytes_that_are_not_utf8_give_the_serial_error(tmp_path, monkeypatch, forks):
    text = _text(_events(12000)).encode()
    at = text.index(b"gemm_20")
    path = tmp_path / "bad.json"
    path.write_bytes(text[:at] + b"\xff\xfe" + text[at + 2 :])  # a worker's batch meets them
    with pytest.raises(load.TraceError) as parallel:
        load.load_trace(path)
    assert forks and _gone(forks)
    with pytest.raises(load.TraceError) as serial:
        _serial(monkeypatch, path)
    assert str(parallel.value) == str(serial.value) and "UTF-8" in str(serial.value)


@pytest.mark.e2e
def test_a_slow_worker_takes_fewer_tasks(tmp_path, monkeypatch, forks):
    # one worker shares its core with other work: the others take its share of the tasks
    path = tmp_path / "t.json"
    path.write_text(_text(_events(12000)))
    slow = tmp_path / "slow"
    work = fanout._work

    def maybe_slow(fill, tasks, queue, fd):  # runs in the workers
        try:
            slow.touch(exist_ok=False)  # the first worker to get here is the slow one
        except FileExistsError:
            return work(fill, tasks, queue, fd)
        return work(lambda ranges, columns: time.sleep(0.3) or fill(ranges, columns), tasks, queue, fd)

    monkeypatch.setattr(fanout, "_work", maybe_slow)
    merged: dict[int, int] = {}
    merge = fanout._merge

    def counted(columns, part, codes):
        merged[id(codes)] = merged.get(id(codes), 0) + 1
        merge(columns, part, codes)

    monkeypatch.setattr(fanout, "_merge", counted)
    trace = load.load_trace(path)
    assert len(forks) == 3 and _gone(forks)
    counts = sorted(merged.values())
    assert len(counts) == 3 and counts[0] * 3 < counts[-1], counts
    _assert_same(trace, _serial(monkeypatch, path))
