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


def test_progress_shows_a_hostile_script_name_never_obeys_it(capsys) -> None:
    """The diagnose progress line printed the script's name raw: ESC/BEL set the terminal's title (issue #30)."""
    import re

    from advisor.capture.model import Phase, ProgressEvent

    on_capture, on_trial, stop = live_progress("esc\x1b]0;PWNED\x07[bold].py")
    on_capture(ProgressEvent(phase=Phase.TIMED, step=3, steps_total=10, phase_step=2, phase_steps=5))
    on_trial(_Event("pin_memory\x1b[2J 1/3"))
    stop()
    err = capsys.readouterr().err
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", err), repr(err)
    assert "\\x1b]0;PWNED\\x07" in err and "\\x1b[2J" in err
