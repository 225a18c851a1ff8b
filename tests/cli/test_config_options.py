"""Issue #20 item 7: ``[tool.advisor]`` holds diagnose options; the command line wins.

In-process: ``api.diagnose_script`` is replaced by a recorder that keeps the spec and fix options
it is given and stops, so no capture runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from advisor import api
from advisor.errors import UsageError
from tests.cli_helpers import invoke, one_line_error

SCRIPT = "import torch\n"


class _Stop(UsageError):
    """Raised by the recorder: the options reached the api; nothing more to run."""


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def record(spec, engine_config=None, fix_options=None, **_: Any):  # type: ignore[no-untyped-def]
        got.update(spec=spec, fix=fix_options, engine=engine_config)
        raise _Stop("recorded")

    monkeypatch.setattr(api, "diagnose_script", record)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text(SCRIPT)
    return got


def _diagnose(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return invoke(capsys, "diagnose", "--out", "run", *argv)


def test_config_sets_the_diagnose_options(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proj" / "pyproject.toml").write_text(
        "[tool.advisor]\nsteps = 7\nwarmup = 2\nprofile-steps = 3\nrepeats = 5\n"
        'unsafe-fixes = true\ntimeout = 90\nfix = ["pin_memory"]\nignore = ["SK"]\n'
    )
    code, _, err = _diagnose(capsys, "proj/train.py")
    assert "recorded" in err and code == 2
    spec, fix = seen["spec"], seen["fix"]
    assert (spec.warmup_steps, spec.timed_steps, spec.profiled_steps, spec.timeout_s) == (2, 7, 3, 90.0)
    assert (fix.repeats, fix.unsafe, fix.only) == (5, True, ("pin_memory",))
    assert seen["engine"].layers[-1].ignore == ("SK",)  # the selection keys still work beside them


def test_config_can_ask_for_cold_starts(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    _diagnose(capsys, "proj/train.py")
    assert seen["fix"].cold_start is False  # the warm start is the default
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.advisor]\ncold-start = true\n")
    _diagnose(capsys, "proj/train.py")
    assert seen["fix"].cold_start is True


def test_the_command_line_wins(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proj" / "advisor.toml").write_text("steps = 7\nrepeats = 5\nunsafe-fixes = true\n")
    _diagnose(capsys, "--steps", "11", "--repeats", "2", "proj/train.py")
    assert seen["spec"].timed_steps == 11 and seen["fix"].repeats == 2
    assert seen["fix"].unsafe is True  # not given on the command line: the file's value


def test_without_a_config_file_the_defaults_hold(capsys, seen) -> None:  # type: ignore[no-untyped-def]
    _diagnose(capsys, "proj/train.py")
    assert (seen["spec"].timed_steps, seen["spec"].warmup_steps, seen["fix"].repeats) == (20, 5, 3)
    assert seen["fix"].unsafe is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[tool.advisor]\nstep = 7\n", "unknown key 'step' (did you mean 'steps'?)"),
        ("[tool.advisor]\nunsafe_fixes = true\n", "(did you mean 'unsafe-fixes'"),
        ("[tool.advisor]\nsteps = 0\n", "steps: 0 is not in the range x>=1"),
        ('[tool.advisor]\nsteps = "many"\n', "steps: 'many' is not a valid integer"),
        ("[tool.advisor]\nsteps = true\n", "steps: expected a value as --steps takes, not true/false"),
        ('[tool.advisor]\nunsafe-fixes = "yes"\n', "unsafe-fixes: expected true or false"),
        ("[tool.advisor]\ntimeout = -1\n", "timeout: -1 is not a positive, finite number of seconds"),
        # per-run choices stay on the command line: writing the user's script needs the flag
        ("[tool.advisor]\nwrite = true\n", "unknown key 'write'"),
    ],
)
def test_a_bad_option_in_the_file_is_a_one_line_usage_error(
    tmp_path: Path, capsys, seen, text: str, expected: str  # type: ignore[no-untyped-def]
) -> None:
    (tmp_path / "proj" / "pyproject.toml").write_text(text)
    line = one_line_error(*_diagnose(capsys, "proj/train.py")[::2])
    assert expected in line and "pyproject.toml: [tool.advisor]" in line
    assert "spec" not in seen  # refused before anything ran


def test_the_other_commands_accept_the_diagnose_keys(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\nsteps = 7\nunsafe-fixes = true\n")
    code, out, _ = invoke(capsys, "config")
    assert code == 0
    assert any(line.split()[:3] == ["steps", "7", "pyproject.toml"] for line in out.splitlines())
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\nsteps = 7\nrepeat = 2\n")
    line = one_line_error(*invoke(capsys, "config")[::2])
    assert "unknown key 'repeat' (did you mean 'repeats'?)" in line


def test_help_ignores_a_broken_config_file(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.advisor]\nsteps = 0\n")
    code, out, _ = invoke(capsys, "diagnose", "--help")
    assert code == 0 and "--steps" in out


def test_every_option_but_the_per_run_ones_is_a_key() -> None:
    from advisor.cli.cmd_diagnose import diagnose_option_keys

    keys = diagnose_option_keys()
    assert {"steps", "warmup", "profile-steps", "repeats", "unsafe-fixes", "timeout", "fix"} <= keys
    assert not keys & {"write", "diff", "out", "output", "format", "select", "ignore", "quiet"}


def test_a_conflict_with_a_config_value_names_the_key_not_a_flag_never_typed(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proj" / "advisor.toml").write_text("no-fixes = true\n")
    line = one_line_error(*_diagnose(capsys, "--fix", "pin_memory", "proj/train.py")[::2])
    assert "--fix chooses the fixes to try; it cannot be combined with 'no-fixes' in the config file" in line
    assert "--no-fixes" not in line and "spec" not in seen
    (tmp_path / "proj" / "advisor.toml").write_text('fix = ["pin_memory"]\n')
    line = one_line_error(*_diagnose(capsys, "--no-fixes", "proj/train.py")[::2])
    assert "'fix' in the config file chooses the fixes to try; it cannot be combined with --no-fixes" in line


def test_an_explicit_profile_steps_is_kept_whatever_its_export_time(tmp_path: Path, capsys, seen) -> None:  # type: ignore[no-untyped-def]
    from advisor.capture.budget import DEFAULT_TRACE_EXPORT_S

    _diagnose(capsys, "proj/train.py")
    assert seen["spec"].trace_export_s == DEFAULT_TRACE_EXPORT_S  # the default's steps may be cut
    _diagnose(capsys, "--profile-steps", "10", "proj/train.py")
    assert seen["spec"].trace_export_s is None and seen["spec"].profiled_steps == 10
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.advisor]\nprofile-steps = 6\n")
    _diagnose(capsys, "proj/train.py")
    assert seen["spec"].trace_export_s is None  # asked for in the config file: asked all the same
