"""What tests/conftest.py's ``process_guard`` fixture records: the processes a unit test tried to start."""

from __future__ import annotations

from typing import Any


class ProcessStartedInUnitTest(RuntimeError):
    """Raised where a test without the ``e2e`` marker starts a process."""


class ProcessGuard:
    """Records the processes a unit test tried to start (see :func:`process_guard`)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def refuse(self, how: str) -> Any:
        """Return a stand-in for ``how`` that records the attempt and raises instead of starting."""

        def refused(*args: Any, **kwargs: Any) -> Any:
            shown = args[1] if how == "subprocess.Popen" and len(args) > 1 else args[:1]
            self.started.append(f"{how}({shown!r})"[:300])
            raise ProcessStartedInUnitTest(f"{how}: a test that starts a process must be marked e2e")

        return refused
