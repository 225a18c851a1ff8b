"""Reading a trace file's bytes: finding the files, memory-mapping plain ones, gunzipping with a cap.

Plain files are memory-mapped copy-on-write (no private copy of the file); gzip files are
decompressed in chunks up to a cap on the expanded size, so a "zip bomb" cannot exhaust memory.
"""

from __future__ import annotations

import gc
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from advisor.errors import TraceError


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for a block (restores its previous state)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_TRACE_SUFFIXES = (".json", ".json.gz")


def _is_trace_name(path: Path) -> bool:
    return path.name.endswith(_TRACE_SUFFIXES)


def find_trace_files(path: Path) -> list[Path]:
    """Find the trace files under ``path``: the file itself, or ``*.json[.gz]`` found recursively.

    In a folder, files named like torch.profiler's ``*.pt.trace.json[.gz]`` win when there are
    any; otherwise every ``*.json``/``*.json.gz`` file is taken as a trace.

    Raises:
        TraceError: The path does not exist, or a directory holds no trace file.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace path {path} does not exist; pass a .json/.json.gz trace or a folder of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace_name(p))
    # NOTE: torch.profiler names its files *.pt.trace.json[.gz]; when a folder has any, other
    # JSON files next to them (capture.json, reports, goldens) are not traces.
    named = [p for p in files if ".pt.trace.json" in p.name]
    files = named or [p for p in files if p.name != "capture.json"]
    if not files:
        raise TraceError(f"no *.json or *.json.gz trace files found under {path}; point at a torch.profiler trace or its folder")
    return files


GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of a gzip file."""


def _read_bytes(path: Path) -> Any:
    """Read the file's (decompressed) bytes; TraceError for empty or truncated files.

    Plain files are memory-mapped copy-on-write: the decoder reads the page cache directly
    instead of a private copy of the whole file, and the batches are framed in place by
    overwriting two separator bytes each (only those pages get copied; the file is never
    written). Gzip files are decompressed into memory.
    """
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic != GZIP_MAGIC:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                # NOTE: no MAP_POPULATE here: on a private writable mapping it would copy
                # every page up front; read faults map the cached pages without copying.
                data: Any
                try:
                    data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                except (OSError, ValueError):  # a file system that cannot map files
                    data = fh.read()
                if data[: min(size, 4096)].isspace() and data[:].isspace():
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                return data
            fh.seek(0)
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    raw = _gunzip(path, raw)
    if not raw or raw.isspace():
        raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
    return raw


MAX_GZIP_RATIO = 100
"""A gzip trace may expand to at most this many times its size (JSON traces compress 5-20x)."""
MIN_GZIP_CAP = 256 << 20
"""...but always to this many bytes, so small compressed files of repetitive JSON still load."""
_GUNZIP_INPUT = 1 << 20
"""Compressed bytes handed to the inflater at a time."""
_GUNZIP_CHUNK = 16 << 20
"""Most bytes it may return at a time (the cap is checked between two)."""


def _inflate_module() -> tuple[Any, tuple[type[Exception], ...]]:
    """Return the inflater and its errors: ISA-L's (``isal``, 2.6-2.8x zlib's speed here) where installed, else zlib."""
    # NOTE: imported here: only gzip inputs pay for either
    import zlib  # noqa: PLC0415

    try:
        from isal import isal_zlib  # noqa: PLC0415
    except ImportError:  # no wheel for this platform: the standard library's, same results
        return zlib, (zlib.error,)
    return isal_zlib, (isal_zlib.error, zlib.error)


def _gunzip(path: Path, data: bytes) -> bytearray:
    """Decompress a gzip file's bytes in chunks, stopping at a cap on the expanded size.

    A few MB of gzip can expand to many GB (a "zip bomb", or a file that is not a trace):
    decompressing it whole would exhaust memory before anything could be said. The cap is
    :data:`MAX_GZIP_RATIO` times the compressed size (at least :data:`MIN_GZIP_CAP`); a real trace
    larger than that can still be loaded after ``gunzip`` (plain files are memory-mapped).

    Raises:
        TraceError: Corrupt or truncated gzip data, or the cap was passed (says what to do).
    """
    inflate, errors = _inflate_module()
    cap = max(MIN_GZIP_CAP, MAX_GZIP_RATIO * len(data))
    out = bytearray()
    view = memoryview(data)
    pos = 0
    try:
        while pos < len(data):
            inflater = inflate.decompressobj(16 + inflate.MAX_WBITS)
            while not inflater.eof:
                if pos >= len(data):
                    raise EOFError("compressed data ended before the end-of-stream marker")
                # NOTE: fed in slices of the input, each inflated in bounded pieces: a bound on the
                # whole input left the rest of it to be copied again on every call (a fifth of the time)
                piece: Any = view[pos : pos + _GUNZIP_INPUT]
                pos += len(piece)
                while not inflater.eof:
                    chunk = inflater.decompress(piece, min(_GUNZIP_CHUNK, cap + 1 - len(out)))
                    out += chunk
                    if len(out) > cap:
                        raise TraceError(
                            f"trace {path} expands to more than {cap >> 20} MiB ({MAX_GZIP_RATIO}x its compressed size); "
                            f"if it is a real trace, decompress it first (gunzip -k {path.name}) and pass the .json"
                        )
                    piece = inflater.unconsumed_tail
                    if not piece and not chunk:
                        break  # this slice is used up (output held back by the bound came out above)
            pos -= len(inflater.unused_data)  # the next member's first bytes were in the last slice
            if data.count(b"\x00", pos) == len(data) - pos:
                break  # trailing padding after the last member, as gzip tolerates
    except (EOFError, *errors) as exc:
        raise TraceError(f"trace {path} is a truncated or corrupt gzip file ({exc}); re-copy or re-record it") from exc
    return out
