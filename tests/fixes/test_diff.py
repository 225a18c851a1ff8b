"""Source diffs for kept fixes: a golden diff on a sample script, and --write with a backup."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from advisor.errors import InputError
from advisor.fixes.diff import apply_unified_diff, make_diff, transform, write_diff
from advisor.fixes.model import Trial

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "sample_train.py"

KEPT = [
    Trial("dataloader_workers", "safe", params={"num_workers": 2}),
    Trial("prefetch_factor", "safe", params={"prefetch_factor": 4}),
    Trial("persistent_workers", "safe"),
    Trial("batch_fusion", "unsafe", params={"factor": 4}),
    Trial("torch_compile", "unsafe"),
    Trial("bf16_autocast", "unsafe", params={"device_type": "cpu"}),
    Trial("fused_optimizer", "unsafe"),
    Trial("cpu_threads", "safe", params={"threads": 1}),
]


def test_golden_diff_on_the_sample_script():
    diff = make_diff(SAMPLE, KEPT)
    golden = DATA / "sample_train.diff"
    if os.environ.get("ADVISOR_UPDATE_GOLDENS"):
        golden.write_text(diff, encoding="utf-8")
    assert diff == golden.read_text(encoding="utf-8")


def test_the_diff_says_what_is_not_mechanical_and_the_result_compiles():
    diff = make_diff(SAMPLE, KEPT)
    assert diff.startswith("# advisor: not made mechanical: batch_fusion")
    new, manual = transform(SAMPLE.read_text(), KEPT)
    compile(new, "sample_train.py", "exec")
    assert "num_workers=2,  # loads in the training process" in new
    assert "model = torch.compile(model)" in new
    assert 'with torch.autocast(device_type="cpu", dtype=torch.bfloat16):' in new
    assert len(manual) == 1


def test_nothing_kept_means_an_empty_diff():
    assert make_diff(SAMPLE, []) == ""


def test_write_applies_the_diff_and_keeps_a_backup(tmp_path: Path):
    script = tmp_path / "train.py"
    shutil.copy(SAMPLE, script)
    original = script.read_text()
    diff = make_diff(script, KEPT[:3])
    backup = write_diff(script, diff)
    assert backup == tmp_path / "train.py.bak"
    assert backup.read_text() == original
    assert script.read_text() == transform(original, KEPT[:3])[0]
    # A diff made for another version of the file refuses to apply.
    with pytest.raises(InputError, match="script changed"):
        apply_unified_diff(original.replace("shuffle=True", "shuffle=False"), diff)


def test_write_from_kept_trials(tmp_path: Path):
    script = tmp_path / "train.py"
    shutil.copy(SAMPLE, script)
    write_diff(script, KEPT[:1])
    assert "num_workers=2" in script.read_text()
    assert (tmp_path / "train.py.bak").read_text() == SAMPLE.read_text()


def test_unparsable_script_is_an_input_error(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(InputError, match="cannot parse"):
        make_diff(bad, KEPT[:1])


def test_a_loader_fed_by_a_kwargs_mapping_is_left_to_the_user():
    src = "from torch.utils.data import DataLoader\nkw = {'num_workers': 0}\nDataLoader(ds, **kw)\n"
    new, manual = transform(src, KEPT[:1])
    assert new == src
    assert any("num_workers=2 in that mapping" in m for m in manual)


def test_cpu_threads_follows_the_kept_worker_count():
    kept = [Trial("dataloader_workers", "safe", params={"num_workers": 1}), Trial("cpu_threads", "safe")]
    new, manual = transform(SAMPLE.read_text(), kept)
    assert "torch.set_num_threads(max(1, torch.get_num_threads() - 1))" in new
    assert manual == []
