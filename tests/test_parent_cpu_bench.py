"""benchmarks/parent_cpu.py: the parent's own CPU time, read from /proc without its children's."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from bench_helpers import benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("parent_cpu") as module:
        yield module


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/stat").exists(), reason="needs Linux /proc")
def test_own_cpu_is_this_process_alone_and_none_once_gone(bench) -> None:
    before = bench.own_cpu_s(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    after = bench.own_cpu_s(os.getpid())
    assert before is not None and after is not None and after >= before + 0.02
    assert after <= time.process_time() + 0.02  # no children counted: at most this process's own
    assert bench.own_cpu_s(2**22 + 12345) is None  # above pid_max's default: no such process
