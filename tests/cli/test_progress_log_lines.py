"""Progress in a log (stderr not a terminal): one line per event, never cut at 80 columns."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.api import live_progress, sweep_progress


@dataclass
class _Event:
    text: str
    run: int = 2
    in_flight: str = ""
    started: bool = False

    def line(self) -> str:
        return self.text


LONG = "[run 2, 5 more in this stage (~5s)]  cpu_threads@1  1/3  running: starting, step 0/13"


def test_trial_lines_are_not_wrapped_in_a_log(capsys) -> None:
    _, on_trial, stop = live_progress("train.py")
    on_trial(_Event(LONG, in_flight="starting"))
    on_trial(_Event(LONG + " and a measured rate of 109074.8 samples/s, 1.02x so far"))
    stop()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    trial = [ln for ln in lines if "fix trial" in ln]
    assert len(trial) == 2, lines  # one per event: no continuation lines
    assert all(len(ln) > 80 for ln in trial) and trial[0].endswith("step 0/13")


def test_sweep_lines_are_not_wrapped_in_a_log(capsys) -> None:
    on_event, stop = sweep_progress()
    on_event(_Event("cell bf16 x batch 64: " + "x" * 100))
    stop()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].endswith("x" * 100), lines
