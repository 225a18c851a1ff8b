"""``advisor config``: each resolved setting with its source, for a folder or a script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.cli.main import main
from advisor.config import resolve_config
from advisor.engine.rules import default_rules

ALL_STABLE = [r.code for r in default_rules() if r.status == "stable"]


def invoke(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run the CLI like the console script; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def settings_json(capsys, *argv: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    code, out, err = invoke(capsys, "config", "--format", "json", *argv)
    assert code == 0, err
    return json.loads(out)


def test_defaults_when_no_config_file(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    data = settings_json(capsys)
    assert data["config_file"] is None
    assert all(s["default"] and s["sources"] == [] for s in data["settings"].values())
    assert data["settings"]["select"]["value"] is None
    assert data["settings"]["ignore"]["value"] == [] and data["settings"]["preview"]["value"] is False
    assert data["rules"]["selected"] == ALL_STABLE
    code, out, _ = invoke(capsys, "config")
    assert "config file: none found" in out
    assert re.search(r"^select +\(every stable rule\) +default$", out, flags=re.M)


def test_pyproject_and_extend_chain_with_sources(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.advisor]\nextend = "base.toml"\nselect = ["DL", "SY"]\nignore = ["SY002"]\n'
    )
    (tmp_path / "base.toml").write_text('ignore = ["DL002"]\npreview = true\n')
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    script = sub / "train.py"
    script.write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    data = settings_json(capsys, "--for", str(script))
    pyproject, base = str(tmp_path / "pyproject.toml"), str(tmp_path / "base.toml")
    assert data["config_file"] == pyproject and data["extends"] == [base]
    s = data["settings"]
    assert s["select"] == {"value": ["DL", "SY"], "default": False, "sources": [pyproject]}
    # base.toml's ignore is replaced by pyproject's select, and config says so
    assert s["ignore"] == {"value": ["SY002"], "default": False, "sources": [pyproject]}
    assert data["notes"] == [f"{base}: ignore replaced by the select in {pyproject} [tool.advisor]"]
    assert s["preview"] == {"value": True, "default": False, "sources": [base]}
    assert s["extend-select"]["default"] is True
    # what the engine runs: the closer file's select replaces what its base built (base's
    # ignore of DL002 included), then its own ignore drops SY002
    assert data["rules"]["selected"] == ["DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "DL007", "DL008", "SY001"]
    code, out, _ = invoke(capsys, "config", "--for", str(sub))
    assert "config file: pyproject.toml [tool.advisor]" in out and "  extends: base.toml" in out
    ignore_row = next(line for line in out.splitlines() if line.startswith("ignore "))
    assert ignore_row.split() == ["ignore", '["SY002"]', "pyproject.toml", "[tool.advisor]"]
    assert "rules: 9 of " in out and "selected: DL001, DL002, DL003, DL004, DL005, DL006, DL007, DL008, SY001" in out


def test_lists_add_up_over_the_extend_chain_without_select(tmp_path: Path) -> None:
    (tmp_path / "advisor.toml").write_text('extend = "base.toml"\nignore = ["SY002"]\nextend-select = ["CM"]\n')
    (tmp_path / "base.toml").write_text('ignore = ["DL002", "SY002"]\n')
    resolved = resolve_config(tmp_path)
    ignore = next(s for s in resolved.settings if s.key == "ignore")
    assert ignore.value == ("DL002", "SY002")
    assert ignore.sources == ((tmp_path / "base.toml").resolve(), (tmp_path / "advisor.toml").resolve())
    assert resolved.notes == ()


def test_closest_file_wins_and_advisor_toml_beats_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nignore = ["SY"]\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "no-advisor-table"\n')  # skipped
    assert resolve_config(inner).path == tmp_path / "pyproject.toml"
    (inner / "advisor.toml").write_text('select = ["HD"]\n')
    resolved = resolve_config(inner)
    assert resolved.path == (inner / "advisor.toml").resolve()
    by_key = {s.key: s for s in resolved.settings}
    assert by_key["select"].value == ("HD",) and by_key["ignore"].is_default


def test_unknown_code_in_config_warns_on_stderr(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "advisor.toml").write_text('ignore = ["SY01"]\n')
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(capsys, "config")
    assert code == 0
    assert err.startswith("advisor: warning: unknown rule code 'SY01' in ignore") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[tool.advisor]\nignor = ["SY001"]\n', "unknown key 'ignor' (did you mean 'ignore'?)"),
        ("[tool.advisor\nselect = 1\n", "invalid TOML"),
        ('[tool.advisor]\npreview = "yes"\n', "preview: expected true or false"),
    ],
)
def test_bad_config_is_a_one_line_usage_error(tmp_path: Path, capsys, monkeypatch, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(capsys, "config")
    assert code == 2 and out == ""
    assert err.startswith("advisor: error: ") and expected in err and err.count("\n") == 1


def test_for_a_missing_path_is_a_usage_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = invoke(capsys, "config", "--for", str(tmp_path / "nope.py"))
    assert code == 2 and "does not exist" in err


def test_config_is_listed_in_help(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = invoke(capsys, "--help")
    assert "  config " in out and "Show the resolved configuration" in out


@pytest.mark.parametrize("command", ["analyze", "diagnose"])
def test_no_inline_ignores_flag_is_offered(capsys, command: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = invoke(capsys, command, "--help")
    assert code == 0 and "--no-inline-ignores" in out
