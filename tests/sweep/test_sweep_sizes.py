"""advisor sweep's input-size axis: the script's own size option on a new command line, elements/s, OOM cells."""

from __future__ import annotations

import json
import textwrap

import pytest
from sweep_fakes import MemoryRunner

from advisor.capture.model import RunSpec
from advisor.capture.records import ScriptOption
from advisor.errors import UsageError
from advisor.sweep.model import Cell, CellStatus
from advisor.sweep.plan import RUNTIME_SIZE, elements
from advisor.sweep.render import RENDERERS, header, rows
from advisor.sweep.run import parse_cells, run_sweep
from advisor.sweep.spatial import SPATIAL_SIZE

PATCH = ScriptOption(name="patch_size", value=16, flag="--patch-size")
SCRIPT = textwrap.dedent("""\
    import argparse
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    p = argparse.ArgumentParser()
    p.add_argument("--patch-size", type=int, default=16)
    args = p.parse_args()
    data = TensorDataset(torch.randn(64, 1, args.patch_size), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8)
""")


def _spec(tmp_path, **kw):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2, cwd=tmp_path, **kw)


def test_sizes_are_the_outermost_axis_of_the_cells():
    cells = parse_cells([16, 8], ["fp32"], [1], [32, 16])
    assert cells == [Cell(8, "fp32", 1, 16), Cell(16, "fp32", 1, 16), Cell(8, "fp32", 1, 32), Cell(16, "fp32", 1, 32)]
    assert cells[2].label == "size32-bs8-fp32" and Cell(8).label == "bs8-fp32"
    with pytest.raises(UsageError, match="--sizes values must be 1 or more"):
        parse_cells([8], ["fp32"], [1], [0])


@pytest.mark.parametrize(("shape", "integer", "expected"), [
    ([2, 1, 16, 24, 32], False, (16 * 24 * 32, "voxel")),
    ([2, 3, 64, 48], False, (64 * 48, "pixel")),
    ([4, 128], True, (128, "token")),
    ([4, 10], False, (10, "element")),
    ([4], False, (None, "")),
])
def test_a_samples_elements_exclude_the_batch_and_the_channels(shape, integer, expected):
    assert elements(shape, integer) == expected


def test_a_size_sweep_sets_the_scripts_own_option_and_marks_cells_over_the_budget(tmp_path):
    runner = MemoryRunner(budget=(300 + 64 + 40) * 2**20, options=(PATCH,))
    spec = _spec(tmp_path, args=("--lr", "0.1"))
    table = run_sweep(spec, parse_cells([8], ["fp32"], [1], [16, 32, 64]), repeats=2, runner=runner)
    by = {r.cell.size: r for r in table.results}
    # 16 is the script's own: the plain run is its first repeat; 32 and 64 run with the option set
    sized = [s.args for s in runner.calls if "--patch-size" in s.args]
    assert sorted(set(sized)) == [("--lr", "0.1", "--patch-size", "32"), ("--lr", "0.1", "--patch-size", "64")]
    assert by[16].status == by[32].status == CellStatus.OK and by[16].repeats == by[32].repeats == 2
    assert by[64].status == CellStatus.OOM and sized.count(("--lr", "0.1", "--patch-size", "64")) == 1
    # memory and voxels/s follow the size
    assert by[32].peak_memory_bytes - by[16].peak_memory_bytes == 16 * 2**20
    assert by[32].elements_per_sample == 32**3 and by[32].element_unit == "voxel"
    assert by[32].elements_per_s == pytest.approx(32**3 * by[32].samples_per_s)
    assert table.size_option == "--patch-size" and table.script_size == 16
    assert table.recommended == Cell(8, "fp32", 1, 16)  # only the script's own size is recommended
    cols = header(table)
    assert cols[0] == "size" and "voxels/s" in cols
    row = dict(zip(cols, rows(table)[2], strict=True))
    assert row["size"] == "64" and row["status"].startswith("out_of_memory") and row["voxels/s"] == "—"
    for fmt in ("text", "markdown", "html"):
        text = RENDERERS[fmt](table)
        assert "voxels/s" in text and "out_of_memory" in text, fmt
    data = json.loads(RENDERERS["json"](table))
    assert data["results"][1]["cell"]["size"] == 32 and data["size_option"] == "--patch-size"


def test_size_and_accumulation_share_one_command_line(tmp_path):
    accum = ScriptOption(name="accum", value=1, flag="--accum")
    runner = MemoryRunner(options=(PATCH, accum))
    spec = _spec(tmp_path)
    run_sweep(spec, [Cell(8, "fp32", 2, 32)], repeats=1, runner=runner)
    cell = runner.calls[-1]
    assert cell.args == ("--patch-size", "32", "--accum", "2")
    changes = [f.params["changes"] for f in cell.fixes if f.id == "script_args"]
    assert changes == [{"patch_size": 32, "accum": 2}]


def test_a_script_without_a_size_option_gets_its_monai_crops_resized_at_run_time(tmp_path):
    runner = MemoryRunner()
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32"], [1], [16, 32]), repeats=1, runner=runner)
    asked = [f.params["size"] for s in runner.calls for f in s.fixes if f.id == SPATIAL_SIZE]
    assert asked == [16, 32] and all(s.args == () for s in runner.calls)
    assert {r.status for r in table.results} == {CellStatus.OK}
    assert table.size_option == RUNTIME_SIZE and table.script_size is None
    assert table.recommended is None  # the script's own size is not known: no size is recommended over another
    text = RENDERERS["text"](table)
    assert "the MONAI crop size (set at run time), every positive side" in text
    assert "recommended: none (the script's own input size is not known" in text


def test_a_named_size_option_the_script_lacks_marks_the_cells_not_applied(tmp_path):
    runner = MemoryRunner(options=(PATCH,))
    table = run_sweep(_spec(tmp_path), [Cell(8, "fp32", 1, 12)], repeats=1, runner=runner, size_name="crop")
    assert table.results[0].status == CellStatus.NOT_APPLIED and "no option called --crop" in table.results[0].reason
    assert len(runner.calls) == 1  # the plain run only


def test_a_named_size_option_is_the_one_set(tmp_path):
    crop = ScriptOption(name="crop", value=8, flag="--crop")
    runner = MemoryRunner(options=(PATCH, crop))
    table = run_sweep(_spec(tmp_path), [Cell(8, "fp32", 1, 12)], repeats=1, runner=runner, size_name="crop")
    assert runner.calls[-1].args == ("--crop", "12") and table.size_option == "--crop"


def test_the_crop_is_swept_before_the_stored_volumes_side():
    from advisor.capture.model import ScriptConfig
    from advisor.fixes.fix import FixContext
    from advisor.sweep.plan import size_option

    # examples/monai_segmentation.py: --size (the stored volumes) and --roi (the crop the network sees)
    options = (ScriptOption(name="size", value=40, flag="--size"), ScriptOption(name="roi", value=32, flag="--roi"))
    ctx = FixContext(script_config=ScriptConfig(options=options))
    assert size_option(ctx).name == "roi" and size_option(ctx, "size").name == "size"
    assert size_option(FixContext(script_config=ScriptConfig(options=options[:1]))).name == "size"
    assert size_option(ctx, "patch-size") is None
