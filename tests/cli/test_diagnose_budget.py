"""``--budget``, ``--exhaustive`` and ``advisor sweep``'s options reach the api, and bad values are usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import invoke

import advisor.api as api


class Stop(Exception):
    """Raised by the fake api call: the test only looks at what the CLI passed."""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('train')\n")
    return path


def test_budget_and_exhaustive_reach_the_fix_options(capsys, monkeypatch, script, tmp_path):
    seen = {}

    def fake(spec, *, fix_options, **kwargs):
        seen["options"] = fix_options
        raise Stop

    monkeypatch.setattr(api, "diagnose_script", fake)
    invoke(capsys, "diagnose", "--out", str(tmp_path / "run"), "--budget", "90", "--exhaustive", str(script))
    assert seen["options"].budget_s == 90.0 and seen["options"].exhaustive


@pytest.mark.parametrize("value", ["0", "-5", "nan", "soon"])
def test_a_bad_budget_is_a_usage_error(capsys, script, value):
    code, _, err = invoke(capsys, "diagnose", "--budget", value, str(script))
    assert code == 2 and "--budget" in err


@pytest.mark.parametrize("value", ["0", "lots", "3XB"])
def test_a_bad_memory_budget_is_a_usage_error(capsys, script, value):
    code, _, err = invoke(capsys, "sweep", "--batch-sizes", "8", "--memory-budget", value, str(script))
    assert code == 2 and "--memory-budget" in err


def test_sizes_parse_with_binary_units():
    from advisor.cli.options import ByteSize

    size = ByteSize()
    assert size.convert("2GB", None, None) == 2 * 2**30
    assert size.convert("512MiB", None, None) == 512 * 2**20
    assert size.convert("1.5g", None, None) == int(1.5 * 2**30)
    assert size.convert("4096", None, None) == 4096


def test_sweep_accumulation_and_format_reach_the_api(capsys, monkeypatch, script, tmp_path):
    seen = {}

    def fake(spec, batches, precisions, repeats, progress, accumulations, cold_start=False, sizes=(None,),
             size_option=None):
        seen.update(batches=batches, precisions=precisions, accumulations=accumulations, cold_start=cold_start,
                    sizes=sizes, size_option=size_option)
        raise Stop

    monkeypatch.setattr(api, "sweep_script", fake)
    invoke(capsys, "sweep", "--batch-sizes", "8,32", "--accumulation", "1,4", "-q", "-o", str(tmp_path / "s.html"),
           str(script))
    assert seen == {"batches": [8, 32], "precisions": ["fp32", "bf16"], "accumulations": [1, 4], "cold_start": False,
                    "sizes": [None], "size_option": None}
    invoke(capsys, "sweep", "--batch-sizes", "8", "--cold-start", "-q", str(script))
    assert seen["cold_start"] is True
    invoke(capsys, "sweep", "--batch-sizes", "8", "--sizes", "64,32", "--size-option", "roi", "-q", str(script))
    assert seen["sizes"] == [64, 32] and seen["size_option"] == "roi"


def test_a_size_option_without_sizes_is_a_usage_error(capsys, script):
    code, _, err = invoke(capsys, "sweep", "--batch-sizes", "8", "--size-option", "roi", str(script))
    assert code == 2 and "give --sizes too" in err


def test_a_bad_accumulation_is_a_usage_error(capsys, script):
    code, _, err = invoke(capsys, "sweep", "--batch-sizes", "8", "--accumulation", "two", str(script))
    assert code == 2 and "--accumulation takes whole numbers" in err


def test_the_sweep_format_follows_the_output_extension_and_fails_before_any_run(tmp_path):
    from advisor.errors import UsageError

    assert [api.sweep_format(None, tmp_path / p) for p in ("s.html", "s.md", "s.json", "s.txt")] == [
        "html", "markdown", "json", "text"]
    assert api.sweep_format(None, None) == "text" and api.sweep_format("json", tmp_path / "s.md") == "json"
    with pytest.raises(UsageError, match=r"cannot tell the format .*\(text, markdown, json, html\)"):
        api.sweep_format(None, tmp_path / "s.docx")
    with pytest.raises(UsageError, match="advisor sweep writes"):
        api.sweep_format("sarif", None)


def test_diagnose_memory_budget_reaches_the_run_spec(capsys, monkeypatch, script, tmp_path):
    seen = {}

    def fake(spec, **kwargs):
        seen["spec"] = spec
        raise Stop

    monkeypatch.setattr(api, "diagnose_script", fake)
    invoke(capsys, "diagnose", "--out", str(tmp_path / "run"), "--memory-budget", "600MB", str(script))
    assert seen["spec"].memory_budget_bytes == 600 * 2**20
    code, _, err = invoke(capsys, "diagnose", "--memory-budget", "lots", str(script))
    assert code == 2 and "--memory-budget" in err
