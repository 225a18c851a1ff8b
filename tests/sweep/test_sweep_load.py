"""A saved sweep renders again without running anything (``advisor sweep --load``), and bad files fail clearly."""

from __future__ import annotations

import json

import pytest
from cli_helpers import invoke, one_line_error
from sweep_fakes import MemoryRunner

from advisor import api
from advisor.capture.model import RunSpec
from advisor.errors import InputError
from advisor.sweep.model import SWEEP_SCHEMA_VERSION, load_table
from advisor.sweep.render import RENDERERS


@pytest.fixture
def saved(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    spec = RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2)
    table = api.sweep_script(spec, [8, 16], ["fp32", "bf16"], repeats=2, runner=MemoryRunner(), accumulations=[1, 2])
    return tmp_path / "run", table


def test_a_saved_sweep_loads_as_it_was_written(saved):
    run_dir, table = saved
    loaded = load_table(run_dir)
    assert loaded == table
    for render in RENDERERS.values():
        assert render(loaded) == render(table)


def test_sweep_load_renders_html_to_a_file(capsys, saved, tmp_path):
    run_dir, _ = saved
    code, out, err = invoke(capsys, "sweep", "--load", str(run_dir / "sweep.json"), "-o", str(tmp_path / "s.html"))
    assert code == 0 and out == "" and "wrote" in err
    assert (tmp_path / "s.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(("content", "message"), [
    (None, "no sweep.json in"),
    ("{not json", "cannot read"),
    ('{"schema_version": 1}', "is not an advisor sweep"),
    (json.dumps({"schema_version": SWEEP_SCHEMA_VERSION + 1, "results": []}), "newer than this advisor reads"),
    (json.dumps({"schema_version": 2, "results": "many"}), "re-create it with advisor sweep"),
])
def test_a_bad_saved_sweep_is_one_clear_error(capsys, tmp_path, content, message):
    if content is not None:
        (tmp_path / "sweep.json").write_text(content)
    with pytest.raises(InputError, match=message):
        load_table(tmp_path)
    code, _, err = invoke(capsys, "sweep", "--load", str(tmp_path))
    assert message in one_line_error(code, err)


def test_load_takes_no_script_and_a_run_needs_batch_sizes(capsys, saved, tmp_path):
    run_dir, _ = saved
    assert "takes no SCRIPT" in one_line_error(*invoke(capsys, "sweep", "--load", str(run_dir), str(tmp_path / "train.py"))[::2])
    assert "give --batch-sizes and SCRIPT" in one_line_error(*invoke(capsys, "sweep", str(tmp_path / "train.py"))[::2])
    # options typed after the script went to the script, and the error said --batch-sizes was missing
    late = one_line_error(*invoke(capsys, "sweep", str(tmp_path / "train.py"), "--lr", "1", "--batch-sizes=2")[::2])
    assert "--batch-sizes came after SCRIPT, so it was passed to the script" in late and "--lr" not in late
    both = one_line_error(*invoke(capsys, "sweep", str(tmp_path / "train.py"), "--sizes", "16", "--batch-sizes", "2")[::2])
    assert "--sizes, --batch-sizes came after SCRIPT, so they were passed" in both


@pytest.mark.parametrize("name", ["sweep.json", "sweep.diff"])
def test_output_never_overwrites_a_sweeps_own_files(capsys, saved, name):
    run_dir, _ = saved
    before = (run_dir / "sweep.json").read_text()
    code, _, err = invoke(capsys, "sweep", "--load", str(run_dir), "--format", "text", "-o", str(run_dir / name))
    assert "would overwrite" in one_line_error(code, err)
    assert (run_dir / "sweep.json").read_text() == before


def test_a_sweep_where_no_cell_could_run_exits_3(capsys, tmp_path, monkeypatch):
    """Every cell over the memory budget (the plain run fits): the table is still written, but it is not a success (issue #30)."""
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    real = api.sweep_script

    def every_cell_oom(spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        return real(spec, *args, runner=MemoryRunner(budget=400 * 2**20), **{k: v for k, v in kwargs.items() if k != "runner"})

    monkeypatch.setattr(api, "sweep_script", every_cell_oom)
    code, out, err = invoke(capsys, "sweep", "--batch-sizes", "16,32", "-q", "--format", "json",
                            "--out", str(tmp_path / "run"), str(script))
    assert out, err
    assert json.loads(out)["recommended"] is None  # the table still comes out
    line = one_line_error(code, err, exit_code=3)
    assert "no cell of the sweep could run (4 out_of_memory)" in line
