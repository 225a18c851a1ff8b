"""The example zoo's tests: ``slow`` ones here run only with ``ADVISOR_RUN_SLOW=1`` (make test-all)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ADVISOR_RUN_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: set ADVISOR_RUN_SLOW=1 (make test-all)")
    for item in items:
        if item.get_closest_marker("slow") and HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
