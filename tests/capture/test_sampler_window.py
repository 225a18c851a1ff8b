"""The GPU's NVML utilisation is the timed steps', not the whole run's (start-up idles the device)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from advisor.capture.model import Phase
from advisor.capture.run import EventRelay
from advisor.capture.sampler import UtilSampler


class FakeNvml:
    """Hands out the next utilisation percentage on each read."""

    def __init__(self, utils: list[int]) -> None:
        self.utils = iter(utils)

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> SimpleNamespace:  # noqa: N802 - NVML's name
        return SimpleNamespace(gpu=next(self.utils))

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> SimpleNamespace:  # noqa: N802 - NVML's name
        return SimpleNamespace(used=1 << 30)


def sampler(utils: list[int]) -> UtilSampler:
    s = UtilSampler(pid=0)
    s._nvml, s._handles, s._gpu_total = FakeNvml(utils), [object()], 80 << 30
    return s


def test_the_mean_is_the_timed_steps_when_a_sample_fell_in_them() -> None:
    # The H200's chargpt: 10 s of imports and set-up at 0%, then steps with kernels 27% busy.
    s = sampler([0] * 20 + [30, 26] + [0])
    for _ in range(20):
        s._sample_gpu()
    s.timing(True)
    s._sample_gpu()
    s._sample_gpu()
    s.timing(False)
    s._sample_gpu()
    gpu = s._gpu_summary()
    assert gpu.mean_util_frac == pytest.approx(0.28)
    assert gpu.max_util_frac == pytest.approx(0.30) and gpu.samples == 2
    assert gpu.note is None


def test_a_window_without_samples_keeps_the_whole_run_and_says_so() -> None:
    s = sampler([0, 40])
    s._sample_gpu()
    s._sample_gpu()
    gpu = s._gpu_summary()
    assert gpu.mean_util_frac == pytest.approx(0.2) and gpu.samples == 2
    assert "whole run" in (gpu.note or "")


def test_the_relay_tells_each_events_phase_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    events = tmp_path / "events.jsonl"
    rows = [{"phase": p, "step": i, "steps_total": 4, "phase_step": 0, "phase_steps": 1, "elapsed_s": 0.1 * i}
            for i, p in enumerate(("warmup", "timed", "timed", "profiled", "done"))]
    events.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    seen: list[Phase] = []
    relay = EventRelay(events, progress=None)
    relay.on_phase = seen.append
    relay._read()
    assert seen == [Phase.WARMUP, Phase.TIMED, Phase.TIMED, Phase.PROFILED]
