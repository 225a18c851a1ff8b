"""Timing a plain run's exit through the warm-start server (advisor.capture.end_probe).

The protocol's edges with a fake server (no process); the real server's answer, and a run forked
after it, in the e2e test.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from advisor.capture.end_probe import EndProbe
from advisor.capture.model import RunSpec, StartKind
from advisor.capture.run import capture
from advisor.capture.warm import WarmServer

REPO = Path(__file__).resolve().parents[2]


@dataclass
class _Server:
    """What EndProbe uses of a WarmServer: its socket, its readiness, its next message."""

    answer: dict[str, Any] | None
    alive: bool = True
    sock: Any = "the socket"
    waited_s: float = 0.0
    refused: str | None = None
    calls: list[str] = field(default_factory=list)

    def resume(self) -> None:
        self.calls.append("resume")

    def ready(self) -> bool:
        self.calls.append("ready")
        return True

    def receive(self, timeout: float | None) -> dict[str, Any] | None:
        self.calls.append("receive")
        return self.answer

    def close(self) -> None:
        self.calls.append("close")


def _asked(server: _Server, monkeypatch: pytest.MonkeyPatch) -> EndProbe:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr("advisor.capture.end_probe.send_message", lambda sock, msg: sent.append(msg))
    probe = EndProbe(server)
    probe.ask()
    probe.ask()  # once
    assert sent == [{"end": True}] and probe.asked
    return probe


def test_the_answer_is_the_exits_cpu_time_read_after_the_ready_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _Server({"end": {"wall_s": 1.4, "cpu_s": 0.93}})
    probe = _asked(server, monkeypatch)
    assert probe.collect() == 0.93
    assert server.calls == ["resume", "ready", "receive"]  # a server paused at the capture's first step goes on
    assert probe.collect() is None and server.calls == ["resume", "ready", "receive"]  # read once


def test_a_probe_never_asked_reads_nothing() -> None:
    server = _Server({"end": {"cpu_s": 1.0}}, alive=False)
    probe = EndProbe(server)
    probe.ask()  # a dead server is not asked
    assert not probe.asked and probe.collect() is None and server.calls == []


def test_no_answer_in_time_closes_the_server_whose_late_answer_would_be_misread(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _Server(None)
    probe = _asked(server, monkeypatch)
    assert probe.collect() is None
    assert server.calls[-1] == "close" and "did not time" in (server.refused or "")


@pytest.mark.parametrize("answer", [{"end": None}, {"lost": True}, {"end": {"cpu_s": -1.0}}, {"end": {"cpu_s": "x"}}])
def test_a_failed_or_odd_answer_is_no_end(answer: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _asked(_Server(answer), monkeypatch)
    assert probe.collect() is None


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux-only")
def test_the_server_times_an_exit_and_then_forks_runs_as_before(tmp_path: Path) -> None:
    spec = RunSpec(script=REPO / "tests" / "scripts" / "train_loop.py", out_dir=tmp_path / "run", seed=0, quiet=True,
                   cwd=tmp_path, warmup_steps=1, timed_steps=2, profiled_steps=0, cprofile_steps=0)
    with WarmServer(spec) as server:
        assert server.launch(), server.refused
        probe = EndProbe(server)
        probe.ask()  # while it imports: answered after them
        end = probe.collect()
        assert end is not None and 0.0 < end < 30.0  # torch's modules freed: a fraction of a second to seconds
        server.pause(busy=True)  # ready, yet stopped: a child timing an exit must not run beside measured steps
        assert server._stopped_at
        server.resume()
        run = capture(spec, warm=server)
    assert run.start == StartKind.WARM and run.ok, run.error
