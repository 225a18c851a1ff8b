"""A Ctrl-C always ends advisor with 130 and one line, wherever it lands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from advisor.cli import main as cli_main


def test_a_ctrl_c_wrapped_by_another_exception_is_still_an_interrupt():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'events'") from ki
    except RuntimeError as exc:
        assert isinstance(cli_main._interrupt_inside(exc), KeyboardInterrupt)
    assert cli_main._interrupt_inside(ValueError("plain")) is None


def test_a_wrapped_ctrl_c_exits_130_not_as_an_internal_error(monkeypatch, capsys):
    def command(*_a, **_k):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__") from ki

    monkeypatch.setattr(cli_main.cli, "main", command)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["rules"])
    assert exit_.value.code == 130
    assert "interrupted (SIGINT)" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_ctrl_c_inside_exec_code_still_exits_130(tmp_path):
    # dataclasses builds __init__ with exec(): a ^C landing there set CPython's unhandled-^C flag,
    # and `python -m advisor` ended by SIGINT (-2) although advisor handled it and asked for 130
    (tmp_path / "interrupted_in_exec.py").write_text(
        "from advisor.cli import main as m\n"
        "try:\n    exec('raise KeyboardInterrupt')\n"
        "except KeyboardInterrupt as e:\n    m._interrupted(e)\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 130, proc.stderr[-500:]
    assert proc.stderr.strip().splitlines()[-1] == "advisor: interrupted (SIGINT)"
