"""The kernel's share of the training process's CPU time, and its page faults (advisor.metrics.kernel_use)."""

from __future__ import annotations

import pytest

from advisor.capture.kernel_use import AfterWork, KernelUse
from advisor.capture.model import RunCapture
from advisor.metrics.kernel_use import kernel_use_metrics

NAMES = ("kernel_cpu_frac", "kernel_time_frac", "page_faults_per_step_count", "page_faults_per_s",
         "page_faults_after_work_count", "page_faults_stopped_after_steps")


def test_a_churning_window() -> None:
    use = KernelUse(steps=20, wall_s=0.385, user_s=0.549, system_s=0.208, minor_faults=92318)
    got = kernel_use_metrics(RunCapture(kernel=use))
    assert got["kernel_cpu_frac"] == pytest.approx(0.208 / 0.757)
    assert got["kernel_time_frac"] == pytest.approx(0.208 / 0.385)
    assert got["page_faults_per_step_count"] == pytest.approx(4615.9)
    assert got["page_faults_per_s"] == pytest.approx(92318 / 0.385)


def test_the_kernel_time_share_is_at_most_the_wall_time() -> None:
    use = KernelUse(steps=2, wall_s=0.1, user_s=0.1, system_s=0.3, minor_faults=10)  # 4 threads in the kernel
    assert kernel_use_metrics(RunCapture(kernel=use))["kernel_time_frac"] == 1.0


@pytest.mark.parametrize("capture", [None, RunCapture(), RunCapture(kernel=KernelUse())])
def test_unknown_without_a_window(capture: RunCapture | None) -> None:
    assert kernel_use_metrics(capture) == dict.fromkeys(NAMES)


def test_a_capture_file_from_before_the_record_reads_as_unknown(tmp_path) -> None:
    (tmp_path / "capture.json").write_text('{"schema_version": 1, "script": "train.py"}')
    assert RunCapture.load(tmp_path).kernel is None


def test_faults_that_stop_after_the_work_between_steps_say_after_which_step() -> None:
    use = KernelUse(steps=20, wall_s=1.84, user_s=2.7, system_s=0.37, minor_faults=155345)  # 7,767 a step
    # after the test pass at step 50 (the run on, unprofiled), none; after one in the profiled window, many
    stopped = (AfterWork(25, 9000, profiled=True), AfterWork(50, 0))
    got = kernel_use_metrics(RunCapture(kernel=use, faults_after_work=stopped))
    assert (got["page_faults_after_work_count"], got["page_faults_stopped_after_steps"]) == (0.0, 50.0)
    # they went on (over a tenth of the window's), or the only work ran before the first step
    went_on = kernel_use_metrics(RunCapture(kernel=use, faults_after_work=(AfterWork(50, 900),)))
    assert (went_on["page_faults_after_work_count"], went_on["page_faults_stopped_after_steps"]) == (900.0, None)
    first = kernel_use_metrics(RunCapture(kernel=use, faults_after_work=(AfterWork(0, 0),)))
    assert first["page_faults_stopped_after_steps"] is None
    # only profiled steps after work: the latest of them
    profiled = kernel_use_metrics(RunCapture(kernel=use, faults_after_work=(AfterWork(25, 10, profiled=True),)))
    assert profiled["page_faults_stopped_after_steps"] == 25.0
