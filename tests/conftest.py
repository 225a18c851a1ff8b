"""Shared fixtures: where the real GPU traces live, and guards that keep tests independent."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_guard import ProcessGuard

RUN_SLOW = bool(os.environ.get("ADVISOR_RUN_SLOW"))

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("ADVISOR_SHARED_TRACES", REPO.parent / "shared" / "traces"))


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real GPU traces (../shared/traces); skips the test cleanly when absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real GPU traces not found at {SHARED_TRACES} (set ADVISOR_SHARED_TRACES)")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run only with ``ADVISOR_RUN_SLOW=1``."""
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow: set ADVISOR_RUN_SLOW=1 (make test-all)")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def process_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProcessGuard | None]:
    """Fail a test that starts a process but is not marked ``e2e``.

    ``make test-unit`` deselects ``e2e`` and must stay in-process and fast; a test that starts a
    capture child, ``advisor``, torchrun or TensorBoard declares it where it is defined
    (``@pytest.mark.e2e`` or a module's ``pytestmark``). Every way a process starts ends in one of
    the functions patched here: ``subprocess`` (and ``multiprocessing``'s spawn) in
    ``Popen._execute_child`` or ``_posixsubprocess.fork_exec``, a fork (the warm-start server,
    ``multiprocessing``'s fork) in ``os.fork``. The code under test may catch the error raised in
    its place, so the test also fails at teardown.
    """
    if request.node.get_closest_marker("e2e") is not None:
        yield None
        return
    guard = ProcessGuard()
    monkeypatch.setattr(subprocess.Popen, "_execute_child", guard.refuse("subprocess.Popen"))
    monkeypatch.setattr(_posixsubprocess, "fork_exec", guard.refuse("fork_exec"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, guard.refuse(f"os.{name}"))
    yield guard
    if guard.started:
        pytest.fail(
            "this test starts a process but is not marked e2e (add @pytest.mark.e2e, or "
            f"pytestmark = pytest.mark.e2e in its module): {guard.started}",
            pytrace=False,
        )
