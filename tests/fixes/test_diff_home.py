"""A launcher script's diff goes to the local module that holds its training code."""

from __future__ import annotations

from pathlib import Path

from advisor.fixes.diff import make_diff, transform, write_diff
from advisor.fixes.diff_home import local_imports, training_file
from advisor.fixes.model import Trial

TRAIN = '''import torch
from torch.utils.data import DataLoader


def main(argv):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(list(range(8)), batch_size=2)
    for x in loader:
        opt.step()
'''
LAUNCHER = '''"""Runs train with a config."""

from __future__ import annotations

import sys

import train

train.main(["--layers", "6", *sys.argv[1:]])
'''


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    return tmp_path / "launch.py"


def test_the_diff_of_a_launcher_changes_the_module_it_imports(tmp_path: Path):
    script = _tree(tmp_path)
    assert training_file(script) == tmp_path / "train.py"
    diff = make_diff(script, [Trial("fused_optimizer", "unsafe"), Trial("pin_memory", "safe")], root=tmp_path)
    assert "the training code is in train.py, which launch.py imports" in diff
    assert "--- a/train.py" in diff and "fused=True" in diff and "pin_memory=True" in diff
    backup = write_diff(script, diff)
    assert backup.name.startswith("train.py.bak") and backup.read_text() == TRAIN
    assert "fused=True" in (tmp_path / "train.py").read_text()
    assert script.read_text() == LAUNCHER  # the launcher is left as it was


def test_a_script_with_its_own_training_code_keeps_its_diff(tmp_path: Path):
    (tmp_path / "train.py").write_text(TRAIN)
    script = tmp_path / "main.py"
    script.write_text("import train\n" + TRAIN)
    assert training_file(script) == script
    assert "--- a/main.py" in make_diff(script, [Trial("fused_optimizer", "unsafe")], root=tmp_path)


def test_only_files_beside_the_script_count_as_local(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("x = 1\n")
    source = "import os\nimport helpers\nfrom . import train\nfrom torch import nn\nimport missing\n"
    (tmp_path / "train.py").write_text(TRAIN)
    assert local_imports(source, tmp_path) == [tmp_path / "helpers.py", tmp_path / "train.py"]
    assert local_imports("this is not python(", tmp_path) == []


def test_without_local_training_code_the_script_stays_the_target(tmp_path: Path):
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER)
    (tmp_path / "train.py").write_text("def main(argv):\n    pass\n")
    assert training_file(script) == script


def test_an_added_torch_import_goes_after_the_docstring_and_future_imports():
    new, _ = transform(LAUNCHER, [Trial("tf32", "unsafe")])
    compile(new, "launch.py", "exec")  # a __future__ import after `import torch` would not compile
    lines = new.splitlines()
    assert lines[0].startswith('"""') and lines.index("import torch") > lines.index("from __future__ import annotations")


SCHEDULED = """\
import torch
from torch import optim

model = torch.nn.Linear(4, 1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=100)
swa = optim.swa_utils.AveragedModel(model)
rms = optim.RMSprop(model.parameters())
own = torch.optim.SGD(model.parameters(), foreach=False)
"""


def test_fused_goes_on_optimizers_only_and_foreach_where_fused_is_not_taken(tmp_path: Path):
    # a scheduler once got fused=True: the diff that advisor verify then ran died with a TypeError
    script = tmp_path / "train.py"
    script.write_text(SCHEDULED)
    diff = make_diff(script, [Trial("fused_optimizer", "unsafe")], root=tmp_path)
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == [
        "+opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)",
        "+rms = optim.RMSprop(model.parameters(), foreach=True)",
    ]
