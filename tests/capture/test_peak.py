"""The machine's matmul peak: measured for real once, then cached by CPU, torch, dtype and threads."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from advisor.capture import peak
from advisor.capture.environment import environment


def test_measure_gives_a_plausible_rate_and_restores_threads() -> None:
    before = torch.get_num_threads()
    rate = peak.measure("fp32", 1, sizes=(128,), budget_s=0.02)
    assert rate is not None and 1e-4 < rate < 100.0  # TFLOP/s: a CPU core does 0.1-100 GFLOP/s and more
    assert torch.get_num_threads() == before


def test_unknown_dtype_is_not_measured() -> None:
    assert peak.measure("fp4", 1) is None


def _fake_measure(calls: list[tuple[str, int]], rate: float):
    def fake(dtype: str, threads: int, *_a, **_k) -> float:
        calls.append((dtype, threads))
        return rate

    return fake


def test_cached_once_per_dtype_and_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(peak, "measure", _fake_measure(calls, 0.1))
    monkeypatch.setattr(peak, "_load_avg", lambda: 0.5)
    first = peak.cpu_peaks(2, ("fp32",), folder=tmp_path)
    again = peak.cpu_peaks(2, ("fp32",), folder=tmp_path)
    other = peak.cpu_peaks(1, ("fp32",), folder=tmp_path)
    assert calls == [("fp32", 2), ("fp32", 1)]
    assert first[0].tflops == again[0].tflops == 0.1 and not first[0].cached and again[0].cached
    assert other[0].threads == 1
    data = json.loads((tmp_path / peak.CACHE_FILE).read_text())
    assert any(key.endswith("|fp32|2 threads") and f"torch {torch.__version__}" in key for key in data)


def test_a_contended_entry_is_measured_again_and_the_higher_rate_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(peak.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(peak, "_load_avg", lambda: 9.0)  # other work holds the cores
    monkeypatch.setattr(peak, "measure", _fake_measure(calls, 0.05))
    peak.cpu_peaks(2, ("fp32",), folder=tmp_path)
    # within the hour: not measured again even though contended
    peak.cpu_peaks(2, ("fp32",), folder=tmp_path)
    assert len(calls) == 1
    path = tmp_path / peak.CACHE_FILE
    data = json.loads(path.read_text())
    for entry in data.values():
        entry["measured_s"] = time.time() - 2 * peak.REMEASURE_S
    path.write_text(json.dumps(data))
    monkeypatch.setattr(peak, "_load_avg", lambda: 0.3)
    monkeypatch.setattr(peak, "measure", _fake_measure(calls, 0.12))
    quiet = peak.cpu_peaks(2, ("fp32",), folder=tmp_path)
    assert len(calls) == 2 and quiet[0].tflops == 0.12 and quiet[0].load_avg == 0.3
    # quiet now: the cache answers from here on
    assert peak.cpu_peaks(2, ("fp32",), folder=tmp_path)[0].cached


def test_a_lower_remeasure_keeps_the_earlier_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(peak, "_load_avg", lambda: 9.0)
    monkeypatch.setattr(peak, "measure", _fake_measure([], 0.2))
    peak.cpu_peaks(1, ("fp32",), folder=tmp_path)
    path = tmp_path / peak.CACHE_FILE
    data = json.loads(path.read_text())
    for entry in data.values():
        entry["measured_s"] = 0
    path.write_text(json.dumps(data))
    monkeypatch.setattr(peak, "measure", _fake_measure([], 0.1))
    assert peak.cpu_peaks(1, ("fp32",), folder=tmp_path)[0].tflops == 0.2


def test_a_corrupt_or_unwritable_cache_is_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / peak.CACHE_FILE).write_text("{not json")
    monkeypatch.setattr(peak, "measure", _fake_measure([], 0.1))
    assert peak.cpu_peaks(1, ("fp32",), folder=tmp_path)[0].tflops == 0.1
    blocked = tmp_path / "file"
    blocked.write_text("x")
    assert peak.cpu_peaks(1, ("fp32",), folder=blocked / "sub")[0].tflops == 0.1  # nothing raised


@pytest.mark.e2e
def test_environment_records_threads_cpu_model_and_peaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peak, "measure", _fake_measure([], 0.1))
    env = environment()
    assert env.intra_op_threads == torch.get_num_threads()
    assert env.cpu_model
    assert {p.dtype for p in env.matmul_peaks} == set(peak.DTYPES)
    assert (tmp_path / "advisor" / peak.CACHE_FILE).is_file()


@pytest.mark.e2e
@pytest.mark.parametrize(("started", "device"), [(False, "cpu"), (True, "cuda")])
def test_a_run_is_a_cuda_run_only_when_its_script_started_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: bool, device: str,
) -> None:
    # a GPU machine (is_available), and a script that did or did not use the GPU
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peak, "measure", _fake_measure([], 0.1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    env = environment()
    assert env.device == device and env.gpu_count == 1
    assert (env.device_name == "NVIDIA H200") is started
