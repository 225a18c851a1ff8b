"""``advisor rules`` and ``advisor rule CODE`` through Click's CliRunner and the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from advisor.cli.cmd_rules import rule, rules
from advisor.cli.main import cli
from advisor.engine.rules import default_rules
from advisor.errors import EXIT_USAGE

CODES = default_rules().codes


def invoke(args, exit_code=0):
    result = CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=True)
    if exit_code == 0:
        assert result.exception is None, result.output
    return result


def test_rules_table_lists_every_rule():
    result = invoke(["rules"])
    lines = result.output.strip().splitlines()
    assert lines[0].split() == ["code", "name", "category", "severity", "fixes"]
    assert [line.split()[0] for line in lines[1:]] == list(CODES)
    assert "pin_memory (safe)" in result.output


def test_rules_json():
    data = json.loads(invoke(["rules", "--format", "json"]).output)
    assert [row["code"] for row in data] == list(CODES)
    dl = next(row for row in data if row["code"] == "DL001")
    assert dl["category"] == "data_loading" and {"id": "dataloader_workers", "safety": "safe"} in dl["fixes"]


def test_rule_explains_in_ruffs_order():
    out = invoke(["rule", "hd001"]).output
    headings = ["# pageable-host-to-device-copy (HD001)", "## What it detects", "## Why it matters",
                "## Example", "Instead:", "## Fix and its safety", "## References"]
    positions = [out.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "`pin_memory` (safe" in out and "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html" in out


def test_rule_without_fix_says_so():
    assert "No automatic fix" in invoke(["rule", "CO003"]).output


def test_rule_by_name():
    assert "(SK001)" in invoke(["rule", "launch-bound-gpu"]).output


def test_rule_all_json():
    data = json.loads(invoke(["rule", "--all", "--format", "json"]).output)
    assert [d["code"] for d in data] == list(CODES)
    assert all(d["why"] and d["example"] and d["instead"] and d["references"] for d in data)
    one = json.loads(invoke(["rule", "CM002", "--format", "json"]).output)
    assert one["when"] == "rank_count >= 2 and straggler_ratio >= 1.2 and straggler_wait_frac >= 0.1"


def test_unknown_code_suggests_close_matches():
    result = CliRunner().invoke(rule, ["DL01"])
    assert result.exit_code != 0
    assert "unknown rule code 'DL01' (did you mean 'DL001'" in str(result.exception)


def test_rule_needs_a_code_or_all():
    assert CliRunner().invoke(rule, []).exit_code != 0
    assert CliRunner().invoke(rule, ["DL001", "--all"]).exit_code != 0


def test_direct_command_objects():
    assert CliRunner().invoke(rules, []).exit_code == 0


@pytest.mark.e2e
def test_entry_point_maps_errors_to_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "advisor", "rule", "SY002"], capture_output=True, text=True)
    assert ok.returncode == 0 and "## Why it matters" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "advisor", "rule", "SY0002"], capture_output=True, text=True)
    assert bad.returncode == EXIT_USAGE
    assert bad.stdout == ""
    err = bad.stderr.strip()
    assert err.startswith("advisor: error: unknown rule code 'SY0002' (did you mean 'SY002'")
    assert err.endswith("`advisor rules` lists them all") and "\n" not in err
