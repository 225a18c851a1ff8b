"""Smoke tests: the console script and ``python -m advisor`` both start, and errors map to exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli.main import cli, main

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent / "advisor"


def test_console_script_version() -> None:
    out = subprocess.run([str(BIN), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("advisor, version ")


def test_python_m_advisor_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "advisor", "--help"], capture_output=True, text=True, check=True)
    for command in ("diagnose", "analyze", "report", "compare", "tensorboard", "rules", "rule"):
        assert command in out.stdout
    # the examples block keeps its lines (Click's \b marker), not re-wrapped with a stray "\b"
    assert "\\b" not in out.stdout
    assert any(line.strip().startswith("advisor diagnose train.py") for line in out.stdout.splitlines())


def test_no_help_page_shows_a_literal_backslash_b() -> None:
    from click.testing import CliRunner

    from advisor.cli.main import cli

    for command in ("diagnose", "analyze", "report", "compare", "tensorboard", "rules", "rule"):
        result = CliRunner().invoke(cli, [command, "--help"])
        assert result.exit_code == 0, result.output
        assert "\\b" not in result.output, command


def test_help_does_not_import_torch() -> None:
    code = "import sys; from advisor.cli.main import main; sys.argv=['advisor','--help']\n" \
           "try:\n    main()\nexcept SystemExit:\n    pass\nassert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_unknown_command_is_usage_error() -> None:
    result = CliRunner().invoke(cli, ["nonsense"])
    assert result.exit_code == 2


def test_missing_script_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "--no-fixes", str(tmp_path / "nope.py")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not found" in err and err.count("\n") == 1


def test_not_python_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", str(data)])
    assert exc.value.code == 2
    assert "not a Python script" in capsys.readouterr().err


def test_cli_choices_match_the_report_stage() -> None:
    # The CLI keeps literal copies so that building it imports no stage; they must not drift.
    from advisor.cli.options import FAIL_ON, FORMATS
    from advisor.report.gate import FAIL_ON_CHOICES
    from advisor.report.render import FORMATS as RENDER_FORMATS

    assert tuple(FORMATS) == tuple(RENDER_FORMATS)
    assert tuple(FAIL_ON) == tuple(FAIL_ON_CHOICES)


def test_exit_collects_garbage_before_exempting_the_rest_from_exit_collections() -> None:
    """The exit hook still finalizes unreachable cycles (written data is never left unflushed)."""
    import gc

    from advisor.cli.main import _skip_final_collections

    finalized: list[str] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            finalized.append("done")

    gc.disable()  # NOTE: so that only the hook can collect the cycle
    try:
        Cycle()
        _skip_final_collections()
        assert finalized == ["done"]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_exit_hook_is_registered_once_by_the_console_script() -> None:
    code = (
        "import atexit, sys\n"
        "from advisor.cli import main as m\n"
        "calls = []\n"
        "atexit.register = lambda f, *a: calls.append(f)\n"
        "atexit.unregister = lambda f: calls.remove(f) if f in calls else None\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        m.main(['--version'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(len(calls), calls[0].__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["1", "_skip_final_collections"]


def test_exit_status_follows_sys_exit(capsys) -> None:  # type: ignore[no-untyped-def]
    from advisor.cli.main import _exit_status

    assert (_exit_status(None), _exit_status(0), _exit_status(3), _exit_status(130)) == (0, 0, 3, 130)
    assert _exit_status("advisor: stopped") == 1
    assert capsys.readouterr().err == "advisor: stopped\n"


def test_quick_end_keeps_output_exit_hooks_and_status(tmp_path: Path) -> None:
    # The console entry ends with os._exit after the command: the whole output still arrives
    # (a pipe and a file), the exit hooks still run, and the command's status is the process's.
    from test_inline_ignores import starved_trace

    trace = tmp_path / "worker0.pt.trace.json"
    trace.write_text(json.dumps(starved_trace()), encoding="utf-8")
    piped = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(trace), "--format", "json"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["primary"]["category"] == "data_loading"
    listed = subprocess.run([str(BIN), "rules"], capture_output=True, text=True, check=True).stdout
    assert listed == CliRunner().invoke(cli, ["rules"]).output
    hook = ("import atexit, sys; atexit.register(lambda: print('hook ran', flush=True)); "
            "from advisor.cli.main import entry; sys.argv = ['advisor', 'analyze', sys.argv[1]]; entry()")
    missing = subprocess.run([sys.executable, "-c", hook, str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert missing.stdout == "hook ran\n"
    assert missing.stderr.startswith("advisor: error: ") and missing.stderr.count("\n") == 1
