"""--memory-budget on a GPU: CUDA's per-process memory fraction, and the host watchdog standing down."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from advisor.capture import cuda_budget
from advisor.capture.run import _wait

GIB = 2**30


def _fake_torch(cuda: str | None = "13.0", devices: int = 1, total: int = 140 * GIB):
    calls: dict[str, list] = {"lazy": [], "fraction": []}

    def lazy_call(fn):  # torch queues it until CUDA starts; the test starts it below
        calls["lazy"].append(fn)

    cuda_mod = SimpleNamespace(
        _lazy_call=lazy_call,
        device_count=lambda: devices,
        get_device_properties=lambda i: SimpleNamespace(total_memory=total),
        set_per_process_memory_fraction=lambda f, i: calls["fraction"].append((round(f, 6), i)),
    )
    return SimpleNamespace(version=SimpleNamespace(cuda=cuda, hip=None), cuda=cuda_mod), calls


def test_the_cap_waits_for_cuda_to_start_then_holds_every_device(tmp_path: Path):
    torch, calls = _fake_torch(devices=2)
    assert cuda_budget.install(14 * GIB, tmp_path, torch, visible=True)
    assert calls["fraction"] == [] and cuda_budget.devices_capped(tmp_path) is None  # nothing until CUDA starts
    assert "never started CUDA" in cuda_budget.note(tmp_path)
    assert cuda_budget.capped(tmp_path)  # but the host watchdog stands down from the start
    calls["lazy"][0]()
    assert calls["fraction"] == [(0.1, 0), (0.1, 1)]
    assert cuda_budget.note(tmp_path) == "the --memory-budget capped CUDA's allocator at 10.0% of device 0, 10.0% of device 1"
    marker = json.loads((tmp_path / cuda_budget.MARKER).read_text())
    assert marker["budget_bytes"] == 14 * GIB and [d["fraction"] for d in marker["devices"]] == [0.1, 0.1]


def test_a_budget_over_the_device_caps_at_all_of_it(tmp_path: Path):
    torch, calls = _fake_torch(total=8 * GIB)
    cuda_budget.install(20 * GIB, tmp_path, torch, visible=True)
    calls["lazy"][0]()
    assert calls["fraction"] == [(1.0, 0)]


@pytest.mark.parametrize(("cuda", "visible"), [(None, True), ("13.0", False), (None, None)])
def test_without_a_visible_gpu_the_budget_is_the_host_watchdogs(tmp_path: Path, cuda, visible):
    torch, calls = _fake_torch(cuda=cuda)
    assert not cuda_budget.install(1 * GIB, tmp_path, torch, visible=visible)
    assert calls["lazy"] == [] and not cuda_budget.capped(tmp_path) and cuda_budget.note(tmp_path) is None


@pytest.mark.e2e
@pytest.mark.parametrize("capped", [False, True])
def test_the_host_watchdog_stands_down_for_a_run_whose_cuda_memory_is_capped(tmp_path: Path, capped: bool):
    from advisor._proc import ProcessTree

    if capped:
        (tmp_path / cuda_budget.MARKER).write_text("{}")
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        # an interpreter holds more than 1 MiB of host memory: over a 1 MiB budget unless capped
        got = _wait(proc, 1.0, time.perf_counter(), ProcessTree(proc.pid), memory_budget=2**20, run_dir=tmp_path)
        assert got == ("timeout" if capped else "memory")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
