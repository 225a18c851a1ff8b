"""Diagnoses of the real NVIDIA GPU traces in ../shared/traces (see its README for the figures)."""

from __future__ import annotations

import pytest

from advisor.engine.evaluate import diagnose

compute = pytest.importorskip("advisor.metrics.compute", reason="metrics stage not available")


@pytest.fixture(scope="module")
def diagnosed(shared_traces):
    cache: dict[str, tuple] = {}

    def get(rel: str):
        if rel not in cache:
            metrics = compute.analyze_path(shared_traces / rel)
            cache[rel] = (metrics, diagnose(metrics))
        return cache[rel]

    return get


def codes(diagnosis) -> set[str]:
    return {f.code for f in diagnosis.findings}


def finding(diagnosis, code):
    return next(f for f in diagnosis.findings if f.code == code)


def test_resnet50_trains_it_is_not_called_inference(diagnosed):
    # Its profiler (2021) names backward functions by their autograd node (318 CudnnConvolutionBackward).
    metrics, d = diagnosed("kineto/resnet50_num_workers_0")
    assert metrics.summary["backward_op_count"] >= 50
    assert "CO004" not in codes(d)


def test_bert_inference_runs_no_backward(diagnosed):
    metrics, _ = diagnosed("tracelens/h100")
    assert metrics.summary["backward_op_count"] == 0


def test_resnet50_num_workers_0_is_data_loading_bound(diagnosed):
    metrics, d = diagnosed("kineto/resnet50_num_workers_0")
    assert d.primary is not None and d.primary.category == "data_loading"
    # README: DataLoader about 40% of each step, kernels cover 50-59%; the data-loading share
    # the GPU actually waits for is a little less than the full __next__ time.
    assert 0.25 < d.primary.share < 0.45
    assert d.primary.estimated_speedup == pytest.approx(1 / (1 - d.primary.share), rel=1e-3)
    # Pageable copies are reported, with the 19.3 MB batch and the line that copies it.
    assert {"DL001", "HD001"} <= codes(d)
    pageable = finding(d, "HD001")
    assert "18.4 MiB per step" in pageable.message
    assert pageable.locations and pageable.locations[0].file.endswith(".py")
    assert finding(d, "DL001").locations, "the DataLoader's file:line is named"
    # Not a launch-bound run: kernels cover more than half the step.
    assert "SK001" not in codes(d)
    assert d.breakdown["data_loading"] == pytest.approx(metrics.summary["data_loading_frac"], abs=1e-5)
    assert sum(d.breakdown.values()) == pytest.approx(1.0, abs=1e-3)


def test_bert_small_inference_is_small_kernels(diagnosed):
    _, d = diagnosed("tracelens/h100")
    assert d.primary is not None and d.primary.category == "small_kernels"
    sk = finding(d, "SK001")
    assert "60 GPU kernels" in sk.message
    assert "DL001" not in codes(d) and "SY001" not in codes(d)
    assert "CO001" not in codes(d), "an idle GPU is not compute-bound"


def test_dlrm_names_slowest_and_fastest_rank(diagnosed):
    _, d = diagnosed("param/dlrm_kineto")
    assert {"CM002", "CM003"} <= codes(d)
    # README: rank 1 has the longest step (19.9 ms) and the most NCCL time (11.3 ms); rank 7 the
    # shortest step (12.5 ms) and the least NCCL time (1.7 ms).
    # The straggler is judged by busy time (rank 1's long step is mostly NCCL waiting).
    straggler = finding(d, "CM002")
    slow, fast = straggler.evidence["straggler_rank"], straggler.evidence["fastest_rank"]
    assert f"Rank {int(slow)} is the straggler" in straggler.message and f"as rank {int(fast)}" in straggler.message
    assert slow != 1
    imbalance = finding(d, "CM003")
    assert "rank 1 spends" in imbalance.message and "as rank 7" in imbalance.message
    assert imbalance.evidence["comm_max_rank"] == 1 and imbalance.evidence["comm_min_rank"] == 7
    assert "CM001" in codes(d), "communication is far above 10% of the step"


def test_event_sync_finds_the_sync_calls(diagnosed):
    _, d = diagnosed("hta/cuda_event_sync")
    sync = [f for f in d.findings if f.category == "sync"]
    assert sync, "the sync calls are found"
    assert "3 sync calls" in sync[0].message
