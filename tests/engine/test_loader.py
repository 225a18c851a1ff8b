"""Loading rule files: every problem is a RuleError naming the file and the offending key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from advisor.api import fix_vocabulary
from advisor.engine import rules as rules_mod
from advisor.engine.rules import checkout_rules_dir, load_rules, parse_rule, rules_root
from advisor.engine.ruleset import RuleSet
from advisor.errors import RuleError

REPO = Path(__file__).resolve().parents[2]
GOOD = yaml.safe_load((REPO / "rules" / "sync" / "SY001.yaml").read_text(encoding="utf-8"))


def write_rule(root: Path, data: dict | str, category: str = "sync", name: str = "SY001.yaml") -> Path:
    folder = root / category
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def assert_rule_error(root: Path, *fragments: str) -> None:
    with pytest.raises(RuleError) as info:
        load_rules(root, fixes=fix_vocabulary())
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message, "one-line message"


def test_good_rule_loads(tmp_path):
    write_rule(tmp_path, GOOD)
    ruleset = load_rules(tmp_path)
    assert ruleset.codes == ("SY001",)


def test_yaml_syntax_error(tmp_path):
    write_rule(tmp_path, "code: SY001\nwhen: [unclosed\n")
    assert_rule_error(tmp_path, "SY001.yaml", "invalid YAML", "line")


def test_condition_syntax_error(tmp_path):
    write_rule(tmp_path, {**GOOD, "when": "sync_count >"})
    assert_rule_error(tmp_path, "sync/SY001.yaml: when: syntax error")


def test_unknown_metric_names_path_key_and_suggestion(tmp_path):
    write_rule(tmp_path, {**GOOD, "when": "sync_cout >= 1"})
    assert_rule_error(tmp_path, "sync/SY001.yaml: when: unknown metric 'sync_cout' (did you mean 'sync_count'")


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("impact", "sync_wait_frac ** 2", "impact: operator Pow is not allowed"),
        ("message", "{sync_wait.__class__}", "message: field {sync_wait.__class__} is not allowed"),
        ("message", "{sync_wiat_frac}", "message: unknown metric 'sync_wiat_frac'"),
        ("category", "synk", "category: unknown category 'synk' (did you mean 'sync'"),
        ("category", "compute", "category: SY codes belong to category 'sync'"),
        ("severity", "fatal", "severity: 'fatal' is not one of info, warning, error"),
        ("status", "beta", "status: 'beta' is not one of"),
        ("name", "Sync Wait", "name: 'Sync Wait' is not a kebab-case slug"),
        ("code", "SY1", "code: 'SY1' is not a code like DL001"),
        ("code", "SY002", "code: 'SY002' does not match the file name 'SY001.yaml'"),
        ("fixes", [{"id": "pin_memory", "safety": "unsafe"}], "fixes: fix 'pin_memory' is 'safe', not 'unsafe'"),
        ("fixes", [{"id": "pin_memmory", "safety": "safe"}], "fixes: unknown fix id 'pin_memmory' (did you mean 'pin_memory'"),
        ("fixes", "pin_memory", "fixes: expected a list"),
        ("references", [], "references: at least one reference URL"),
        ("references", ["see the docs"], "references: 'see the docs' is not a URL"),
        ("locations", ["syncs"], "locations: unknown location kind 'syncs' (did you mean 'sync'"),
        ("why", "", "why: expected a non-empty string"),
        ("aliases", ["old1"], "aliases: 'old1' is not a code"),
        ("impact_basis", "guessed", "impact_basis: 'guessed' is not one of measured, bound, none"),
        ("impact_basis", "none", "impact_basis: 'none' with impact 'sync_wait_frac': use 'none' exactly when"),
    ],
)
def test_bad_values(tmp_path, key, value, fragment):
    write_rule(tmp_path, {**GOOD, key: value})
    assert_rule_error(tmp_path, "SY001.yaml", fragment)


def test_missing_key(tmp_path):
    data = {k: v for k, v in GOOD.items() if k != "impact"}
    write_rule(tmp_path, data)
    assert_rule_error(tmp_path, "sync/SY001.yaml: impact: missing required key")


def test_unknown_key_with_suggestion(tmp_path):
    write_rule(tmp_path, {**GOOD, "refrences": ["https://x.org"]})
    assert_rule_error(tmp_path, "SY001.yaml: refrences: unknown key (did you mean 'references'")


def test_file_in_wrong_category_folder(tmp_path):
    write_rule(tmp_path, GOOD, category="compute")
    assert_rule_error(tmp_path, "compute/SY001.yaml: category: 'sync' does not match the folder 'compute'")


def test_duplicate_code(tmp_path):
    write_rule(tmp_path, GOOD)
    write_rule(tmp_path, {**GOOD, "name": "other-name"}, name="SY001.yml")
    assert_rule_error(tmp_path, "code: duplicate code 'SY001'")


def test_alias_clashing_with_a_code(tmp_path):
    write_rule(tmp_path, GOOD)
    write_rule(tmp_path, {**GOOD, "code": "SY002", "name": "second", "aliases": ["SY001"]}, name="SY002.yaml")
    assert_rule_error(tmp_path, "SY002.yaml: code: duplicate code 'SY001'")


def test_duplicate_name(tmp_path):
    write_rule(tmp_path, GOOD)
    write_rule(tmp_path, {**GOOD, "code": "SY002"}, name="SY002.yaml")
    assert_rule_error(tmp_path, "SY002.yaml: name: duplicate name 'sync-wait-per-step'")


def test_top_level_not_a_mapping(tmp_path):
    write_rule(tmp_path, "- just\n- a list\n")
    assert_rule_error(tmp_path, "SY001.yaml: expected a mapping")


def test_stray_file_outside_category(tmp_path):
    (tmp_path / "SY001.yaml").write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    assert_rule_error(tmp_path, "rule files belong in a category folder")


def test_missing_or_empty_rules_folder_is_loud(tmp_path):
    assert_rule_error(tmp_path / "nowhere", "rules folder does not exist")
    assert_rule_error(tmp_path, "no rule files found")


def test_no_rules_anywhere_is_an_error_not_a_fallback(monkeypatch):
    monkeypatch.setattr(rules_mod, "checkout_rules_dir", lambda: None)
    monkeypatch.setattr(rules_mod, "packaged_rules_dir", lambda: None)
    with pytest.raises(RuleError, match="no rules folder found"):
        rules_root()


def test_checkout_rules_are_preferred():
    assert checkout_rules_dir() == REPO / "rules"
    assert Path(str(rules_root())) == REPO / "rules"


def test_aliases_select_and_explain_the_rule(tmp_path):
    write_rule(tmp_path, {**GOOD, "aliases": ["SY900"]})
    ruleset = load_rules(tmp_path)
    assert ruleset.get("SY900").code == "SY001"
    assert ruleset.get("sy001").code == "SY001"
    assert ruleset.get("sync-wait-per-step").code == "SY001"


def test_parse_rule_without_a_file():
    rule = parse_rule(dict(GOOD), path="inline")
    assert RuleSet([rule]).codes == ("SY001",)


def test_fix_ids_are_checked_against_the_vocabulary_the_caller_passes(tmp_path):
    # The engine does not import the fix catalog: without a vocabulary only the shape is checked,
    # and check_fix_refs (what api.rule_set runs) names the file and key afterwards.
    write_rule(tmp_path, {**GOOD, "fixes": [{"id": "pin_memmory", "safety": "safe"}]})
    ruleset = load_rules(tmp_path)
    with pytest.raises(RuleError, match=r"sync/SY001.yaml: fixes: unknown fix id 'pin_memmory' \(did you mean 'pin_memory'"):
        rules_mod.check_fix_refs(ruleset, fix_vocabulary())
    write_rule(tmp_path, {**GOOD, "fixes": [{"id": "pin_memory", "safety": "maybe"}]})
    assert_rule_error(tmp_path, "fixes: fix 'pin_memory': safety 'maybe' is not one of safe, unsafe")


def test_a_zero_impact_must_say_none(tmp_path):
    # A rule that claims no share cannot call it measured: the primary choice would trust it.
    write_rule(tmp_path, {**GOOD, "impact": "0", "impact_basis": "measured"})
    assert_rule_error(tmp_path, "SY001.yaml: impact_basis: 'measured' with impact '0'")
