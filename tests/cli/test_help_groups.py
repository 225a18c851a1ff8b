"""``--help`` that a new user can read, and commands that point to each other (issue #32)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from advisor.cli.main import cli


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_diagnose_help_is_grouped_with_multi_node_apart() -> None:
    text = _help("diagnose")
    titles = re.findall(r"^(\S[^:\n]*):$", text, flags=re.M)
    assert titles[:6] == [
        "Everyday", "Fix loop", "Capture phases", "Distributed (torchrun, several nodes)", "Output", "Rule selection",
    ], titles
    assert "Other options" not in titles  # every option is in a section
    everyday = text[text.index("Everyday:"):text.index("Fix loop:")]
    assert "--no-fixes" in everyday and "--rdzv-endpoint" not in everyday
    distributed = text[text.index("Distributed"):text.index("Output:")]
    assert "--rdzv-endpoint" in distributed and "--nnodes" in distributed


def test_an_option_no_section_names_is_still_listed() -> None:
    import click

    from advisor.cli.grouped_help import grouped

    @click.command(cls=grouped(click.Command, (("Everyday", ("a",)),)))
    @click.option("--a")
    @click.option("--b")
    def cmd(a: str, b: str) -> None:
        """Test command."""

    out = CliRunner().invoke(cmd, ["--help"]).output
    assert "Everyday:" in out and "Other options:" in out and "--b" in out


def test_fix_points_to_the_fix_list() -> None:
    text = " ".join(_help("diagnose").split())
    assert "--fix ID Try only this fix (repeatable); `advisor fixes` lists the ids" in text


def test_compare_output_does_not_promise_sarif() -> None:
    text = _help("compare")
    assert ".sarif" not in text and "sarif" not in text


def test_config_shows_every_diagnose_key(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["config", "--format", "json"])
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output)["settings"]
    for key, value in (("steps", 20), ("repeats", 3), ("warmup", 5), ("unsafe-fixes", False), ("budget", None)):
        assert settings[key]["value"] == value and settings[key]["default"], key
    assert "select" in settings  # the selection keys stay
