"""Loading traces: formats, ranks, old category names, bad inputs, and no torch import."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import TraceError
from advisor.trace.columns import FLOW_PHASES
from advisor.trace.load import CATEGORY_ALIASES, load_trace, load_traces

REPO = Path(__file__).resolve().parents[2]
CPU_SMALL = REPO / "tests" / "data" / "cpu_small"


def _raw(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def test_cpu_trace_loads_with_vectorised_columns():
    (trace,) = load_traces(CPU_SMALL)
    raw = _raw(next(CPU_SMALL.glob("*.json.gz")))
    ev = trace.events
    # one row per event but the flow arrows
    assert len(ev) == sum(e.get("ph") not in FLOW_PHASES for e in raw["traceEvents"])
    for col in ("name", "cat", "ph", "pid", "tid"):
        assert str(ev[col].dtype) == "category"
    assert ev["ts"].dtype.kind == "f" and ev["dur"].dtype.kind == "f"
    # values round-trip: the sum of X durations matches the raw file
    raw_dur = sum(e.get("dur", 0) for e in raw["traceEvents"] if e.get("ph") == "X")
    assert ev.loc[ev["ph"] == "X", "dur"].sum() == pytest.approx(raw_dur)
    # shapes are kept for the ops that carry them
    mm = ev[ev["name"] == "aten::addmm"]
    assert mm["input_dims"].notna().all()
    assert trace.metadata.get("with_stack") in (1, True)


def test_old_category_names_are_normalised(shared_traces):
    path = next((shared_traces / "kineto").rglob("*.json.gz"))
    (trace,) = load_traces(path)
    raw = _raw(path)["traceEvents"]
    cats = set(trace.events["cat"].dropna().unique())
    assert not cats & set(CATEGORY_ALIASES), cats
    expected = {new: sum(1 for e in raw if e.get("cat") == old) for old, new in CATEGORY_ALIASES.items()}
    counts = trace.events["cat"].value_counts()
    for new, n in expected.items():
        assert counts.get(new, 0) == n
    assert expected["kernel"] == 8772
    # old traces spell 'external id' in lower case on GPU events: it still lands in ext_id
    kernels = trace.events[trace.events["cat"] == "kernel"]
    assert (kernels["ext_id"] >= 0).all()
    assert trace.events["call_stack"].notna().sum() > 0


def test_synthetic_old_and_new_names_mix(tmp_path):
    events = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 1, "tid": "1", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "1", "ts": 12, "dur": 5,
         "args": {"correlation": 7, "external id": 3}},
        {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": "stream 7", "ts": 40, "dur": 30,
         "args": {"correlation": 7, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 80, "dur": 10, "args": {"correlation": 8, "bytes": 1000, "stream": 7, "device": 0}},
    ]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    ev = trace.events
    assert list(ev["cat"].astype(str)) == ["cpu_op", "cpu_op", "cuda_runtime", "kernel", "gpu_memcpy"]
    # tid given as "1" and 1 is the same thread
    assert ev["tid"].astype(str).iloc[0] == ev["tid"].astype(str).iloc[1] == "1"
    assert ev["ext_id"].iloc[2] == 3 and ev["correlation"].iloc[3] == 7 and ev["bytes"].iloc[4] == 1000


def test_odd_values_take_the_loose_path(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 5, "dur": 5,
         "args": {"External id": "not-a-number"}},
        {"ph": "X", "cat": None, "name": "odd", "pid": 1, "tid": 1, "ts": 20, "dur": 1},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ev = load_trace(path).events
    assert len(ev) == 3
    assert ev["ext_id"].iloc[1] == -1
    assert ev["cat"].isna().iloc[2]


def test_directory_of_ranks(shared_traces):
    folder = shared_traces / "param" / "dlrm_kineto"
    traces = load_traces(folder)
    assert len(traces) == 8
    for t in traces:
        assert t.rank == _raw(t.path)["distributedInfo"]["rank"]
    assert [t.rank for t in traces] == list(range(8))


def test_rank_from_file_order_without_distributed_info(tmp_path):
    src = next(CPU_SMALL.glob("*.json.gz"))
    for name in ("b_worker.pt.trace.json.gz", "a_worker.pt.trace.json.gz"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        (tmp_path / "sub" / name).write_bytes(src.read_bytes())
    traces = load_traces(tmp_path)
    assert [t.rank for t in traces] == [0, 1]
    assert [t.path.name for t in traces] == ["a_worker.pt.trace.json.gz", "b_worker.pt.trace.json.gz"]


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    good = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}] * 500}).encode())
    cases = {
        "missing": tmp_path / "nope.json",
        "empty": tmp_path / "empty.json",
        "blank": tmp_path / "blank.json",
        "truncated_gzip": tmp_path / "trunc.json.gz",
        "invalid_json": tmp_path / "bad.json",
        "not_a_trace": tmp_path / "other.json",
        "json_list": tmp_path / "list.json",
        "empty_dir": tmp_path / "emptydir",
    }
    cases["empty"].write_bytes(b"")
    cases["blank"].write_bytes(b"  \n\t ")
    cases["truncated_gzip"].write_bytes(good[: len(good) // 2])
    cases["invalid_json"].write_text('{"traceEvents": [{"ph": "X", "name": "x"')
    cases["not_a_trace"].write_text(json.dumps({"hello": 1}))
    cases["json_list"].write_text("[1, 2, 3]")
    cases["empty_dir"].mkdir()
    (cases["empty_dir"] / "notes.txt").write_text("no traces here")
    return cases


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("missing", "does not exist"),
        ("empty", "empty"),
        ("blank", "empty"),
        ("truncated_gzip", "gzip"),
        ("invalid_json", "not valid JSON"),
        ("not_a_trace", "no traceEvents"),
        ("json_list", "not a torch.profiler trace"),
        ("empty_dir", "no *.json"),
    ],
)
def test_bad_input_gives_one_line_trace_error(tmp_path, case, fragment):
    path = _bad_inputs(tmp_path)[case]
    with pytest.raises(TraceError) as info:
        load_traces(path)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert path.name in message


@pytest.mark.e2e
def test_never_imports_torch():
    code = (
        "import sys; import advisor.metrics.compute as c; "
        f"m = c.analyze_path({str(CPU_SMALL)!r}); "
        "from advisor.metrics.timeline import step_timeline; "
        "from advisor.metrics.describe import format_metrics; format_metrics(m); "
        "bad = sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')); "
        "print('TORCH' if bad else 'CLEAN', m.summary['step_count'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["CLEAN", "3.0"]


def test_small_batches_give_the_same_table(monkeypatch, shared_traces):
    """The batched decoder (slices of the file buffer) must not depend on the batch size."""
    import pandas as pd

    import advisor.trace.decode as decode

    path = shared_traces / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
    reference = load_trace(path).events
    monkeypatch.setattr(decode, "BATCH_EVENTS", 97)
    small = load_trace(path).events
    pd.testing.assert_frame_equal(reference, small)


def test_plain_file_is_memory_mapped_and_matches_gzip(tmp_path):
    import pandas as pd

    src = next(CPU_SMALL.glob("*.json.gz"))
    plain = tmp_path / "t.pt.trace.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    pd.testing.assert_frame_equal(load_trace(src).events, load_trace(plain).events)


def _reference_and_variants(tmp_path, events, monkeypatch, batch_bytes):
    import pandas as pd

    import advisor.trace.decode as decode

    lines = tmp_path / "lines.json"
    lines.write_text('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]}")
    one_line = tmp_path / "oneline.json"
    one_line.write_text(json.dumps({"traceEvents": events}))
    reference = load_trace(one_line).events
    monkeypatch.setattr(decode, "BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(decode, "BATCH_EVENTS", 7)
    monkeypatch.setattr(decode, "_MAX_LINE", 0)  # the one-line file takes the safe path
    for path in (lines, one_line):
        pd.testing.assert_frame_equal(reference, load_trace(path).events)
    return reference


def test_line_split_fast_path_and_safe_path_agree(tmp_path, monkeypatch):
    evs = []
    for i in range(300):
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 17}", "pid": 1, "tid": 1,
                          "ts": i * 10, "dur": 5, "args": {"External id": i, "Input Dims": [[i, 3]]}})
    ref = _reference_and_variants(tmp_path, evs, monkeypatch, batch_bytes=512)
    assert len(ref) == 300 and ref["ext_id"].tolist() == list(range(300))


def test_bad_line_split_falls_back(tmp_path, monkeypatch):
    # pretty-printed nested objects put ",\n{" inside an event: a cut there must not be trusted
    evs = []
    for i in range(200):
        evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i, "dur": 1,
                    "args": {"External id": i}})
    path = tmp_path / "nested.json"
    body = ",\n".join(
        json.dumps(e)[:-1] + ', "extra": [{"a": 1},\n{"b": 2}]}' for e in evs
    )
    path.write_text('{"traceEvents": [\n' + body + "\n]}")
    import advisor.trace.decode as decode

    reference = load_trace(path).events
    monkeypatch.setattr(decode, "BATCH_BYTES", 300)
    monkeypatch.setattr(decode, "BATCH_EVENTS", 9)
    safe_calls = []
    original = decode._batches
    monkeypatch.setattr(decode, "_batches", lambda *a: safe_calls.append(1) or original(*a))
    import pandas as pd

    pd.testing.assert_frame_equal(reference, load_trace(path).events)
    assert safe_calls  # the bad cut was detected and the safe path used
    assert load_trace(path).events["ext_id"].tolist() == list(range(200))


def test_empty_event_list_is_bad_input(tmp_path):
    """A trace of no events was analysed to "none found", exit 0 (issue #30): it is bad input."""
    path = tmp_path / "empty_events.json"
    path.write_text('{"traceEvents": [ ]}')
    with pytest.raises(TraceError, match="holds no trace events"):
        load_trace(path)
