"""A closed stderr (``advisor diagnose train.py 2>&1 | head``) ends the progress, not the program."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from advisor.capture.model import Phase, ProgressEvent
from advisor.capture.progress import LiveProgress, ProgressConsole


@contextmanager
def closed_stderr() -> Iterator[TextIO]:
    """sys.stderr writes into a pipe whose reading end is closed (what `| head` leaves).

    Set inside the test's body: pytest puts its own capture back on sys.stderr between a
    fixture's set-up and the test.
    """
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w", buffering=1)
    saved, sys.stderr = sys.stderr, stream
    try:
        yield stream
    finally:
        sys.stderr = saved
        stream.close()


def test_a_progress_line_into_a_closed_pipe_goes_quiet_instead_of_exiting() -> None:
    with closed_stderr() as stream:
        console = ProgressConsole()
        for _ in range(3):  # rich's own console raises SystemExit(1) here, on the first line
            console.print("fix trial [run 1]  baseline  1/3  running: starting, step 0/13")
        assert console.quiet
        # stderr now points at /dev/null: later writes (rich's refresh thread, exit flush) succeed
        assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))
        stream.write("more\n")
        stream.flush()


def test_the_capture_bar_survives_a_closed_pipe() -> None:
    with closed_stderr():
        live = LiveProgress(title="train.py")
        live.__enter__()
        live(ProgressEvent(Phase.TIMED, step=3, steps_total=10))
        live.__exit__(None, None, None)  # no SystemExit, no BrokenPipeError
