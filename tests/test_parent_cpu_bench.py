"""benchmarks/parent_cpu.py: the parent's own CPU time, read from /proc without its children's."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "parent_cpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("parent_cpu", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["parent_cpu"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("parent_cpu", None)


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
