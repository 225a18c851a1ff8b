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

    status: dict[str, Any] = {"spinner": None, "last": None}

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
        text = escape(printable_line(event.line()))
        if getattr(event, "in_flight", ""):
            # NOTE: a run in flight updates one transient line on a terminal; in a log (not a
            # terminal) it gets a line per phase, never one per step.
            if console.is_terminal:
                if status["spinner"] is None:
                    status["spinner"] = console.status(f"[dim]fix trial[/dim] {text}")
                    status["spinner"].start()
                else:
                    status["spinner"].update(f"[dim]fix trial[/dim] {text}")
            elif status["last"] != (event.run, event.in_flight):
                status["last"] = (event.run, event.in_flight)
                console.print(f"[dim]fix trial[/dim] {text}", highlight=False, soft_wrap=True)
            return
        # NOTE: soft_wrap: one event, one line, however long; a log cut at rich's 80 columns
        # split "running: starting" across two lines
        console.print(f"[dim]fix trial[/dim] {text}", highlight=False, soft_wrap=True)

    return live, on_trial, stop


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
