"""The native scanner (advisor.trace._scan) gives the same table as the msgspec decode.

Every case loads one file twice, scanned natively and with ``ADVISOR_NATIVE_SCAN=0``, and compares
the whole table, categories and their order included; where the scanner must give up (a field
the strict decode would refuse), the table must still be the same, through msgspec.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import mmap
import random
import shutil
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

import advisor.trace.decode as decode
import advisor.trace.load as load
import advisor.trace.native as native
from advisor.errors import TraceError

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO.parent / "shared" / "traces"

needs_native = pytest.mark.skipif(native.Scanner is None, reason="advisor.trace._scan was not compiled here")


def _load_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, dict[str, int]]:
    """The load scanned natively and through msgspec, each a table or the error's text; native batch counts."""
    counts = {"scanned": 0, "refused": 0}
    add = native.NativeScan.add

    def counted(self, *args):
        ok = add(self, *args)
        counts["scanned" if ok else "refused"] += 1
        return ok

    out = []
    for flag in ("1", "0"):
        with monkeypatch.context() as m:
            m.setenv("ADVISOR_NATIVE_SCAN", flag)
            m.setattr(native.NativeScan, "add", counted)
            try:
                out.append(load.load_trace(path).events)
            except TraceError as exc:
                out.append(str(exc))
    return out[0], out[1], counts


def _assert_same(a: object, b: object) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    native.check_same_events(a, b)


def _trace(path: Path, lines: list[str]) -> Path:
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n", encoding="utf-8")
    return path


def _op(i: int, **extra: object) -> dict:
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm" if i % 2 else "aten::add", "pid": 7, "tid": 3,
             "ts": 1000 + i, "dur": 2.5, "args": {"External id": i, "Input Dims": [[i, 2], [2, 3]],
                                                 "Input type": ["float", "float"], "Call stack": f"train.py({i}): f"}}
    event.update(extra)
    return event


def test_the_module_is_built_where_a_compiler_is():
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.skip("no C compiler here: advisor installs without the native scanner")
    assert native.Scanner is not None, "the install did not build advisor.trace._scan (see setup.py)"


@needs_native
@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.json*") if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))),
)
def test_same_table_on_our_recorded_traces(path, monkeypatch):
    a, b, counts = _load_both(REPO / path, monkeypatch)
    _assert_same(a, b)
    assert counts["scanned"] and not counts["refused"]


@needs_native
@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not here")
def test_same_table_on_the_shared_gpu_traces(monkeypatch):
    paths = sorted(SHARED_TRACES.rglob("*.json*"))
    assert paths
    for path in paths:
        a, b, counts = _load_both(path, monkeypatch)
        _assert_same(a, b)
        assert counts["scanned"] and not counts["refused"], path


# Each case: one event's JSON text, and whether the scanner takes it (False: msgspec decodes it).
CASES = {
    "plain": (json.dumps(_op(1)), True),
    "escapes in values": (r'{"ph": "X", "cat": "cpu_op", "name": "a\"b\\c\u00e9\ud83d\ude00\n", "pid": 1, "tid": 1, "ts": 1, "dur": 1}', True),
    "raw UTF-8": ('{"ph": "X", "cat": "cpu_op", "name": "é 😀 ß", "pid": 1, "tid": 1, "ts": 1, "dur": 1}', True),
    "string pid, negative tid": ('{"ph": "X", "cat": "kernel", "name": "k", "pid": "stream 7", "tid": -3, "ts": 1, "dur": 1}', True),
    "numbers": ('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1.7e12, "dur": 0.1e-3,'
                ' "args": {"flops": 12, "bytes": -0, "External id": 9223372036854775807}}', True),
    "long decimals": ('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1700000000000.12345678901,'
                      ' "dur": 123456789012345678901234567890, "args": {"flops": 1E300}}', True),
    "no args, no dur": ('{"ph": "i", "cat": "cpu_op", "name": "m", "pid": 1, "tid": 1, "ts": 3}', True),
    "empty event": ("{}", True),
    "null parent, null stack": ('{"ph": "X", "cat": "python_function", "name": "p", "pid": 1, "tid": 1, "ts": 1,'
                                ' "args": {"Python id": 4, "Python parent id": null, "Call stack": null}}', True),
    "nested unknown values": ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "id": [1, {"a": [true, false, null]}],'
                              ' "args": {"grid": [1, [2, [3]]], "x": {"y": {"z": "w"}}, "correlation": 5, "stream": 7}}', True),
    "whitespace": ('{ "ph" :\t"X" ,\r\n "cat":"cpu_op","name" : "w" , "pid":1,"tid":1,"ts":1,"dur":1 , "args" : { } }', True),
    "flow event": ('{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "launch"}', True),
    "float id": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": {"External id": 1.5}}', False),
    "string id": ('{"ph": "X", "cat": "kernel", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": {"correlation": "12"}}', False),
    "null ts": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": null}', False),
    "null args": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": null}', False),
    "float pid": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1.5, "tid": 1, "ts": 1}', False),
    "numeric name": ('{"ph": "X", "cat": "cpu_op", "name": 5, "pid": 1, "tid": 1, "ts": 1}', False),
    "escaped key": ('{"ph": "X", "cat": "cpu_op", "na\\u006de": "f", "pid": 1, "tid": 1, "ts": 1}', False),
    "duplicate key": ('{"ph": "X", "cat": "cpu_op", "name": "f", "name": "g", "pid": 1, "tid": 1, "ts": 1}', False),
    "control character in a skipped string": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": {"note": "a\tb"}}', False),
    "bad escape in a skipped string": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": {"note": "a\\qb"}}', False),
    "id past int64": ('{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1, "args": {"External id": 9223372036854775808}}', False),
}


@needs_native
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_table_on_an_odd_event_among_plain_ones(case, tmp_path, monkeypatch):
    text, taken = CASES[case]
    # small batches: the odd event has a batch of its own between plain ones, so a batch the
    # scanner gives up on must not disturb the ones before and after it
    monkeypatch.setattr(decode, "BATCH_BYTES", 400)
    lines = [json.dumps(_op(i)) for i in range(6)] + [text] + [json.dumps(_op(i)) for i in range(6, 12)]
    lines.insert(3, json.dumps(_op(20, name="only before")))
    lines.append(json.dumps(_op(21, name="only after")))
    a, b, counts = _load_both(_trace(tmp_path / "t.json", lines), monkeypatch)
    _assert_same(a, b)
    assert counts["scanned"] >= 2
    assert bool(counts["refused"]) == (not taken)


@needs_native
def test_strings_with_an_escape_or_a_wide_character_at_every_offset_of_a_block(tmp_path, monkeypatch):
    """Strings are scanned 16 bytes, then 8 at a time: a special byte anywhere in or past a block is found."""
    specials = ['\\"', "\\\\", "\\u00e9", "é", "😀", "\\n"]
    lines, expected = [], set()
    for length in range(0, 50):
        for k, special in enumerate(specials):
            at = (length * 7 + k) % (length + 1)
            text = "a" * at + special + "b" * (length - at)
            lines.append(json.dumps(_op(len(lines), name="n" * length)))
            expected.add("n" * length)
            event = json.dumps(_op(len(lines), name="NAME"))
            lines.append(event.replace('"NAME"', '"' + text + '"'))
            expected.add(json.loads('"' + text + '"'))
    a, b, counts = _load_both(_trace(tmp_path / "t.json", lines), monkeypatch)
    _assert_same(a, b)
    assert counts["scanned"] and not counts["refused"]
    assert set(a["name"].astype(str)) == expected


@needs_native
@pytest.mark.parametrize("at", range(0, 40))
def test_a_control_character_at_any_offset_of_a_string_is_refused(at, tmp_path, monkeypatch):
    note = "a" * at + "\t" + "b" * (39 - at)  # raw tab inside a JSON string: not valid JSON
    lines = [json.dumps(_op(i)) for i in range(3)]
    lines.append(json.dumps(_op(3, note="NOTE")).replace("NOTE", note))
    a, b, counts = _load_both(_trace(tmp_path / "t.json", lines), monkeypatch)
    _assert_same(a, b)
    assert counts["refused"]


@needs_native
def test_invalid_utf8_in_a_skipped_string_goes_to_msgspec(tmp_path, monkeypatch):
    text = json.dumps(_op(1, note="a?b")).encode().replace(b"a?b", b"a\xffb")
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [\n' + text + b"\n]}")
    a, b, counts = _load_both(path, monkeypatch)
    _assert_same(a, b)
    assert counts["refused"]


@needs_native
def test_same_table_on_damaged_traces(tmp_path, monkeypatch):
    """Bytes changed or cut at random: both ways give the same table or the same error."""
    monkeypatch.setattr(decode, "BATCH_BYTES", 300)
    lines = [json.dumps(_op(i)) for i in range(10)] + [text for text, _ in CASES.values()]
    good = _trace(tmp_path / "good.json", lines).read_bytes()
    rng = random.Random(33)
    alphabet = b'{}[]":,.-+eE0123456789 \n\\unlltrue\x00\xff\xc3'
    for k in range(150):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            if rng.random() < 0.2:
                del data[at : at + rng.randint(1, 20)]
            else:
                data[at] = rng.choice(alphabet)
        path = tmp_path / f"d{k}.json"
        path.write_bytes(bytes(data))
        a, b, _ = _load_both(path, monkeypatch)
        _assert_same(a, b)


@needs_native
@pytest.mark.e2e
def test_same_table_in_gzip_and_across_parallel_workers(tmp_path, monkeypatch, forks):
    events = [json.dumps(_op(i, name=f"op{i % 37}", tid=i % 5)) for i in range(12000)]
    plain = _trace(tmp_path / "big.json", events)
    a, b, counts = _load_both(plain, monkeypatch)
    assert forks, "the parallel decode did not run"
    _assert_same(a, b)
    packed = tmp_path / "big.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes(), 1))
    c, _, _ = _load_both(packed, monkeypatch)
    _assert_same(a, c)


@needs_native
def test_a_range_outside_the_buffer_is_refused():
    with pytest.raises(ValueError):
        native.Scanner().scan(b"{}", 0, 3)
    assert native.Scanner().scan(b"[]", 1, 1)[0] == 0
    with pytest.raises(RuntimeError):
        native.Scanner.__new__(native.Scanner).scan(b"{}", 0, 2)  # never initialised: no tables


@needs_native
@pytest.mark.skipif(not hasattr(mmap, "MAP_PRIVATE"), reason="needs mmap and mprotect (POSIX)")
def test_the_scanner_never_reads_past_the_range(tmp_path):
    """Events cut at every byte, and damaged ones, ending right before an unreadable page."""
    libc = ctypes.CDLL(None)
    page = mmap.PAGESIZE
    size = 8 * page
    area = mmap.mmap(-1, size + page)
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    assert libc.mprotect(ctypes.c_void_p(address + size), ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    seeds = [json.dumps(_op(1)).encode()] + [text.encode() for text, _ in CASES.values()]
    rng = random.Random(7)
    bodies = [seed[:cut] for seed in seeds for cut in range(len(seed) + 1)]
    for _ in range(2000):
        body = bytearray(b",\n".join(rng.choice(seeds) for _ in range(rng.randint(1, 3))))
        body[rng.randrange(len(body))] = rng.choice(b'{}[]":,.-e0\\u\x00\xc3')
        bodies.append(bytes(body))
    scanner = native.Scanner()
    taken = 0
    for body in bodies:
        area[size - len(body) : size] = body
        taken += scanner.scan(area, size - len(body), size) is not None
    assert taken  # some were whole events


def test_the_scanner_s_column_blocks_are_the_fields_the_table_reads():
    from advisor.trace import columns

    if native.Scanner is None:
        pytest.skip("advisor.trace._scan was not compiled here")
    # the C module names its rows; the columns code reads them by these names
    assert native.KEY_FIELDS == columns._KEY_FIELDS
    assert set(native.INT_FIELDS) == {"ext_id", "ext_id_old", *columns._INT_ATTRS}
    assert set(native.RAW_FIELDS) | {"call_stack"} == {attr for attr, _col in columns._RAW_ATTRS}
    assert set(native.FLOAT_FIELDS) == {"ts", "dur", "flops"}


def test_tables_differing_only_in_the_order_of_their_categories_are_not_the_same():
    a = pd.DataFrame({"name": pd.Categorical(["x", "y"], categories=["x", "y"])})
    b = pd.DataFrame({"name": pd.Categorical(["x", "y"], categories=["y", "x"])})
    native.check_same_events(a, a.copy())
    with pytest.raises(AssertionError):
        native.check_same_events(a, b)
