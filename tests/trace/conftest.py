"""Fixtures of the trace tests."""

from __future__ import annotations

import os

import pytest

import advisor.trace.decode as decode
import advisor.trace.fanout as fanout


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Small thresholds (a few MB in many tasks over three workers); the pids of the workers forked."""
    monkeypatch.setattr(decode, "BATCH_BYTES", 32 << 10)
    monkeypatch.setattr(fanout, "TASK_BYTES", 128 << 10)
    monkeypatch.setattr(fanout, "PARALLEL_BYTES", 1 << 20)
    monkeypatch.setattr(fanout, "WORKER_BYTES", 1 << 18)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    pids: list[int] = []
    fork = os.fork

    def recorded() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded)
    return pids
