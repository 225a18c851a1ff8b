"""The sampler sees short-lived children: DataLoader workers of a quick run live less than one CPU interval."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from advisor.capture.sampler import UtilSampler

# A parent that starts one child living ~0.6 s, then waits for it and lingers.
_PARENT = (
    "import subprocess, sys, time; time.sleep(0.2); "
    "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.6)']); time.sleep(0.2)"
)


@pytest.mark.e2e
def test_a_child_shorter_than_the_cpu_interval_is_counted() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _PARENT])
    sampler = UtilSampler(proc.pid, interval_s=30.0)  # one CPU sample only: the tree poll must see the child
    sampler.start()
    try:
        proc.wait(timeout=60)
    finally:
        time.sleep(0.05)
        cpu, _ = sampler.stop()
    assert cpu.max_processes == 2
    assert cpu.max_threads is not None and cpu.max_threads >= 2
