"""Fakes shared by the unit tests."""

from __future__ import annotations


class Clock:
    """A fake clock (``time.perf_counter``'s shape): a test moves ``now`` by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
