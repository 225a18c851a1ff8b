"""SIGTERM and SIGHUP stop advisor as Ctrl-C does, in-process (the end-to-end cases are in test_processes.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from advisor._proc import HURRY, Interrupted, interrupt_once, stop_child

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers need the main thread"),
]


@pytest.fixture
def restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_signal_raises_interrupted_and_handlers_are_restored(restore_handlers, sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Interrupted) as info, interrupt_once():
        os.kill(os.getpid(), sig)
    assert info.value.signum == sig
    assert isinstance(info.value, KeyboardInterrupt)  # every ^C clean-up path runs for it too
    assert signal.getsignal(sig) == before


def test_a_hangup_ignored_on_purpose_stays_ignored(restore_handlers) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup advisor ...` starts it
    with interrupt_once():
        # NOTE: no real SIGHUP is sent: a pytest worker must not depend on its disposition.
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


def test_a_second_signal_hurries_and_a_third_raises_again(restore_handlers) -> None:
    """A second ^C 50 ms after the first raised inside the save it started: no capture, no report (issue #30, CI)."""
    raised = []
    with interrupt_once():
        for n in range(3):
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raised.append(n)
        assert HURRY.is_set()
    assert raised == [0, 2]


def test_nested_blocks_share_one_count(restore_handlers) -> None:
    """The fix loop's block ends with the first ^C; the CLI's block around it must not raise for the second."""
    asked: list = [False]
    with interrupt_once():
        with pytest.raises(Interrupted), interrupt_once(asked):
            os.kill(os.getpid(), signal.SIGTERM)
        assert asked[0] == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # absorbed: the clean-up of the first goes on
        assert HURRY.is_set()
    with interrupt_once():  # a fresh outermost block starts a fresh count
        assert not HURRY.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


def test_the_cli_block_keeps_absorbing_after_an_interrupt(restore_handlers) -> None:
    """A second ^C 200 ms after the first landed in the exit and printed a KeyboardInterrupt traceback."""
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), interrupt_once(final=True):
        os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)  # absorbed: the process is on its way out
    assert signal.getsignal(signal.SIGINT) is not before
    signal.signal(signal.SIGINT, before)
    with interrupt_once(final=True):
        pass
    assert signal.getsignal(signal.SIGINT) is before  # nothing seen: handlers restored as found


@pytest.mark.e2e
def test_a_hurried_stop_gives_the_child_the_last_grace_not_the_whole_one(restore_handlers) -> None:
    import subprocess
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline()  # its SIGTERM handler is in place
    with interrupt_once():
        HURRY.set()
        started = time.monotonic()
        stop_child(child, grace_s=40.0, last_grace_s=0.2)
    assert child.returncode == -signal.SIGKILL and time.monotonic() - started < 40.0


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_a_capture_interrupted_before_any_trial_is_not_called_a_fix_trial_interrupt(capsys, tmp_path, fmt: str) -> None:
    """The report of a capture stopped by ^C said "Interrupted during the fix trials" (issue #30 campaign)."""
    import json
    from pathlib import Path

    from cli_helpers import invoke

    data = json.loads((Path(__file__).resolve().parents[1] / "golden" / "report.json").read_text())
    data.update(status="interrupted", trials=[])
    data["run"]["status"] = "interrupted"
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps(data))
    code, out, err = invoke(capsys, "report", "--format", fmt, str(run))
    assert code in (0, 1), err
    assert "Interrupted during the capture" in out and "during the fix trials" not in out
