"""Report-test fixtures: golden files (refreshed only with ``--update-goldens``) and Chromium."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--hide-scrollbars",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current renderers instead of comparing",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare text with tests/golden/<name>; rewrite it instead under --update-goldens."""
    update = bool(request.config.getoption("--update-goldens", default=False))

    def check(name: str, actual: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual, encoding="utf-8")
            return
        if not path.is_file():
            pytest.fail(f"golden file {path} is missing; create it with: pytest tests/report --update-goldens")
        expected = path.read_text(encoding="utf-8")
        assert actual == expected, (
            f"{name} differs from the golden file; if the change is intended, run "
            "pytest tests/report --update-goldens and review the diff"
        )

    return check


@pytest.fixture(scope="session")
def chromium() -> Callable[..., subprocess.CompletedProcess]:
    """Run headless Chromium with the offline-safe flags; skips when it is not installed."""
    exe = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if exe is None:
        pytest.skip("chromium is not installed (apt-get update && apt-get install -y chromium)")

    # NOTE: generous: a cold Chromium start on a loaded 2-core CI machine has taken tens of seconds.
    def run(*args: str, timeout: float = 150.0) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="advisor-chromium-") as profile:
            return subprocess.run(
                [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )

    return run
