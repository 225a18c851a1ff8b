"""advisor sweep: the HTML page, progress events, and an interrupted sweep that keeps its finished cells."""

from __future__ import annotations

import json
import re

import pytest
from sweep_fakes import MemoryRunner

from advisor import api
from advisor.capture.model import RunSpec
from advisor.errors import EXIT_INTERRUPTED, Interrupted
from advisor.sweep.model import Cell, CellResult, CellStatus, SweepTable
from advisor.sweep.render import render_html
from advisor.sweep.run import parse_cells, run_sweep


def _spec(tmp_path) -> RunSpec:
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    return RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2)


def test_the_html_page_plots_throughput_and_memory_and_escapes_the_script(tmp_path):
    table = run_sweep(_spec(tmp_path), parse_cells([8, 16, 64], ["fp32", "bf16"]), repeats=2,
                      runner=MemoryRunner(budget=600 * 2**20))
    hostile = SweepTable(**{**table.__dict__, "script": "<img src=x onerror=alert(1)>.py",
                            "notes": ("</script><b>note</b>",)})
    page = render_html(hostile)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;.py" in page
    assert "<b>note</b>" not in page
    svg = page[page.index("<svg"):page.index("</svg>")]
    # one solid throughput line and one dashed memory line per precision, a cross per out-of-memory cell
    assert svg.count('stroke-dasharray="5 4"') == 2 and svg.count("<polyline") == 4
    assert svg.count(">×<title>") == 2 and "out_of_memory" in svg
    assert "samples/s (solid)" in svg and "peak memory, MiB (dashed)" in svg
    assert not re.search(r"<script[^>]*\ssrc=", page)  # nothing loaded from elsewhere
    assert "★" in page and "Recommended change" in page


def test_progress_counts_never_go_backwards_and_carry_an_eta(tmp_path):
    events = []
    run_sweep(_spec(tmp_path), parse_cells([8, 16, 64], ["fp32"]), repeats=3,
              runner=MemoryRunner(budget=600 * 2**20), progress=events.append)
    done = [e.run for e in events]
    assert done == sorted(done) and done[-1] == 1 + 2 * 3 - 1 + 1  # probe + 2 fitting cells x 3 - reuse + 1 OOM run
    finished = [e for e in events if not e.started]
    assert all(e.run <= e.runs_total for e in events)
    assert finished[-1].run == finished[-1].runs_total and finished[-1].eta_s == 0
    # ETA: the runs left times the median run (1 s in the fake); the OOM cell's runs leave the plan
    assert all(e.eta_s == e.runs_total - e.run for e in finished)
    assert "out_of_memory" in next(e.line() for e in finished if e.cell == "bs64-fp32")
    assert events[0].line() == "[run 1/9] probe (the script as it is) 1/1: running"  # before the plan is known
    assert re.match(r"\[run 2/\d+\] bs\d+-fp32 \d/3: running", events[2].line())


def test_an_interrupted_sweep_saves_its_finished_cells_and_exits_130(tmp_path):
    runner = MemoryRunner(stop_at=4)  # Ctrl-C during the 4th run: the probe and 2 cell runs finished
    spec = _spec(tmp_path)
    with pytest.raises(Interrupted, match="3 finished cell") as info:
        api.sweep_script(spec, [8, 16], ["fp32", "bf16"], repeats=1, runner=runner)
    assert info.value.exit_code == EXIT_INTERRUPTED == 130
    data = json.loads((tmp_path / "run" / "sweep.json").read_text())
    assert data["status"] == "interrupted"
    status = {(r["cell"]["batch_size"], r["cell"]["precision"]): r["status"] for r in data["results"]}
    # probe = bs8-fp32's run, then bs8-bf16, bs16-fp32; bs16-bf16 was in flight
    assert status == {(8, "fp32"): "ok", (8, "bf16"): "ok", (16, "fp32"): "ok", (16, "bf16"): "not_run"}
    assert all(r["samples_per_s"] for r in data["results"] if r["status"] == "ok")


def test_a_sweep_saves_its_table_after_every_run(tmp_path):
    seen = []

    def runner(spec):
        path = tmp_path / "run" / "sweep.json"
        if path.exists():
            seen.append(json.loads(path.read_text())["status"])
        return MemoryRunner()(spec)

    table = api.sweep_script(_spec(tmp_path), [8, 16], ["fp32"], repeats=1, runner=runner)
    assert seen and set(seen) == {"running"}
    assert json.loads((tmp_path / "run" / "sweep.json").read_text())["status"] == "complete"
    assert table.recommended is not None


def test_an_unfinished_cell_is_marked_and_never_recommended():
    row = CellResult(cell=Cell(8), samples_per_s=10.0, repeats=1, unfinished=True)
    table = SweepTable(script="t.py", results=(row,), reference=Cell(8))
    assert "unfinished: 1 run" in render_html(table)
    assert row.status == CellStatus.OK
