"""gzip traces inflate with ISA-L where it is installed, and with zlib otherwise: the same bytes, the same errors."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

import advisor.trace.read as read
from advisor.errors import TraceError

CPU_TRACE = Path(__file__).resolve().parents[1] / "data" / "cpu_small" / "worker0.pt.trace.json.gz"


@pytest.fixture(params=["installed", "zlib"])
def inflater(request, monkeypatch):
    if request.param == "zlib":
        monkeypatch.setattr(read, "_inflate_module", lambda: (zlib, (zlib.error,)))
    return request.param


def test_the_bytes_are_gzips_own(inflater, tmp_path):
    two = tmp_path / "two.json.gz"  # two members and trailing padding, as gzip tolerates
    text = CPU_TRACE.read_bytes()
    two.write_bytes(text + gzip.compress(b"\n") + b"\x00" * 16)
    assert read._read_bytes(CPU_TRACE) == gzip.decompress(text)
    assert read._read_bytes(two) == gzip.decompress(text) + b"\n"


@pytest.mark.parametrize("cut", [10, 2000])
def test_a_truncated_file_says_so(inflater, tmp_path, cut):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(CPU_TRACE.read_bytes()[:-cut])
    with pytest.raises(TraceError, match=r"cut\.json\.gz is a truncated or corrupt gzip file"):
        read._read_bytes(path)


def test_isal_is_used_where_installed():
    isal = pytest.importorskip("isal.isal_zlib", reason="isal has no wheel for this platform")
    assert read._inflate_module()[0] is isal


def test_a_bound_on_each_piece_of_output_loses_nothing(inflater, monkeypatch, tmp_path):
    # output bounds far smaller than the input slices, and slices that end inside a long match
    monkeypatch.setattr(read, "_GUNZIP_CHUNK", 1000)
    monkeypatch.setattr(read, "_GUNZIP_INPUT", 7)
    text = b'{"traceEvents": [' + b'{"ph": "X"}, ' * 5000 + b"{}]}"
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text, compresslevel=9))
    assert read._read_bytes(path) == text
