"""The ``e2e`` marker is declared where a test is defined, and a test that starts a process
without it fails (tests/conftest.py's ``process_guard``), so ``make test-unit`` stays in-process."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest
from process_guard import ProcessGuard, ProcessStartedInUnitTest


def _exit_at_once() -> None:
    """A multiprocessing target that does nothing."""


@pytest.mark.parametrize(
    "start",
    [
        pytest.param(lambda: subprocess.run([sys.executable, "-c", "pass"], check=False), id="subprocess.run"),
        pytest.param(lambda: subprocess.Popen(["true"]), id="Popen"),
        pytest.param(lambda: os.system("true"), id="os.system"),
        pytest.param(lambda: os.fork(), id="os.fork"),
        pytest.param(lambda: multiprocessing.get_context("spawn").Process(target=_exit_at_once).start(), id="spawn"),
    ],
)
def test_an_unmarked_test_cannot_start_a_process(start, process_guard: ProcessGuard | None) -> None:
    assert process_guard is not None  # this test is not marked e2e
    with pytest.raises(ProcessStartedInUnitTest):
        start()
    assert process_guard.started, "the attempt was not recorded"
    # NOTE: cleared so that this test itself passes; any other test fails at teardown here.
    process_guard.started.clear()


def test_a_caught_attempt_still_fails_the_test(process_guard: ProcessGuard | None) -> None:
    assert process_guard is not None
    try:
        subprocess.run(["true"], check=False)
    except Exception:  # what code under test might do
        pass
    assert process_guard.started == ["subprocess.Popen(['true'])"]
    process_guard.started.clear()


@pytest.mark.e2e
def test_a_marked_test_may_start_a_process(process_guard: ProcessGuard | None) -> None:
    assert process_guard is None
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
