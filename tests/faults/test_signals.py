"""SIGTERM and SIGHUP stop advisor as Ctrl-C does, in-process (the end-to-end cases are in test_processes.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from advisor._proc import Interrupted, signals_interrupt

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers need the main thread"),
]


@pytest.fixture
def restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_signal_raises_interrupted_and_handlers_are_restored(restore_handlers, sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Interrupted) as info, signals_interrupt():
        os.kill(os.getpid(), sig)
    assert info.value.signum == sig
    assert isinstance(info.value, KeyboardInterrupt)  # every ^C clean-up path runs for it too
    assert signal.getsignal(sig) == before


def test_a_hangup_ignored_on_purpose_stays_ignored(restore_handlers) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup advisor ...` starts it
    with signals_interrupt():
        # NOTE: no real SIGHUP is sent: a pytest worker must not depend on its disposition.
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


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
