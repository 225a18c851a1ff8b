"""Bad data a user or a file system can hand advisor: one line that says what to do, never harm.

Cases from the fault campaign: terminal control sequences in trace and file names, rule data
that would take gigabytes, a gzip bomb, rule codes that silently turn every rule off, numbers
that disable a limit, reports from other schema versions or with wrong field types, deeply
nested JSON, files that are not UTF-8, and torch's own unescaped event names.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import shutil
import tracemalloc
from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke, one_line_error
from engine.test_loader import write_rule

from advisor.errors import EXIT_USAGE, InputError, RuleError, TraceError
from advisor.report.model import REPORT_SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "report.json"
RULE = yaml.safe_load((REPO / "rules" / "sync" / "SY001.yaml").read_text(encoding="utf-8"))
CPU_TRACE = REPO / "tests" / "data" / "cpu_small" / "worker0.pt.trace.json.gz"
ESC = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"




def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def save_report(tmp_path: Path, data: dict | str, name: str = "run") -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "report.json").write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return run


# -- terminal ----------------------------------------------------------------------------------------


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_text_report_escapes_control_characters_from_traces_and_file_names(capsys, tmp_path: Path) -> None:
    data = golden()
    finding = data["findings"][0]
    finding["name"] = f"loader{ESC}"
    finding["message"] = f"slow kernel {ESC}"
    if finding["locations"]:
        finding["locations"][0]["file"] = f"train{ESC}.py"
    data["notes"] = [*data["notes"], f"note {ESC}"]
    data["run"]["script"] = f"/tmp/tr{ESC}ain.py"
    data["locations"][0]["function"] = f"fn{ESC}"
    run = save_report(tmp_path, data)
    code, out, err = invoke(capsys, "report", str(run))
    assert code in (0, 1), err
    assert not _CONTROL.search(out), "a control character reached the terminal"
    assert "\\x1b]0;owned\\x07" in out  # shown, not obeyed


def _hostile_report(tmp_path: Path) -> Path:
    """A report whose script, error, operator names and finding locations hold ESC/BEL (issue #30)."""
    data = golden()
    data["run"]["script"] = f"/tmp/esc{ESC}\x1b[31m.py"
    data["run"]["error"] = f"RuntimeError: boom {ESC}"
    for finding in data["findings"]:
        finding["message"] = f"slow op aten::{ESC}"
        for loc in finding["locations"]:
            loc["file"] = f"train{ESC}.py"
    return save_report(tmp_path, data)


@pytest.mark.parametrize("fmt", ["text", "markdown", "github"])
def test_every_terminal_format_escapes_control_characters(capsys, tmp_path: Path, fmt: str) -> None:
    """Markdown and `--format github` (its ``file=`` too) printed raw ESC/BEL; text already escaped."""
    run = _hostile_report(tmp_path)
    code, out, err = invoke(capsys, "report", "--format", fmt, str(run))
    assert code in (0, 1), err
    assert out and not _CONTROL.search(out), "a control character reached the terminal"
    assert "\\x1b]0;owned\\x07" in out  # shown, not obeyed


def test_one_line_messages_escape_line_breaks_too(capsys, tmp_path: Path) -> None:
    """A path with a newline made "run saved in ..." (and errors) two lines, the second unmarked."""
    from advisor._terminal import printable_line

    assert printable_line("/runs/a\nb\x1b]0;x\x07\tc") == "/runs/a\\x0ab\\x1b]0;x\\x07\\x09c"
    code, _, err = invoke(capsys, "report", str(tmp_path / "missing\nline"))
    assert "\\x0a" in one_line_error(code, err)


def test_error_messages_escape_control_characters_in_file_names(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "report", str(tmp_path / f"missing{ESC}"))
    line = one_line_error(code, err)
    assert not _CONTROL.search(line)


# -- rule data limits --------------------------------------------------------------------------------



def assert_rule_error(root: Path, *fragments: str) -> None:
    from advisor.engine.rules import load_rules

    with pytest.raises(RuleError) as info:
        load_rules(root)
    message = str(info.value)
    assert "SY001.yaml" in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize("spec", [">2500000000", ".2500000000f", "0>999", "x^1000"])
def test_huge_format_width_is_refused_at_load(tmp_path: Path, spec: str) -> None:
    write_rule(tmp_path, {**RULE, "message": f"value {{sync_count:{spec}}}"})
    assert_rule_error(tmp_path, "message", "larger than")


@pytest.mark.parametrize(
    ("when", "fragment"),
    [
        ('sync_count > 0 and "x" * 2500000000 == "y"', "string"),
        ("sync_count > 1e999", "out of range"),
        ("sync_count > 100000000000000000000000", "out of range"),
        (f'sync_count > 0 and "{"x" * 300}" == "y"', "string constant"),
    ],
)
def test_expensive_conditions_are_refused_at_load(tmp_path: Path, when: str, fragment: str) -> None:
    write_rule(tmp_path, {**RULE, "when": when})
    assert_rule_error(tmp_path, "when", fragment)


def test_huge_lists_in_a_rule_are_refused_at_load(tmp_path: Path) -> None:
    write_rule(tmp_path, {**RULE, "references": [f"https://example.com/{i}" for i in range(1000)]})
    assert_rule_error(tmp_path, "references", "more than")


def test_a_rule_file_that_is_not_utf8_is_a_rule_error(tmp_path: Path) -> None:
    path = write_rule(tmp_path, RULE)
    path.write_bytes(path.read_bytes().replace(b"summary:", b"summary: \xff\xfe", 1))
    assert_rule_error(tmp_path, "UTF-8")


def test_a_deeply_nested_rule_file_is_a_rule_error(tmp_path: Path) -> None:
    write_rule(tmp_path, "why: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_rule_error(tmp_path)


def test_condition_evaluation_never_repeats_strings() -> None:
    from advisor.engine.condition import parse_expression

    # NOTE: a metric value may be a string (a rank, a device name); arithmetic must not repeat it.
    expr = parse_expression("sync_count * 3", lambda name: True)
    assert expr.evaluate({"sync_count": "x" * 10}) is None
    assert expr.evaluate({"sync_count": 2}) == 6


# -- trace decompression and repair ------------------------------------------------------------------


def test_gzip_bomb_stops_at_the_cap_with_what_to_do(tmp_path: Path, monkeypatch) -> None:
    from advisor.trace import load, read

    monkeypatch.setattr(read, "MIN_GZIP_CAP", 8 << 20)
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}")
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as info:
            load.load_trace(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "gunzip" in str(info.value) and "bomb.pt.trace.json.gz" in str(info.value)
    assert peak < 32 << 20, f"decompressed {peak >> 20} MiB into memory"


def test_a_real_gzip_trace_still_loads(tmp_path: Path) -> None:
    from advisor.trace.load import load_trace

    trace = load_trace(CPU_TRACE)
    assert len(trace.events) > 0


def _kineto_lines(events: list[dict]) -> str:
    """A trace laid out as torch writes it: each event key on a line of its own."""
    lines = ['{', '  "schemaVersion": 1,', '  "traceEvents": [']
    for i, event in enumerate(events):
        lines.append("  {")
        keys = list(event)
        for j, key in enumerate(keys):
            value = event[key]
            # NOTE: torch writes names unescaped; that is the bug this reproduces.
            text = f'"{value}"' if key == "name" else json.dumps(value)
            lines.append(f'    "{key}": {text}{"," if j < len(keys) - 1 else ""}')
        lines.append("  }" + ("," if i < len(events) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def _events(names: list[str]) -> list[dict]:
    out = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for i, name in enumerate(names):
        out.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": 10 + i, "dur": 5})
    out.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 100, "dur": 5})
    return out


def test_unescaped_event_names_are_repaired_and_counted(tmp_path: Path) -> None:
    from advisor.metrics.compute import analyze_path

    names = ['torch/profiler/_cupti_monitor.py(0): ""', '/home/u/my"script.py(3): <module>', "tab\there\x01"]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(_kineto_lines(_events(names)), encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text(encoding="utf-8"))  # the file really is broken
    metrics = analyze_path(path)
    assert any("3 trace event name(s)" in note for note in metrics.notes), metrics.notes


def test_non_utf8_event_names_are_repaired(tmp_path: Path) -> None:
    from advisor.trace.load import load_trace

    text = _kineto_lines(_events(["/tmp/SCRIPTNAME.py(1): <module>"])).encode("utf-8")
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(text.replace(b"SCRIPTNAME", b"caf\xe9"))
    trace = load_trace(path)
    assert any("caf" in str(n) for n in trace.events["name"].unique())


def test_deeply_nested_trace_is_a_trace_error(tmp_path: Path) -> None:
    from advisor.trace.load import load_trace

    path = tmp_path / "deep.pt.trace.json"
    path.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(TraceError):
        load_trace(path)


# -- configuration -----------------------------------------------------------------------------------


def test_unknown_rule_code_in_select_is_an_error(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(capsys, "analyze", str(CPU_TRACE), "--select", "DL01", "--fail-on", "info")
    line = one_line_error(code, err)
    assert "unknown rule code 'DL01'" in line and "unknown-codes" in line


def test_unknown_rule_code_in_a_config_file_is_an_error_unless_asked_to_warn(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nignore = ["XX9"]\n')
    line = one_line_error(*invoke(capsys, "analyze", str(CPU_TRACE))[::2])
    assert "unknown rule code 'XX9' in ignore" in line
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nignore = ["XX9"]\nunknown-codes = "warn"\n')
    code, _, err = invoke(capsys, "analyze", str(CPU_TRACE))
    assert code in (0, 1), err
    assert "advisor: warning: unknown rule code 'XX9'" in err


def test_config_file_that_is_not_utf8_is_one_line_error(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "advisor.toml").write_bytes(b'ignore = ["\xff\xfe"]\n')
    line = one_line_error(*invoke(capsys, "analyze", str(CPU_TRACE))[::2])
    assert "UTF-8" in line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc"])
def test_timeout_must_be_a_positive_finite_number(capsys, tmp_path: Path, value: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    code, _, err = invoke(capsys, "diagnose", "--timeout", value, "--out", str(tmp_path / "run"), str(script))
    assert code == EXIT_USAGE, err
    assert "internal error" not in err
    assert not (tmp_path / "run").exists(), "nothing may run with a meaningless timeout"


def test_run_spec_refuses_nan_timeout(tmp_path: Path) -> None:
    from advisor.capture.model import RunSpec
    from advisor.capture.run import capture
    from advisor.errors import UsageError

    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    with pytest.raises(UsageError, match="timeout"):
        capture(RunSpec(script=script, out_dir=tmp_path / "run", timeout_s=float("nan")))


# -- reports from other versions, with wrong types, nested -------------------------------------------


@pytest.mark.parametrize("version", [999, REPORT_SCHEMA_VERSION + 1])
def test_report_from_a_newer_schema_is_refused_naming_the_version(capsys, tmp_path: Path, version: int) -> None:
    run = save_report(tmp_path, {**golden(), "schema_version": version})
    line = one_line_error(*invoke(capsys, "report", str(run))[::2])
    assert f"schema {version}" in line and "upgrade advisor" in line


@pytest.mark.parametrize("version", [0, -1, "2", None, True])
def test_report_with_an_impossible_schema_version_is_refused(capsys, tmp_path: Path, version: object) -> None:
    run = save_report(tmp_path, {**golden(), "schema_version": version})
    one_line_error(*invoke(capsys, "report", str(run))[::2])


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(findings=5),
        lambda d: d.update(findings=["x"]),
        lambda d: d["findings"][0].update(locations="a.py:3"),
        lambda d: d.update(steps={"a": 1}),
        lambda d: d["run"].update(steps_measured="five"),
        lambda d: d.update(notes="one note"),
        lambda d: d.update(kept_fixes=[1, 2]),
        lambda d: d.update(summary=[1]),
        lambda d: d.update(run=[]),
    ],
)
def test_report_with_wrong_field_types_is_one_line_error(capsys, tmp_path: Path, change) -> None:
    data = copy.deepcopy(golden())
    change(data)
    run = save_report(tmp_path, data)
    for fmt in ("text", "json", "markdown", "html"):
        code, _, err = invoke(capsys, "report", str(run), "--format", fmt, "-o", str(tmp_path / f"out.{fmt}"))
        one_line_error(code, err)


def test_deeply_nested_report_is_one_line_error(capsys, tmp_path: Path) -> None:
    run = save_report(tmp_path, '{"schema_version": 2, "notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(*invoke(capsys, "report", str(run))[::2])


def test_deeply_nested_capture_is_an_input_error(tmp_path: Path) -> None:
    from advisor.capture.model import RunCapture

    run = tmp_path / "run"
    run.mkdir()
    (run / "capture.json").write_text('{"schema_version": 1, "notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError):
        RunCapture.load(run)


def test_compare_with_a_broken_report_is_one_line_error(capsys, tmp_path: Path) -> None:
    good = save_report(tmp_path, golden(), "good")
    bad = save_report(tmp_path, {**golden(), "findings": {"x": 1}}, "bad")
    one_line_error(*invoke(capsys, "compare", str(good), str(bad))[::2])


def test_runs_lists_a_broken_report_without_failing(capsys, tmp_path: Path) -> None:
    save_report(tmp_path, golden(), "good")
    save_report(tmp_path, {**golden(), "findings": 5}, "bad")
    shutil.copyfile(GOLDEN, tmp_path / "good" / "report.json")
    code, out, err = invoke(capsys, "runs", str(tmp_path))
    assert code == 0, err
    assert "bad" in out and "good" in out


# -- script names ------------------------------------------------------------------------------------


def test_script_name_that_is_not_utf8_is_one_line_error_before_anything_runs(capsys, tmp_path: Path) -> None:
    import os

    script = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9\x1b[2J.py"))
    script.write_text("x = 1\n")
    line = one_line_error(*invoke(capsys, "diagnose", "--out", str(tmp_path / "run"), str(script))[::2])
    assert "UTF-8" in line and not _CONTROL.search(line)
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_script_name_with_a_quote_is_diagnosed(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / 'my"train.py'
    shutil.copyfile(REPO / "tests" / "scripts" / "train_loop.py", script)
    done = subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", "--no-fixes", "-q", "--warmup", "1", "--steps", "3",
         "--profile-steps", "2", "--format", "json", "--out", str(tmp_path / "run"), str(script), "--steps", "20"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["run"]["status"] == "stopped"
    assert any("re-escaped" in note for note in report["notes"])


def test_raw_control_characters_in_any_string_field_are_read_not_called_truncated(tmp_path: Path) -> None:
    """torch writes a run folder named after ``esc\\e]0;PWNED\\a\\e[31m.py`` raw into ``traceName`` (issue #30)."""
    from advisor.report.tensorboard_logdir import read_trace_json
    from advisor.trace.load import load_trace

    text = _kineto_lines(_events([]))
    bad = "/runs/esc\x1b]0;PWNED\x07\x1b[31m-1/traces/t.pt.trace.json"
    text = text[: text.rindex("]")] + f'],"traceName": "{bad}" }}\n'  # as torch lays out its last line
    path = tmp_path / "t.pt.trace.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the file really is invalid JSON
    trace = load_trace(path)
    assert "ProfilerStep#1" in set(trace.events["name"])
    assert read_trace_json(path)["traceName"] == bad  # the TensorBoard and Perfetto copies read it too


@pytest.mark.parametrize("argv", [("rules",), ("rules", "--format", "markdown"), ("rule", "SY001"), ("rule", "--all")])
def test_rule_text_with_control_characters_is_escaped_in_every_listing(capsys, tmp_path: Path, monkeypatch, argv) -> None:  # type: ignore[no-untyped-def]
    """`advisor rules --format markdown` printed a rule's raw ESC/BEL (issue #30 campaign)."""
    from advisor.engine.rules import load_rules

    write_rule(tmp_path, {**RULE, "summary": f"summary {ESC}", "why": f"why {ESC}", "message": f"msg {ESC} {{sync_count}}"})
    monkeypatch.setattr("advisor.cli.cmd_rules._ruleset", lambda: load_rules(tmp_path))
    code, out, err = invoke(capsys, *argv)
    assert code == 0, err
    assert out and not _CONTROL.search(out), "a control character reached the terminal"


def test_the_misplaced_option_note_escapes_the_script_name(capsys, tmp_path: Path) -> None:
    """"note: --steps comes after <name>" printed the script name's raw ESC/BEL (issue #30 campaign)."""
    import os

    script = Path(os.fsdecode(bytes(tmp_path) + b"/tl\x1b]0;PWN\x07.py"))
    script.write_text("x = 1\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep").write_text("not a run: refused after the note, before anything runs")
    code, _, err = invoke(capsys, "diagnose", "--out", str(tmp_path / "run"), str(script), "--steps", "3")
    assert code == 2 and "comes after" in err, err
    assert not _CONTROL.search(err), err


def test_config_warnings_escape_the_config_path(capsys, tmp_path: Path, monkeypatch) -> None:
    import os

    folder = Path(os.fsdecode(bytes(tmp_path) + b"/d\x1b]0;PWN\x07"))
    folder.mkdir()
    (folder / "advisor.toml").write_text('select = ["XX9"]\nunknown-codes = "warn"\n')
    monkeypatch.chdir(folder)
    code, _, err = invoke(capsys, "config")
    assert "warning" in err and not _CONTROL.search(err), err
