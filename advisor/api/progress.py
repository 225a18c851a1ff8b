"""Live progress on stderr for the commands that run scripts (``diagnose``, ``sweep``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advisor._terminal import printable_line


def live_progress(title: str) -> tuple[Callable[[Any], None], Callable[[str], None], Callable[[], None]]:
    """Progress on stderr: a rich bar for the capture, then one line per fix-trial run.

    Returns:
        ``(on_capture_event, on_trial_line, stop)``; ``stop`` ends the bar and may be called twice.
    """
    from rich.markup import escape

    from advisor.capture.progress import LiveProgress, ProgressConsole

    console = ProgressConsole()
    # NOTE: the script's name as it reads: never markup, never a control sequence (issue #30)
    live = LiveProgress(console=console, title=escape(printable_line(title)))
    live.__enter__()
    state = {"live": True}

    status: dict[str, Any] = {"spinner": None}

    def stop() -> None:
        if state["live"]:
            state["live"] = False
            live.__exit__(None, None, None)
        if status["spinner"] is not None:
            status["spinner"].stop()
            status["spinner"] = None

    def on_trial(event: Any) -> None:
        if state["live"]:
            state["live"] = False  # the capture bar is finished once trials start
            live.__exit__(None, None, None)
        text = escape(printable_line(event.line() + total_left(event)))
        if getattr(event, "in_flight", ""):
            # NOTE: a run in flight updates one transient line on a terminal; in a log (not a
            # terminal) it gets no line at all: one line per finished run (issue #32: a phase
            # line per run made six lines per trial and 291 lines for one diagnose).
            if console.is_terminal:
                if status["spinner"] is None:
                    status["spinner"] = console.status(f"[dim]fix trial[/dim] {text}")
                    status["spinner"].start()
                else:
                    status["spinner"].update(f"[dim]fix trial[/dim] {text}")
            return
        # NOTE: soft_wrap: one event, one line, however long; a log cut at rich's 80 columns
        # split "running: starting" across two lines
        console.print(f"[dim]fix trial[/dim] {text}", highlight=False, soft_wrap=True)

    return live, on_trial, stop


def total_left(event: Any) -> str:
    """``  (~3m10s in all, counting a combined run)``: the whole loop's remaining time, or "".

    The loop plans a stage only once the one before has its verdicts, so its own estimate covers
    the current stage ("5 more in this stage (~1m)"); a user in a 6-minute run never learnt how
    long was left (issue #32). The total adds the combined measurement that follows the trials
    (two runs per round: the kept set and its baseline), at the runs' typical wall time so far;
    fixes measured on top of another are not foreseen, so it is a lower bound and says so.
    """
    from advisor.fixes.loop.progress import clock_text

    left = getattr(event, "runs_left", None)
    eta = getattr(event, "eta_s", None)
    if not left or eta is None:
        return ""
    stage = str(getattr(event, "stage", ""))
    if stage == "combined":
        return ""  # NOTE: the last stage: its own estimate is the total
    per_run = eta / left
    later = 2 * max(int(getattr(event, "repeats", 0) or 0), 1)
    return f"  (~{clock_text(eta + later * per_run)} in all, counting a combined run)"


def sweep_progress() -> tuple[Callable[[Any], None], Callable[[], None]]:
    """Show the progress of ``advisor sweep`` on stderr: a line per finished run.

    The run in flight gets a transient status line on a terminal, and no line in a log.

    Returns:
        ``(on_event, stop)``; ``stop`` ends the status line and may be called twice.
    """
    from rich.markup import escape

    from advisor.capture.progress import ProgressConsole

    console = ProgressConsole()
    status: dict[str, Any] = {"spinner": None}

    def stop() -> None:
        if status["spinner"] is not None:
            status["spinner"].stop()
            status["spinner"] = None

    def on_event(event: Any) -> None:
        text = escape(printable_line(event.line()))
        if event.started and console.is_terminal:
            if status["spinner"] is None:
                status["spinner"] = console.status(f"[dim]sweep[/dim] {text}")
                status["spinner"].start()
            else:
                status["spinner"].update(f"[dim]sweep[/dim] {text}")
            return
        console.print(f"[dim]sweep[/dim] {text}", highlight=False, soft_wrap=True)

    return on_event, stop
