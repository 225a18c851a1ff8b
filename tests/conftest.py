"""Shared fixtures: where the real GPU traces live, and guards that keep tests independent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e_tests import E2E

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


def _is_e2e(item: pytest.Item) -> bool:
    """Tell whether ``item`` is listed in ``tests/e2e_tests.py`` (by file, or by file and test name)."""
    rel = Path(str(item.path)).relative_to(REPO / "tests").as_posix()
    name = f"{rel}::{getattr(item, 'originalname', item.name)}"
    return rel in E2E or name in E2E


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the end-to-end tests ``e2e``; tests marked ``slow`` run only with ``ADVISOR_RUN_SLOW=1``."""
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow: set ADVISOR_RUN_SLOW=1 (make test-all)")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)
