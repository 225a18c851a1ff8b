"""NVML samples the GPUs the script can see (CUDA_VISIBLE_DEVICES), not every GPU of the machine."""

from __future__ import annotations

import pytest

from advisor.capture.sampler import visible_handles


class FakeNvml:
    UUIDS = ("GPU-aaaa1111", "GPU-bbbb2222", "GPU-bbbc3333", "GPU-dddd4444")

    def nvmlDeviceGetCount(self):  # noqa: N802 - NVML's names
        return len(self.UUIDS)

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return f"h{i}"

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        return self.UUIDS[int(handle[1:])].encode()


@pytest.mark.parametrize(("visible", "handles"), [
    (None, ["h0", "h1", "h2", "h3"]),
    ("2", ["h2"]),
    ("3,1", ["h3", "h1"]),
    ("GPU-dddd", ["h3"]),
    ("GPU-aaaa1111,0", ["h0", "h0"]),
    ("1,7,2", ["h1"]),  # CUDA stops at the first entry that names no GPU
    ("GPU-bbb", []),  # ambiguous prefix: names no GPU
    ("", []),
    ("MIG-0a1b2c", ["h0", "h1", "h2", "h3"]),
])
def test_cuda_visible_devices_picks_the_sampled_gpus(visible, handles):
    assert visible_handles(FakeNvml(), visible) == handles
