"""The achievable matrix-multiply rate of this machine's CPU, measured once and cached.

"Compute-bound" means the step spends its time in arithmetic that runs *fast*. A datasheet
gives that speed for a GPU; for a CPU nothing does (cores, vector units, clocks and the BLAS
library all matter), so advisor measures it: square ``torch.mm`` products at a few sizes, the best
rate of each size over a short time budget, the best size's rate kept. The result is cached in the
user cache folder (``$XDG_CACHE_HOME/advisor`` or ``~/.cache/advisor``), keyed by CPU model,
torch version, dtype and intra-op thread count, so it is paid once per machine and setting.

A machine busy with other work measures low. Each cached entry keeps the load average it was
measured at; an entry measured while other work held the cores (load above the core count) is
measured again (at most once an hour, so fix trials on a busy machine do not each pay for it)
and the higher rate kept, so the cache converges to the quiet peak.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_FILE = "matmul_peak.json"
SIZES = (256, 512)
"""Square sizes tried. 256 and 512 already reach the BLAS peak for float32 on the CPUs measured
here (87-90 GFLOP/s single-threaded, 1024 no faster), and they keep a slow dtype (bf16 without
native support ran at 1.4 GFLOP/s) inside the budget."""
BUDGET_S = 0.15
"""Time spent per size: enough for dozens of float32 repeats, a few for slow dtypes."""
REMEASURE_S = 3600.0
"""Least time between two measurements of an entry that was measured under contention."""
DTYPES = ("fp32", "bf16")
"""Dtypes measured for a CPU capture: float32, and bfloat16 (what the precision fixes use)."""

_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


@dataclass(frozen=True)
class MatmulPeak:
    """One measured matmul rate.

    Attributes:
        dtype: Short dtype (``fp32``, ``bf16``, ...).
        threads: Intra-op threads it was measured with.
        tflops: Best achieved TFLOP/s.
        device: What was measured (``cpu``).
        cpu_model: The CPU's model name.
        load_avg: The 1-minute load average when it was measured.
        cached: True when read from the cache rather than measured in this run.
    """

    dtype: str
    threads: int
    tflops: float
    device: str = "cpu"
    cpu_model: str = ""
    load_avg: float | None = None
    cached: bool = False


def peak_for(peaks: Sequence[MatmulPeak], dtype: str) -> tuple[float | None, str]:
    """Return the measured peak a ``dtype`` run is compared with, and the dtype it was measured in.

    fp32's rate where ``dtype`` was not measured or measured slower: a CPU without native bf16
    runs torch.mm in bf16 a hundred times slower than in fp32 (0.001 against 0.115 TFLOP/s on
    this project's machine) while a model's bf16 convolutions outrun that; the device still does
    at least its fp32 rate. (None, dtype) when neither was measured.
    """
    rates = {p.dtype: p.tflops for p in peaks if p.tflops and p.tflops > 0}
    own, fp32 = rates.get(dtype), rates.get("fp32")
    if fp32 and (not own or own < fp32):
        return fp32, "fp32"
    return own, dtype


def cpu_model() -> str:
    """Return the CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_dir() -> Path:
    """Return advisor's user cache folder (XDG: ``$XDG_CACHE_HOME/advisor``, else ``~/.cache/advisor``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "advisor"


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # pragma: no cover - not on Linux/macOS
        return None


def measure(dtype: str, threads: int, sizes: tuple[int, ...] = SIZES, budget_s: float = BUDGET_S) -> float | None:
    """Measure the best ``torch.mm`` rate in TFLOP/s for ``dtype`` with ``threads`` intra-op threads.

    The caller's thread setting is restored. None when torch or the dtype is unavailable.
    """
    try:
        import torch
    except ImportError:
        return None
    tdtype = getattr(torch, _TORCH_DTYPES.get(dtype, ""), None)
    if tdtype is None:
        return None
    before = torch.get_num_threads()
    best = 0.0
    try:
        torch.set_num_threads(max(1, threads))
        gen = torch.Generator().manual_seed(0)
        for n in sizes:
            a = torch.randn(n, n, generator=gen).to(tdtype)
            b = torch.randn(n, n, generator=gen).to(tdtype)
            torch.mm(a, b)  # first call: allocation and kernel selection
            fastest = float("inf")
            end = time.perf_counter() + budget_s
            reps = 0
            while reps < 2 or time.perf_counter() < end:
                t = time.perf_counter()
                torch.mm(a, b)
                fastest = min(fastest, time.perf_counter() - t)
                reps += 1
                if reps >= 2 and fastest > budget_s:
                    break  # a very slow dtype: two repeats are all the budget allows
            if fastest > 0:
                best = max(best, 2.0 * n**3 / fastest / 1e12)
    except (RuntimeError, TypeError):  # a dtype without a CPU matmul kernel
        return None
    finally:
        torch.set_num_threads(before)
    return best or None


def _key(model: str, torch_version: str, dtype: str, threads: int) -> str:
    return f"{model}|torch {torch_version}|{dtype}|{threads} threads"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: measured again next time, nothing lost


def cpu_peaks(
    threads: int | None = None, dtypes: tuple[str, ...] = DTYPES, folder: Path | None = None
) -> tuple[MatmulPeak, ...]:
    """Return the machine's matmul peak per dtype at ``threads`` threads, from the cache or measured now.

    Args:
        threads: Intra-op threads (default: torch's current setting).
        dtypes: Short dtypes to report.
        folder: Cache folder (default :func:`cache_dir`).

    Returns:
        One :class:`MatmulPeak` per dtype that could be measured; empty without torch.
    """
    try:
        import torch
    except ImportError:
        return ()
    threads = int(threads or torch.get_num_threads())
    model = cpu_model()
    cores = os.cpu_count() or 1
    path = (folder or cache_dir()) / CACHE_FILE
    cache = _read_cache(path)
    out: list[MatmulPeak] = []
    changed = False
    for dtype in dtypes:
        key = _key(model, torch.__version__, dtype, threads)
        entry = cache.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("tflops"), (int, float)):
            old_load = entry.get("load_avg")
            contended = isinstance(old_load, (int, float)) and old_load > cores
            when = entry.get("measured_s")
            recent = isinstance(when, (int, float)) and time.time() - when < REMEASURE_S
            if not contended or recent:
                out.append(MatmulPeak(dtype, threads, float(entry["tflops"]), "cpu", model, old_load, True))
                continue
        load = _load_avg()
        rate = measure(dtype, threads)
        if rate is None:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("tflops"), (int, float)) and entry["tflops"] > rate:
            # NOTE: the earlier, higher rate stands; only the load it was seen at is refreshed
            # when this one was quieter, so a quiet re-measure ends the re-measuring.
            rate, load = float(entry["tflops"]), min(load or 0.0, entry.get("load_avg") or 0.0)
        cache[key] = {"tflops": rate, "load_avg": load, "measured_s": time.time()}
        changed = True
        out.append(MatmulPeak(dtype, threads, rate, "cpu", model, load, False))
    if changed:
        _write_cache(path, cache)
    return tuple(out)
