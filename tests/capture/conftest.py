"""Helpers for the capture tests: run a test script through capture() with small phases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.capture.model import ProgressEvent, RunCapture, RunSpec
from advisor.capture.run import capture

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

# NOTE: small phases keep each capture at about the cost of importing torch (2-3 s).
SMALL = {"warmup_steps": 1, "timed_steps": 3, "profiled_steps": 2}


@pytest.fixture
def run_script(tmp_path: Path) -> Callable[..., tuple[RunCapture, list[ProgressEvent]]]:
    """Capture tests/scripts/<name> with small phases; returns the capture and its events."""

    def run(
        name: str, *args: str, progress: Callable[[ProgressEvent], None] | None = None, **spec_kwargs: object
    ) -> tuple[RunCapture, list[ProgressEvent]]:
        events: list[ProgressEvent] = []
        options = {**SMALL, **spec_kwargs}
        spec = RunSpec(
            script=SCRIPTS / name,
            args=tuple(args),
            out_dir=tmp_path / "run",
            **options,  # type: ignore[arg-type]
        )

        def on_event(event: ProgressEvent) -> None:
            events.append(event)
            if progress is not None:
                progress(event)

        return capture(spec, progress=on_event), events

    return run
