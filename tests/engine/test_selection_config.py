"""Rule selection (ruff semantics) and the layered [tool.advisor] configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from advisor.config import find_config_file, resolve_engine_config
from advisor.engine.model import EngineConfig
from advisor.engine.rules import default_rules, parse_rule
from advisor.engine.ruleset import RuleSet
from advisor.engine.selection import select_rules
from advisor.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
ALL = default_rules()
STABLE = {r.code for r in ALL if r.status == "stable"}


def selected(config: EngineConfig | None, ruleset: RuleSet = ALL) -> set[str]:
    return {r.code for r in select_rules(ruleset, config).selected}


def test_default_is_every_stable_rule():
    assert selected(None) == STABLE
    assert selected(EngineConfig()) == STABLE


def test_select_by_code_and_prefix():
    assert selected(EngineConfig(select=("DL001",))) == {"DL001"}
    assert selected(EngineConfig(select=("SY",))) == {c for c in STABLE if c.startswith("SY")}
    assert selected(EngineConfig(select=("sy001", "CM"))) == {"SY001"} | {c for c in STABLE if c.startswith("CM")}
    assert selected(EngineConfig(select=("ALL",))) == STABLE


def test_ignore_by_code_and_prefix():
    assert selected(EngineConfig(ignore=("DL001",))) == STABLE - {"DL001"}
    assert selected(EngineConfig(ignore=("SK", "CM"))) == {c for c in STABLE if c[:2] not in ("SK", "CM")}


def test_more_specific_selector_wins():
    # select a code, ignore its prefix: the code is more specific, so it stays.
    assert selected(EngineConfig(select=("SY001",), ignore=("SY",))) == {"SY001"}
    # select a prefix, ignore a code in it: the ignore is more specific.
    assert selected(EngineConfig(select=("SY",), ignore=("SY001",))) == {"SY002"}
    # equal specificity: ignore wins.
    assert selected(EngineConfig(select=("SY001",), ignore=("SY001",))) == set()


def test_extend_select_adds():
    assert selected(EngineConfig(select=("DL001",), extend_select=("CM001",))) == {"DL001", "CM001"}


def test_cli_layer_over_config_layer():
    file_layer = EngineConfig(select=("DL", "SY"), ignore=("SY002",))
    # CLI ignore applies on top of the file's selection.
    assert selected(EngineConfig(ignore=("DL002",), layers=(file_layer,))) == {"DL001", "DL003", "DL004", "DL005", "DL006", "DL007", "DL008", "SY001"}
    # CLI select replaces the file's selection (and its ignores) entirely.
    assert selected(EngineConfig(select=("CM001",), layers=(file_layer,))) == {"CM001"}
    # CLI extend-select adds to it, even a code the file ignored.
    assert selected(EngineConfig(extend_select=("SY002",), layers=(file_layer,))) == {
        "DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "DL007", "DL008", "SY001", "SY002"}


def test_preview_rules_need_preview():
    base = yaml.safe_load((REPO / "rules" / "sync" / "SY001.yaml").read_text(encoding="utf-8"))
    stable = parse_rule(dict(base), path="a")
    preview = parse_rule({**base, "code": "SY099", "name": "preview-one", "status": "preview"}, path="b")
    deprecated = parse_rule({**base, "code": "SY098", "name": "old-one", "status": "deprecated"}, path="c")
    ruleset = RuleSet([stable, preview, deprecated])
    assert selected(None, ruleset) == {"SY001"}
    assert selected(EngineConfig(select=("SY099",)), ruleset) == set()
    assert selected(EngineConfig(preview=True), ruleset) == {"SY001", "SY099"}
    assert selected(EngineConfig(select=("SY",), preview=True), ruleset) == {"SY001", "SY099"}
    assert selected(EngineConfig(select=("SY098",)), ruleset) == {"SY098"}


def test_unknown_codes_warn_with_close_matches():
    sel = select_rules(ALL, EngineConfig(select=("DL01",), ignore=("SY0001", "XX")))
    assert sel.warnings[0].startswith("unknown rule code 'DL01' in select (did you mean 'DL001'")
    assert any(w.startswith("unknown rule code 'SY0001' in ignore (did you mean 'SY001'") for w in sel.warnings)
    assert any(w.startswith("unknown rule code 'XX' in ignore") for w in sel.warnings)
    # An unknown selector matches nothing and stops nothing.
    assert {r.code for r in sel.selected} == set()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_pyproject_tool_advisor(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.advisor]\nignore = ["DL", "SY002"]\nextend-select = []\n')
    script_dir = tmp_path / "src" / "train"
    script_dir.mkdir(parents=True)
    config = resolve_engine_config(start=script_dir)
    assert config.sources[0].endswith("pyproject.toml")
    assert selected(config) == STABLE - {"DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "DL007", "DL008", "SY002"}
    # The CLI beats the file.
    config = resolve_engine_config(select=("DL001",), start=script_dir)
    assert selected(config) == {"DL001"}


def test_closest_file_wins_and_pyproject_without_table_is_skipped(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.advisor]\nselect = ["CM"]\n')
    write(tmp_path / "proj" / "pyproject.toml", '[project]\nname = "x"\n')
    assert find_config_file(tmp_path / "proj") == tmp_path / "pyproject.toml"
    write(tmp_path / "proj" / "advisor.toml", 'select = ["SY001"]\n')
    assert find_config_file(tmp_path / "proj") == tmp_path / "proj" / "advisor.toml"
    assert selected(resolve_engine_config(start=tmp_path / "proj")) == {"SY001"}


def test_extend_builds_on_another_file(tmp_path):
    write(tmp_path / "base.toml", 'select = ["SY", "DL"]\npreview = false\n')
    write(tmp_path / "proj" / "advisor.toml", 'extend = "../base.toml"\nignore = ["SY002"]\n')
    config = resolve_engine_config(start=tmp_path / "proj")
    assert selected(config) == {"SY001", "DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "DL007", "DL008"}
    assert len(config.layers) == 2


def test_preview_from_config_and_cli(tmp_path):
    write(tmp_path / "advisor.toml", "preview = true\n")
    assert resolve_engine_config(start=tmp_path).preview is True
    assert resolve_engine_config(start=tmp_path, preview=False).preview is False
    assert resolve_engine_config(start=tmp_path / "nothing-here").preview is True


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[tool.advisor]\nignor = ["DL001"]\n', "unknown key 'ignor' (did you mean 'ignore'?)"),
        ('[tool.advisor]\nextend_select = ["DL001"]\n', "did you mean 'extend-select'"),
        ('[tool.advisor]\nselect = "DL001"\nignore = [1]\n', "ignore: expected a list of rule codes"),
        ("[tool.advisor]\npreview = 1\n", "preview: expected true or false"),
        ("[tool.advisor\n", "invalid TOML"),
        ('[tool.advisor]\nextend = "missing.toml"\n', "extend:"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path, text, fragment):
    write(tmp_path / "pyproject.toml", text)
    with pytest.raises(UsageError) as info:
        resolve_engine_config(start=tmp_path)
    assert fragment in str(info.value)
    assert "pyproject.toml" in str(info.value)


def test_extend_cycle(tmp_path):
    write(tmp_path / "a.toml", 'extend = "b.toml"\n')
    write(tmp_path / "b.toml", 'extend = "a.toml"\n')
    write(tmp_path / "advisor.toml", 'extend = "a.toml"\n')
    with pytest.raises(UsageError, match="cycle"):
        resolve_engine_config(start=tmp_path)


def test_unknown_code_in_config_warns_with_its_source(tmp_path):
    # NOTE: an unknown code is an error by default (tests/faults); unknown-codes = "warn" asks for a warning.
    write(tmp_path / "pyproject.toml", '[tool.advisor]\nignore = ["DL0001"]\nunknown-codes = "warn"\n')
    sel = select_rules(ALL, resolve_engine_config(start=tmp_path))
    assert len(sel.warnings) == 1
    assert sel.warnings[0].startswith("unknown rule code 'DL0001' in ignore (")
    assert "pyproject.toml" in sel.warnings[0] and "did you mean 'DL001'" in sel.warnings[0]
