"""Issue #20 item 3: the capture stores each trace once, gzip-compressed, and never loses one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.capture import profilers as child


def _trace(path: Path) -> bytes:
    data = json.dumps({"traceEvents": [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(2000)]})
    path.write_text(data)
    return data.encode()


def test_the_trace_is_kept_compressed_only(tmp_path: Path) -> None:
    plain = tmp_path / "host_1.123.pt.trace.json"
    raw = _trace(plain)
    notes: list[str] = []
    kept = child.gzip_trace(plain, notes)
    assert kept == tmp_path / "host_1.123.pt.trace.json.gz"
    assert gzip.decompress(kept.read_bytes()) == raw
    assert kept.stat().st_size * 5 < len(raw)
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name] and notes == []


def test_a_failed_compression_keeps_the_plain_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "host_1.123.pt.trace.json"
    raw = _trace(plain)

    def full_disk(*_a, **_k):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gzip, "open", full_disk)
    notes: list[str] = []
    assert child.gzip_trace(plain, notes) == plain
    assert plain.read_bytes() == raw
    assert [p.name for p in tmp_path.iterdir()] == [plain.name]
    assert notes == ["trace kept uncompressed (No space left on device)"]


def test_advisor_reads_both_the_compressed_and_an_old_plain_trace(tmp_path: Path) -> None:
    from advisor.trace.load import load_trace

    gpu = Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"
    plain = tmp_path / "old.pt.trace.json"
    plain.write_bytes(gzip.decompress(gpu.read_bytes()))
    a, b = load_trace(gpu), load_trace(plain)
    assert len(a.events) == len(b.events) > 0
