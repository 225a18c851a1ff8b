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
    assert len(trial) == 1, lines  # one per finished run: no continuation lines, no in-flight line
    assert len(trial[0]) > 80 and trial[0].endswith("1.02x so far")


def test_a_log_gets_one_line_per_run_not_one_per_phase(capsys) -> None:
    # issue #32: six phase lines per trial run (starting, warmup, timed, profiled, cProfile, finishing)
    _, on_trial, stop = live_progress("train.py")
    for run in (2, 3):
        for phase in ("starting", "warmup", "timed", "finishing"):
            on_trial(_Event(f"[run {run}]  pin_memory  1/3  running: {phase}", run=run, in_flight=phase))
        on_trial(_Event(f"[run {run}]  pin_memory  1/3  120.0 samples/s", run=run))
    stop()
    trial = [ln for ln in capsys.readouterr().err.splitlines() if "fix trial" in ln]
    assert len(trial) == 2 and all("running" not in ln for ln in trial), trial


def test_the_line_gives_the_whole_loop_s_remaining_time() -> None:
    from advisor.api.progress import total_left
    from advisor.fixes.loop.progress import TrialProgress

    event = TrialProgress("pin_memory", 1, 3, run=4, runs_left=5, eta_s=50.0, stage="trials")
    # 5 runs left in the stage at 10 s each, then the combination: 2 runs per round x 3 rounds
    assert total_left(event) == "  (~1m50s in all, counting a combined run)"
    last = TrialProgress("combined", 1, 3, run=9, runs_left=2, eta_s=20.0, stage="combined")
    assert total_left(last) == ""  # the last stage's own estimate is the total
    assert total_left(TrialProgress("x", 1, 3)) == ""  # nothing known yet


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
