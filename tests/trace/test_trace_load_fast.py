"""The fast load path (array located without a full parse, in-place batches) gives the same table.

Each case is checked against the safe path: the whole file parsed first (``_locate_events``
disabled), so any shortcut that picked the wrong bytes shows up as a difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import advisor.trace.decode as decode
import advisor.trace.load as load
import advisor.trace.read as read

DEVICE_PROPS = [{"id": 0, "name": "GPU ]", "totalGlobalMem": 1, "list": [[1], [2]]}]


def _events(n: int = 120) -> list[dict]:
    """Events of every kind whose args the loader reads, in a mixed order."""
    evs: list[dict] = []
    for i in range(n):
        k = i % 6
        if k == 0:
            evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm" if i % 12 == 0 else "aten::add",
                        "pid": 1, "tid": 1, "ts": i, "dur": 2,
                        "args": {"External id": i, "Input Dims": [[i, 2], [2, 3]], "Input type": ["float", "float"],
                                 "flops": 12.0 * i, "Call stack": f"train.py({i % 3}): step"}})
        elif k == 1:
            evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                        "ts": i, "dur": 1, "args": {"External id": i - 1, "correlation": 1000 + i}})
        elif k == 2:
            evs.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": i + 0.5, "dur": 3,
                        "args": {"External id": i - 2, "correlation": 1000 + i - 1, "stream": 7, "device": 0,
                                 "grid": [1, 1, 1]}})
        elif k == 3:
            evs.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": i,
                        "s": "t", "args": {"Total Allocated": 10 * i, "Bytes": 4, "Device Type": 1, "Device Id": 0}})
        elif k == 4:
            evs.append({"ph": "X", "cat": "python_function", "name": f"train.py({i}): f", "pid": 1, "tid": 1,
                        "ts": i, "dur": 1, "args": {"Python id": i, "Python parent id": None if i < 12 else i - 6}})
        else:
            evs.append({"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": i, "cat": "ac2g", "name": "launch"})
    return evs


def _write(path: Path, events: list[dict], head: dict | None = None, tail: dict | None = None,
           lines: bool = True) -> Path:
    sep = ",\n" if lines else ", "
    parts = [json.dumps(head)[1:-1] + ", " if head else ""]
    parts.append('"traceEvents": [\n' + sep.join(json.dumps(e) for e in events) + "\n]")
    parts.append(", " + json.dumps(tail)[1:-1] if tail else "")
    path.write_text("{" + "".join(parts) + "}\n")
    return path


def _safe(monkeypatch: pytest.MonkeyPatch, path: Path) -> load.Trace:
    with monkeypatch.context() as m:
        m.setattr(decode, "_locate_events", lambda raw: None)
        return load.load_trace(path)


@pytest.mark.parametrize("batch_bytes", [200, 1 << 20])
def test_metadata_after_the_events_is_not_mistaken_for_them(tmp_path, monkeypatch, batch_bytes):
    path = _write(tmp_path / "t.json", _events(), head={"schemaVersion": 1},
                  tail={"deviceProperties": DEVICE_PROPS, "traceName": "a]b", "baseTimeNanoseconds": 5})
    monkeypatch.setattr(decode, "BATCH_BYTES", batch_bytes)
    head, start, stop = decode._locate_events(read._read_bytes(path))
    text = path.read_bytes()
    assert text[start : stop + 1] == text[text.index(b"[\n") : text.index(b"\n]") + 2]
    fast, safe = load.load_trace(path), _safe(monkeypatch, path)
    pd.testing.assert_frame_equal(fast.events, safe.events)
    assert fast.metadata == safe.metadata
    assert fast.metadata["deviceProperties"] == DEVICE_PROPS and fast.metadata["baseTimeNanoseconds"] == 5


def test_values_land_on_their_rows_across_batches(tmp_path, monkeypatch):
    written = _events()
    path = _write(tmp_path / "t.json", written)
    monkeypatch.setattr(decode, "BATCH_BYTES", 300)  # many small batches
    ev = load.load_trace(path).events
    # flow events get no row; the rows after them keep their own values
    evs = [e for e in written if e["ph"] != "s"]
    assert len(ev) == len(evs) < len(written)
    for i, e in enumerate(evs):
        args = e.get("args", {})
        assert ev["ts"].iloc[i] == e["ts"] and ev["name"].iloc[i] == e["name"]
        assert ev["ext_id"].iloc[i] == args.get("External id", -1)
        assert ev["correlation"].iloc[i] == args.get("correlation", -1)
        assert ev["stream"].iloc[i] == (args.get("stream", -1) if e["cat"] == "kernel" else -1)
        assert ev["total_allocated"].iloc[i] == args.get("Total Allocated", -1)
        assert ev["py_parent"].iloc[i] == (args.get("Python parent id") or -1 if "Python id" in args else -1)
        if e["cat"] == "cpu_op":
            assert ev["call_stack"].iloc[i] == args["Call stack"]
            assert ev["flops"].iloc[i] == args["flops"]
            assert (ev["input_dims"].iloc[i] == json.dumps(args["Input Dims"])) == (e["name"] in load.SHAPE_OPS)
        else:
            assert pd.isna(ev["call_stack"].iloc[i]) and np.isnan(ev["flops"].iloc[i])
    pd.testing.assert_frame_equal(ev, _safe(monkeypatch, path).events)


def test_nested_key_of_the_same_name_is_not_taken(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", _events(30), head={"meta": {"traceEvents": [{"ph": "X", "name": "fake"}]}})
    ev = load.load_trace(path).events
    assert len(ev) == 25 and "fake" not in set(ev["name"].astype(str))  # 30 events, 5 of them flows
    pd.testing.assert_frame_equal(ev, _safe(monkeypatch, path).events)


def test_too_many_brackets_after_the_events_fall_back_to_a_full_parse(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", _events(30), tail={"junk": [[i] for i in range(decode._CLOSE_TRIES + 5)]})
    calls = []
    original = decode._decode_head
    monkeypatch.setattr(decode, "_decode_head", lambda *a: calls.append(1) or original(*a))
    ev = load.load_trace(path).events
    assert calls  # the guess was wrong or missing: the whole file was parsed
    assert len(ev) == 25
    pd.testing.assert_frame_equal(ev, _safe(monkeypatch, path).events)


def test_file_is_untouched_and_a_failed_cut_leaves_no_trace(tmp_path, monkeypatch):
    # a ",\\n{" inside an event makes the fast path fail half-way: the bytes it swapped for
    # brackets must be back before the safe path reads the buffer
    evs = _events(60)
    body = ",\n".join(json.dumps(e)[:-1] + ', "extra": [{"a": 1},\n{"b": 2}]}' for e in evs)
    path = tmp_path / "nested.json"
    path.write_text('{"traceEvents": [\n' + body + "\n]}")
    before = path.read_bytes()
    monkeypatch.setattr(decode, "BATCH_BYTES", 250)
    ev = load.load_trace(path).events
    assert path.read_bytes() == before
    one_line = _write(tmp_path / "one.json", [dict(e, extra=[{"a": 1}, {"b": 2}]) for e in evs], lines=False)
    pd.testing.assert_frame_equal(ev, load.load_trace(one_line).events)


def test_unhashable_values_on_the_loose_path_count_as_absent(tmp_path):
    evs = [{"ph": "X", "cat": "cpu_op", "name": ["not", "a", "name"], "pid": 1, "tid": {"x": 1}, "ts": 1, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 2, "dur": 1}]
    ev = load.load_trace(_write(tmp_path / "t.json", evs)).events
    assert ev["name"].isna().iloc[0] and ev["tid"].isna().iloc[0]
    assert ev["name"].iloc[1] == "aten::add"


def test_pages_dropped_after_their_batch_are_read_again_by_the_fallback(tmp_path, monkeypatch):
    # the decoded batches' pages are unmapped as the decode goes (peak memory); a cut inside an
    # event near the end sends the load down the safe path, which reads those pages again
    evs = _events(3000)
    lines = [json.dumps(e) for e in evs]
    lines[-5] = lines[-5][:-1] + ', "extra": [{"a": 1},\n{"b": 2}]}'
    path = tmp_path / "late.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    before = path.read_bytes()
    monkeypatch.setattr(decode, "BATCH_BYTES", 16 << 10)
    dropped: list[int] = []
    drop = decode._drop_pages
    monkeypatch.setattr(decode, "_drop_pages", lambda raw, a, b: dropped.append(b - a) or drop(raw, a, b))
    ev = load.load_trace(path).events
    assert len(dropped) > 10 and path.read_bytes() == before
    evs[-5]["extra"] = [{"a": 1}, {"b": 2}]
    pd.testing.assert_frame_equal(ev, load.load_trace(_write(tmp_path / "one.json", evs, lines=False)).events)


def test_cutting_the_array_unmaps_the_pages_it_probed(tmp_path, monkeypatch):
    # the kernel maps the page cache's large folios whole: probing every batch's end would
    # otherwise leave the whole file mapped (and counted) in this process and its workers
    path = _write(tmp_path / "t.json", _events(3000))
    raw = read._read_bytes(path)
    _head, start, stop = decode._locate_events(raw)
    monkeypatch.setattr(decode, "BATCH_BYTES", 16 << 10)
    dropped: list[tuple[int, int]] = []
    monkeypatch.setattr(decode, "_drop_pages", lambda raw, a, b: dropped.append((a, b)))
    ranges = decode._line_ranges(raw, start + 1, stop)
    assert len(ranges) > 10 and dropped == [(start + 1, stop)]


def test_a_batch_that_is_not_utf8_is_the_damaged_file_case_under_every_msgspec():
    # msgspec 0.23 and later raise DecodeError where earlier ones raised UnicodeDecodeError: the
    # first is a bad split (try the safe path), the second a name to repair (advisor.trace.repair)
    import msgspec

    with pytest.raises(UnicodeDecodeError):
        decode._raise_if_not_utf8(msgspec.DecodeError("Invalid UTF-8 encoded string"))
    assert decode._raise_if_not_utf8(msgspec.DecodeError("Input data was truncated")) is None
