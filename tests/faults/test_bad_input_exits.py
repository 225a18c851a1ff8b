"""Inputs that raised an internal error, hung, or made a report of nothing: one line and exit 2 now.

Cases from the issue #30 campaign: a path component over 255 bytes in every command that takes a
path, a symlink loop under ``traces/``, folders that cannot be listed, a crafted
``profile.pstats``, a step number past int64, stdout closed or on a full disk, a full temp folder
for ``tensorboard``, a FIFO among the rules, ``capture.json`` pointing outside its run, and
trace values no profiler writes (negative durations, absurd timestamps, NaN, no events).
"""

from __future__ import annotations

import errno
import gzip
import json
import marshal
import os
import shutil
import signal
from pathlib import Path

import pytest
from cli_helpers import invoke, one_line_error

from advisor.errors import RuleError

REPO = Path(__file__).resolve().parents[2]
CPU_TRACE = REPO / "tests" / "data" / "cpu_small" / "worker0.pt.trace.json.gz"
GOLDEN = REPO / "tests" / "golden" / "report.json"
LONG = "x" * 300  # one component over the 255 bytes a Linux file name may hold


def _run(tmp_path: Path, name: str = "run", trace: str = "traces/worker0.pt.trace.json.gz") -> Path:
    """A run directory with a capture listing ``trace`` and the CPU trace in ``traces/``."""
    run = tmp_path / name
    (run / "traces").mkdir(parents=True)
    shutil.copyfile(CPU_TRACE, run / "traces" / "worker0.pt.trace.json.gz")
    (run / "capture.json").write_text(json.dumps({"script": "train.py", "status": "stopped", "trace_files": [trace]}))
    return run


def _trace(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    data = json.loads(gzip.decompress(CPU_TRACE.read_bytes()))
    change(data["traceEvents"])
    path = tmp_path / "bad.pt.trace.json"
    path.write_text(json.dumps(data))  # NOTE: Python's json writes NaN as it is, as a crafted file would
    return path


# -- paths the file system refuses ---------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ("analyze", LONG), ("runs", LONG), ("report", LONG), ("compare", LONG, LONG), ("tensorboard", LONG),
], ids=lambda a: a[0])
def test_a_name_over_255_bytes_is_one_line(capsys, tmp_path: Path, monkeypatch, argv: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(capsys, *argv)
    # NOTE: tensorboard says which folder it prepares first; the error is still one line of its own
    line = one_line_error(code, err.replace(f"advisor: preparing traces from {LONG}\n", ""))
    assert "internal error" not in line and ("too long" in line or "does not exist" in line or "no " in line), line


def test_output_name_over_255_bytes_is_one_line(capsys, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")
    one_line_error(*invoke(capsys, "report", str(run), "-o", str(tmp_path / f"{LONG}.md"))[::2])


def test_a_symlink_loop_under_traces_is_one_line(capsys, tmp_path: Path) -> None:
    run = _run(tmp_path)
    shutil.rmtree(run / "traces")
    (run / "traces").symlink_to("traces")  # points at itself
    line = one_line_error(*invoke(capsys, "analyze", str(run))[::2])
    assert "fix the link" in line or "loop" in line.lower(), line


def test_capture_json_cannot_point_outside_its_run(capsys, tmp_path: Path) -> None:
    foreign = _run(tmp_path, "other")
    run = _run(tmp_path, "run", trace=str(foreign / "traces" / "worker0.pt.trace.json.gz"))
    line = one_line_error(*invoke(capsys, "analyze", str(run))[::2])
    assert "outside the run directory" in line
    run2 = _run(tmp_path, "run2", trace="../other/traces/worker0.pt.trace.json.gz")
    assert "outside the run directory" in one_line_error(*invoke(capsys, "analyze", str(run2))[::2])


def test_an_unreadable_traces_folder_is_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    """PermissionError under ``traces/`` (root cannot reproduce it with chmod: raised here as the kernel would)."""
    run = _run(tmp_path)
    real = Path.is_file

    def refuse(self: Path) -> bool:
        if self.parent.name == "traces":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_file", refuse)
    line = one_line_error(*invoke(capsys, "analyze", str(run))[::2])
    assert "Permission denied; check its permissions" in line


def test_an_unlistable_rules_folder_is_a_rule_error(tmp_path: Path, monkeypatch) -> None:
    from advisor.engine.rules import load_rules

    root = tmp_path / "rules"
    shutil.copytree(REPO / "rules", root)
    real = Path.iterdir

    def refuse(self: Path):  # type: ignore[no-untyped-def]
        if self == root / "sync":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", refuse)
    with pytest.raises(RuleError, match="cannot list the rules"):
        load_rules(root)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_among_the_rules_is_refused_not_waited_on(tmp_path: Path) -> None:
    from advisor.engine.rules import load_rules

    root = tmp_path / "rules"
    shutil.copytree(REPO / "rules", root)
    os.mkfifo(root / "sync" / "SY999.yaml")

    def hung(*_a):  # type: ignore[no-untyped-def]
        raise AssertionError("rule loading waited on the FIFO")

    # NOTE: before the fix this blocked forever on the FIFO's open; fail instead of hanging the suite
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(RuleError, match="not a regular file"):
            load_rules(root)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_crafted_pstats_file_is_ignored_not_a_crash(tmp_path: Path) -> None:
    from advisor.metrics.sources import pstats_locations

    path = tmp_path / "profile.pstats"
    with path.open("wb") as fh:  # a caller that is not a (file, line, function) tuple
        marshal.dump({("train.py", 1, "f"): (1, 1, 0.1, 0.1, {5: (1, 1, 0.1, 0.1)})}, fh)
    assert pstats_locations(path, steps=2) == []


# -- streams --------------------------------------------------------------------------------------


def test_stdout_closed_is_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")
    monkeypatch.setattr("sys.stdout", None)  # what Python sets when started with `>&-`
    line = one_line_error(*invoke(capsys, "report", str(run))[::2])
    assert "stdout is closed" in line


def test_stdout_on_a_full_disk_is_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    from advisor.report import render

    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")

    class Full:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            raise OSError("no descriptor")

    monkeypatch.setattr(render.sys, "stdout", Full())
    line = one_line_error(*invoke(capsys, "report", str(run))[::2])
    assert "No space left on device" in line and "disk is full" in line


def test_a_full_temp_folder_for_tensorboard_leaves_no_copy(capsys, tmp_path: Path, monkeypatch) -> None:
    import tempfile

    from advisor.report import tensorboard_logdir

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    def full(*_a, **_k):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tensorboard_logdir.json, "dump", full)
    from advisor import api

    with pytest.raises(OSError):
        api.prepare_tensorboard(_run(tmp_path))
    assert list(temp.iterdir()) == []  # the partial copy went with the error


# -- values no profiler writes ---------------------------------------------------------------------


def _first_x(events: list[dict]) -> dict:
    return next(e for e in events if e.get("ph") == "X" and e.get("dur"))


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda ev: [e.update(dur=-e["dur"]) for e in ev if "dur" in e], "negative duration"),
    (lambda ev: [e.update(ts=e["ts"] * 1e290) for e in ev if "ts" in e], "timestamp no clock reads"),
    (lambda ev: _first_x(ev).update(dur=float("nan")), "NaN"),
    (lambda ev: ev.clear(), "no trace events"),
    (lambda ev: [e.update(name="ProfilerStep#99999999999999999999999") for e in ev
                 if str(e.get("name", "")).startswith("ProfilerStep#")], "past any count"),
], ids=["negative-dur", "ts-x1e290", "nan", "no-events", "step-overflow"])
def test_impossible_trace_values_are_bad_input_not_a_report(capsys, tmp_path: Path, change, fragment: str) -> None:  # type: ignore[no-untyped-def]
    line = one_line_error(*invoke(capsys, "analyze", str(_trace(tmp_path, change)))[::2])
    assert fragment in line and "truncated" not in line, line


# -- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "key"), [('steps = "ten"', "steps"), ("warmup = -5", "warmup"), ("budget = nan", "budget")])
def test_config_flags_values_diagnose_would_refuse(capsys, tmp_path: Path, monkeypatch, line: str, key: str) -> None:
    """`advisor config` showed them without a word, exit 0, while `diagnose` stopped on them."""
    (tmp_path / "pyproject.toml").write_text(f"[tool.advisor]\n{line}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(capsys, "config")
    assert code == 2 and out  # the settings are still shown, then the refusal
    assert f"{key}:" in err and "advisor diagnose refuses this value" in err and "internal error" not in err


def test_an_unreadable_capture_is_called_unreadable_not_invalid(tmp_path: Path, monkeypatch) -> None:
    from advisor.capture.model import RunCapture
    from advisor.errors import InputError

    run = _run(tmp_path)
    real = Path.read_text

    def refuse(self: Path, *a, **k):  # type: ignore[no-untyped-def]
        if self.name == "capture.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(InputError, match="cannot read .*Permission denied.*check its permissions") as info:
        RunCapture.load(run)
    assert "not valid JSON" not in str(info.value)


def test_a_dumb_terminal_gets_no_colour(monkeypatch) -> None:
    """`TERM=dumb` on a terminal still got ANSI colour (issue #30)."""
    from advisor.report.render import use_color

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_color("text", None, Tty())  # type: ignore[arg-type]
    monkeypatch.setenv("TERM", "dumb")
    assert not use_color("text", None, Tty())  # type: ignore[arg-type]


# -- the issue #30 follow-up campaign ------------------------------------------------------------


def _steps(events: list[dict]) -> list[dict]:
    return [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]


@pytest.mark.parametrize("change", [
    lambda ev: [e.update(dur=0) for e in _steps(ev)],
    lambda ev: [e.update(ts=_steps(ev)[0]["ts"]) for e in _steps(ev)],
    lambda ev: [e.update(ts=True) for e in ev if "ts" in e],
    lambda ev: [e.pop("dur", None) for e in ev],
], ids=["step-dur-0", "steps-start-together", "ts-true", "no-durations"])
def test_steps_of_no_length_are_bad_input_not_a_zero_step_time(capsys, tmp_path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """These made "Step time 0.0 ms" with exit 0."""
    line = one_line_error(*invoke(capsys, "analyze", str(_trace(tmp_path, change)))[::2])
    assert "step of no length" in line, line


@pytest.mark.parametrize("key", ["ts", "dur"])
def test_an_integer_past_float64_in_a_trace_is_bad_input_not_an_overflow(capsys, tmp_path: Path, key: str) -> None:
    """``"ts": 10**400`` raised OverflowError: an internal error."""
    line = one_line_error(*invoke(capsys, "analyze", str(_trace(tmp_path, lambda ev: _first_x(ev).update({key: 10**400}))))[::2])
    assert "internal error" not in line and "not a finite number" in line, line


@pytest.mark.parametrize("value", [float("nan"), -1.0, 1e308])
def test_impossible_step_times_in_capture_json_are_bad_input(capsys, tmp_path: Path, value: float) -> None:
    """``advisor analyze RUN`` printed "Step time 1e308 ms" with exit 0 from such a capture.json."""
    run = _run(tmp_path)
    data = json.loads((run / "capture.json").read_text())
    data["timed"] = {"step_times_ms": [1.0, value, 2.0]}
    (run / "capture.json").write_text(json.dumps(data))
    line = one_line_error(*invoke(capsys, "analyze", str(run))[::2])
    assert "step_times_ms[1]" in line and "no step takes" in line, line


@pytest.mark.parametrize(("text", "fragment"), [
    ("tool = 5\n", None),
    ("[tool.advisor]\ntimeout = 1979-05-27T07:32:00Z\n", "a date or time"),
    ("[tool.advisor]\nsteps = 07:32:00\n", "a date or time"),
], ids=["tool-not-a-table", "datetime", "time"])
def test_odd_toml_values_are_a_clear_answer_not_an_internal_error(capsys, tmp_path: Path, monkeypatch, text: str, fragment) -> None:  # type: ignore[no-untyped-def]
    """`tool = 5` raised AttributeError, a TOML date TypeError in `advisor config`."""
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    for argv in (("config",), ("analyze", str(CPU_TRACE))):
        code, _, err = invoke(capsys, *argv)
        assert "internal error" not in err, err
        if fragment is None:
            assert code in (0, 1), err  # not advisor's table: the file is not advisor's config
        else:
            assert fragment in one_line_error(code, err)


@pytest.mark.parametrize("seed", ["99999999999999999999", "-1", "4294967296"])
def test_a_seed_numpy_refuses_is_bad_input_before_anything_runs(capsys, tmp_path: Path, seed: str) -> None:
    """Past 2**32 - 1 the script "failed before its first step" (exit 3), blamed on the script."""
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    code, _, err = invoke(capsys, "diagnose", "--no-fixes", f"--seed={seed}", "--out", str(tmp_path / "run"), str(script))
    assert code == 2 and "--seed" in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("host", ["127.0.0.1\x1b]0;PWN\x07", "no.such.host.invalid", "192.0.2.1"])
def test_a_host_that_is_no_address_is_said_so_escaped(capsys, tmp_path: Path, monkeypatch, host: str) -> None:
    """The warning printed the host's raw ESC/BEL, and any unbindable host was "port 6006 ... is in use"."""
    from advisor import api

    monkeypatch.setattr(api, "tensorboard_check", lambda: None)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code, out, err = invoke(capsys, "tensorboard", str(_run(tmp_path)), "--host", host)
    assert code == 2, err
    assert "\x1b" not in err and "\x07" not in err, err
    assert "is in use" not in err and ("is not an address of this machine" in err or "cannot bind" in err), err
    assert not list(tmp_path.glob("advisor-tb-*")), "the temporary copy was left behind"


def _no_hang(seconds: int = 20):  # type: ignore[no-untyped-def]
    """Fail instead of hanging the suite (a FIFO open blocks until a writer comes)."""
    import contextlib

    @contextlib.contextmanager
    def guard():  # type: ignore[no-untyped-def]
        def hung(*_a):  # type: ignore[no-untyped-def]
            raise AssertionError("advisor waited on the FIFO")

        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(seconds)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    return guard()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("where", ["sweep.json", "folder/sweep.json"])
def test_a_fifo_given_to_sweep_load_is_refused_not_waited_on(capsys, tmp_path: Path, where: str) -> None:
    fifo = tmp_path / where
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    with _no_hang():
        line = one_line_error(*invoke(capsys, "sweep", "--load", str(tmp_path / where.split("/")[0]))[::2])
    assert "not a regular file" in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_run_whose_capture_json_is_a_fifo_is_described_not_waited_on(capsys, tmp_path: Path) -> None:
    """``diagnose --out RUN`` read RUN/capture.json to say whose run it is: a FIFO there blocked forever."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")
    os.mkfifo(run / "capture.json")
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    with _no_hang():
        line = one_line_error(*invoke(capsys, "diagnose", "--out", str(run), str(script))[::2])
    assert "already holds a run" in line


@pytest.mark.parametrize("pid", [99999999999, 2**70, True])
def test_runs_lists_a_run_whose_pid_no_process_can_have(capsys, tmp_path: Path, pid: object) -> None:
    """A ``config.json`` pid past pid_t made `advisor runs` an internal error (OverflowError)."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"spec": {"script": "a.py"}, "run_dir": str(run), "pid": pid}))
    code, out, err = invoke(capsys, "runs", str(tmp_path))
    assert code == 0, err
    assert "killed" in out


@pytest.mark.parametrize("argv", [("rules",), ("fixes",), ("rule", "DL001"), ("config",), ("report", "RUN")], ids=lambda a: a[0])
def test_a_reader_that_closed_the_pipe_gets_exit_0_from_every_command(capsys, tmp_path: Path, monkeypatch, argv) -> None:  # type: ignore[no-untyped-def]
    """`advisor rules | (exec 0<&-)` exited 1 (Click's EPIPE answer), `report` 0: 1 means findings in advisor (issue #30 campaign)."""
    import sys

    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")
    monkeypatch.chdir(tmp_path)
    real = sys.stdout

    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def fileno(self) -> int:
            return real.fileno()

        def isatty(self) -> bool:
            return False

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(real, name)

    monkeypatch.setattr(sys, "stdout", Closed())
    monkeypatch.setattr("advisor._terminal.silence_stream", lambda stream: None)
    monkeypatch.setattr("advisor.cli.main.silence_stream", lambda stream: None)
    code, _, err = invoke(capsys, *[str(run) if a == "RUN" else a for a in argv])
    assert code == 0, err
    assert "internal error" not in err


@pytest.mark.parametrize("linked", ["traces/worker0.pt.trace.json.gz", "profile.pstats"])
def test_a_symlink_inside_a_run_cannot_lead_outside_it(capsys, tmp_path: Path, linked: str) -> None:
    """``traces/x -> another run's trace`` was followed: the foreign trace became the run's (issue #30 campaign)."""
    foreign = _run(tmp_path, "other")
    run = _run(tmp_path, "run")
    (run / linked).unlink(missing_ok=True)
    (run / linked).symlink_to(foreign / "traces" / "worker0.pt.trace.json.gz")
    line = one_line_error(*invoke(capsys, "analyze", str(run))[::2])
    assert "outside the run directory" in line


def test_a_run_directory_reached_through_a_symlink_is_still_read(capsys, tmp_path: Path) -> None:
    run = _run(tmp_path, "run")
    (tmp_path / "link").symlink_to(run)
    code, _, err = invoke(capsys, "analyze", str(tmp_path / "link"))
    assert code in (0, 1), err
