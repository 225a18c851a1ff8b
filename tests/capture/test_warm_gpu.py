"""The experimental warm start beside a visible GPU (ADVISOR_WARM_GPU=1): served only while the
server never loaded the CUDA driver."""

from __future__ import annotations

import os

import pytest
import torch

from advisor.capture import warm_preload


def test_a_server_that_loaded_the_cuda_driver_or_started_cuda_refuses(monkeypatch):
    assert warm_preload.cuda_started("7f00-7f01 r-xp 0 0:0 0 /usr/lib/libtorch_cuda.so\n") is None
    assert "driver was loaded" in warm_preload.cuda_started("7f00-7f01 r-xp 0 0:0 0 /usr/lib/x86_64/libcuda.so.1\n")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "started CUDA" in warm_preload.cuda_started("")


@pytest.mark.parametrize("asked", [False, True])
def test_a_visible_gpu_refuses_the_warm_start_unless_it_was_asked_for(monkeypatch, tmp_path, asked):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(warm_preload, "gpu_visible", lambda: "a GPU is visible to this CUDA/ROCm build of torch")
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    if asked:
        monkeypatch.setenv(warm_preload.WARM_GPU_ENV, "1")
    else:
        monkeypatch.delenv(warm_preload.WARM_GPU_ENV, raising=False)
    try:
        ready = warm_preload.preload([], None, None)
        nvml_check = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    finally:
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    if asked:
        # this CPU process never mapped libcuda: served, with torch's fork-safe availability check
        assert ready["ready"] and ready["refusal"] is None and nvml_check == "1"
    else:
        assert not ready["ready"] and "GPU is visible" in ready["refusal"] and nvml_check is None


def test_asked_for_the_server_still_refuses_once_the_driver_is_loaded(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(warm_preload, "gpu_visible", lambda: "a GPU is visible")
    monkeypatch.setattr(warm_preload, "cuda_started", lambda maps=None: "the CUDA driver was loaded in the warm-start server")
    monkeypatch.setenv(warm_preload.WARM_GPU_ENV, "1")
    try:
        ready = warm_preload.preload([], None, None)
    finally:
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    assert not ready["ready"] and "driver was loaded" in ready["refusal"]
