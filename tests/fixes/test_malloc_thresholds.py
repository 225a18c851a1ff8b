"""``malloc_thresholds``: glibc keeps freed memory (rule HB005), at run time and in the diff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advisor.capture.model import FixNote, NoteState
from advisor.fixes import catalog
from advisor.fixes.catalog import malloc_thresholds as mt
from advisor.fixes.diff import transform
from advisor.fixes.fix import FixContext
from advisor.fixes.model import Trial
from advisor.fixes.runtime_state import State

FIX = catalog.get("malloc_thresholds")
SCRIPT = """\
import torch
from torch import nn

model = nn.Linear(4, 1)
for _ in range(3):
    model(torch.randn(8, 4)).sum().backward()
"""


class FakeLibc:
    def __init__(self, accepts: int) -> None:
        self.accepts = accepts  # the largest mmap threshold this "glibc" takes
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return int(param != mt.M_MMAP_THRESHOLD or value <= self.accepts)


def _install(monkeypatch, libc: object) -> dict[str, FixNote]:
    monkeypatch.setattr(mt, "glibc", lambda: libc)
    notes: dict[str, FixNote] = {}
    FIX.install(State(notes), {})
    return notes


def test_install_sets_both_thresholds(monkeypatch) -> None:
    libc = FakeLibc(accepts=1 << 30)
    notes = _install(monkeypatch, libc)
    assert libc.calls == [(-1, 1 << 30), (-3, 1 << 30)]
    assert notes["malloc_thresholds"].state == NoteState.APPLIED and "mmap threshold 1024 MiB" in notes["malloc_thresholds"].detail


def test_an_older_glibc_gets_its_mmap_cap(monkeypatch) -> None:
    libc = FakeLibc(accepts=32 << 20)
    notes = _install(monkeypatch, libc)
    assert libc.calls[-1] == (-3, 32 << 20) and "mmap threshold 32 MiB" in notes["malloc_thresholds"].detail


def test_not_glibc_is_skipped_and_refused(monkeypatch) -> None:
    notes = _install(monkeypatch, None)
    assert not notes["malloc_thresholds"].state == NoteState.APPLIED and "not glibc" in notes["malloc_thresholds"].detail
    assert "not glibc" in (FIX.check(FixContext()) or "")


def test_a_cpu_memory_budget_is_refused_and_a_gpu_s_memory_is_not(monkeypatch) -> None:
    monkeypatch.setattr(mt, "glibc", lambda: FakeLibc(accepts=1 << 30))
    assert "--memory-budget" in (FIX.check(FixContext(cuda=False, memory_limit_bytes=1 << 30)) or "")
    assert FIX.check(FixContext(cuda=True, memory_limit_bytes=80 << 30)) is None
    assert FIX.check(FixContext(cuda=False)) is None


def test_the_diff_adds_the_calls_after_the_imports_and_runs(tmp_path: Path) -> None:
    new, manual = transform(SCRIPT, [Trial("malloc_thresholds", "safe")])
    assert new.index("from torch import nn") < new.index("_libc.mallopt(-1, 1073741824)") < new.index("model =")
    assert manual == []
    compile(new, "train.py", "exec")


@pytest.mark.e2e
def test_the_thresholds_end_the_page_faults_of_a_loop_that_frees_its_buffers(tmp_path: Path) -> None:
    # NOTE: a buffer above glibc's starting mmap threshold (128 KiB), freed and taken again: each
    # round is a fresh mmap, every page faulted in; with the thresholds it stays in the heap.
    probe = (
        "import ctypes, resource, sys\n"
        "from advisor.fixes.catalog import malloc_thresholds as mt\n"
        "from advisor.fixes.runtime_state import State\n"
        "if sys.argv[1] == 'fix': mt.FIX.install(State({}), {})\n"
        "libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p\n"
        "libc.malloc.argtypes = [ctypes.c_size_t]; libc.free.argtypes = [ctypes.c_void_p]\n"
        "libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]\n"
        "n = 48 << 20\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(10):\n"
        "    p = libc.malloc(n); libc.memset(p, 1, n); libc.free(p)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)\n"
    )
    if mt.glibc() is None:
        pytest.skip("not glibc")
    faults = {
        mode: int(subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True).stdout)
        for mode in ("plain", "fix")
    }
    assert faults["fix"] * 4 < faults["plain"], faults
