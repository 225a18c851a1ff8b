"""Live progress of a capture on stderr (rich): phase, steps done of asked, elapsed time.

Usage (the CLI does this unless ``-q``)::

    with LiveProgress() as show:
        result = capture(spec, progress=show)

``capture`` calls ``show(event)`` from a background thread; rich's ``Progress`` is thread-safe.
On a non-terminal stderr rich prints nothing animated, so logs stay clean.
"""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from advisor._terminal import silence_stream
from advisor.capture.model import (
    Phase,
    ProgressEvent,
    RunStatus,
)

PHASE_LABELS = {
    Phase.STARTING: "starting the script",
    Phase.WARMUP: "warm-up",
    Phase.TIMED: "timed steps",
    Phase.PROFILED: "profiling (torch.profiler)",
    Phase.CPROFILE: "profiling (cProfile)",
    Phase.FINISHING: "finishing",
    Phase.DONE: "done",
}


DONE_WORDS = {RunStatus.STOPPED: "complete", RunStatus.COMPLETED: "complete (ran to its end)"}
"""How a capture's end reads on the progress line."""


def describe(event: ProgressEvent) -> str:
    """One line of text for an event, e.g. ``timed steps 3/20``."""
    label = PHASE_LABELS.get(event.phase, event.phase)
    if event.phase_steps:
        label += f" {event.phase_step}/{event.phase_steps}"
    if event.phase == Phase.DONE and event.message:
        # NOTE: "stopped" is the normal end (advisor stops the script after profiling); it read as
        # a failure on a successful capture (issue #32)
        label += f": {DONE_WORDS.get(event.message, event.message)}"
    return label


class StepsColumn(ProgressColumn):
    """``12/20 steps`` once the phase's step count is known, ``12 steps`` before, nothing at 0 of unknown.

    A plain ``{task.completed}/{task.total}`` template printed ``0/None steps`` while the script
    was starting (and on every run that failed before its first step).
    """

    def render(self, task: Task) -> Text:
        """Return the column's text for ``task``."""
        done = int(task.completed)
        if task.total is not None:
            return Text(f"{done}/{int(task.total)} steps")
        return Text(f"{done} steps" if done else "")


class ProgressConsole(Console):
    """A stderr console whose closed pipe ends the progress, not the program.

    ``advisor diagnose train.py 2>&1 | head`` closes stderr after a few lines. rich's default
    answer to the broken pipe is ``SystemExit(1)`` (after pointing *stdout* at /dev/null): it
    ended the fix loop with its report still saying ``running``, and would have hidden the final
    report. Progress is decoration; the run directory is the result: this console goes quiet,
    points stderr at /dev/null (rich's refresh thread and later lines write nowhere) and the
    program goes on.
    """

    def __init__(self) -> None:
        super().__init__(stderr=True)

    def on_broken_pipe(self) -> None:
        """Go quiet on a closed stderr instead of exiting."""
        self.quiet = True
        silence_stream(sys.stderr)


class LiveProgress:
    """A rich progress bar on stderr fed by :class:`ProgressEvent` callbacks.

    Args:
        console: Where to draw (default: a stderr console).
        title: Shown before the phase, e.g. the script's name.
    """

    def __init__(self, console: Console | None = None, title: str = "capture") -> None:
        self.console = console or ProgressConsole()
        self.title = title
        self._progress = Progress(
            TextColumn("[bold]{task.fields[title]}[/bold]"),
            TextColumn("{task.description}"),
            BarColumn(),
            StepsColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        self._task = self._progress.add_task(describe(ProgressEvent(Phase.STARTING)), total=None, title=self.title)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        """Show one event (called from capture's background thread)."""
        if self._task is None:
            return
        total = event.steps_total or None
        self._progress.update(
            self._task,
            description=describe(event),
            completed=min(event.step, total) if total else event.step,
            total=total,
        )
