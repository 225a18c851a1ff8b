"""Source diffs for kept fixes: a golden diff on a sample script, and --write with a backup."""

from __future__ import annotations

import os
import shutil
import subprocess
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
    # root=DATA: the golden's paths do not depend on where the checkout lies.
    diff = make_diff(SAMPLE, KEPT, root=DATA)
    golden = DATA / "sample_train.diff"
    if os.environ.get("ADVISOR_UPDATE_GOLDENS"):
        golden.write_text(diff, encoding="utf-8")
    assert diff == golden.read_text(encoding="utf-8")


def test_the_diff_says_what_is_not_mechanical_and_the_result_compiles():
    diff = make_diff(SAMPLE, KEPT, root=DATA)
    assert diff.startswith("# advisor: not made mechanical: batch_fusion")
    new, manual = transform(SAMPLE.read_text(), KEPT)
    compile(new, "sample_train.py", "exec")
    assert "num_workers=2,  # loads in the training process" in new
    assert "model.compile()" in new
    assert 'with torch.autocast(device_type="cpu", dtype=torch.bfloat16):' in new
    assert len(manual) == 1


def test_nothing_kept_means_an_empty_diff():
    assert make_diff(SAMPLE, []) == ""


@pytest.mark.e2e
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


def test_a_loader_fed_by_a_kwargs_mapping_gets_the_setting_where_the_mapping_is_built():
    src = "from torch.utils.data import DataLoader\nkw = {'num_workers': 0}\nDataLoader(ds, **kw)\n"
    new, manual = transform(src, KEPT[:1])
    assert new == src.replace("{'num_workers': 0}", "{'num_workers': 2}") and not manual


def test_one_dict_call_feeding_two_loaders_takes_the_new_keys_once():
    """The spawn-started script: ``kw = dict(...)`` for a training and an evaluation loader."""
    src = ("from torch.utils.data import DataLoader\n"
           "kw = dict(batch_size=64, num_workers=args.workers)\n"
           "train = DataLoader(tr, shuffle=True, **kw)\nval = DataLoader(va, **kw)\n")
    kept = [Trial("persistent_workers", "safe", params={})]
    new, manual = transform(src, kept)
    assert "kw = dict(batch_size=64, num_workers=args.workers, persistent_workers=True)" in new
    assert new.count("persistent_workers") == 1 and not manual


@pytest.mark.parametrize("src", [
    # read elsewhere than as **kw of a loader: another call would receive the new key
    "kw = {'num_workers': 0}\nDataLoader(ds, **kw)\nprint(kw)\n",
    # bound twice: which binding the call sees is not known here
    "kw = {}\nkw = dict(num_workers=0)\nDataLoader(ds, **kw)\n",
    # built by something other than a dict display or dict(...)
    "kw = make_kwargs()\nDataLoader(ds, **kw)\n",
])
def test_a_mapping_that_is_not_safe_to_edit_is_left_to_the_user(src):
    src = "from torch.utils.data import DataLoader\n" + src
    new, manual = transform(src, KEPT[:1])
    assert new == src
    assert any("num_workers=2 in that mapping" in m for m in manual)


def test_a_key_the_call_passes_itself_is_set_in_the_call_not_the_mapping():
    src = "from torch.utils.data import DataLoader\nkw = dict(batch_size=8)\nDataLoader(ds, num_workers=0, **kw)\n"
    new, manual = transform(src, KEPT[:1])
    assert "DataLoader(ds, num_workers=2, **kw)" in new and "kw = dict(batch_size=8)" in new and not manual


def test_cpu_threads_follows_the_kept_worker_count():
    kept = [Trial("dataloader_workers", "safe", params={"num_workers": 1}), Trial("cpu_threads", "safe")]
    new, manual = transform(SAMPLE.read_text(), kept)
    assert "torch.set_num_threads(max(1, torch.get_num_threads() - 1))" in new
    assert manual == []


def test_cpu_threads_alone_rewrites_the_scripts_own_thread_count():
    kept = [Trial("cpu_threads", "safe", params={"threads": 1, "standalone": True})]
    src = "import torch\ntorch.set_num_threads(8)  # tuned once\nx = torch.ones(2)\n"
    new, manual = transform(src, kept)
    assert "torch.set_num_threads(1)  # tuned once" in new and "set_num_threads(8)" not in new
    assert new.count("set_num_threads") == 1 and manual == []
    plain = "import torch\nx = torch.ones(2)\n"  # none of its own: one line after the imports
    new, _ = transform(plain, kept)
    assert new.count("torch.set_num_threads(1)") == 1


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_diff_applies_from_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = tmp_path / "repo"
    script = repo / "src" / "train" / "train.py"
    script.parent.mkdir(parents=True)
    shutil.copy(SAMPLE, script)
    assert _git(repo, "init", "-q").returncode == 0
    # The user ran advisor from the script's folder; the diff still names the file from the top.
    monkeypatch.chdir(script.parent)
    diff = make_diff(script, KEPT[:3])
    assert "--- a/src/train/train.py" in diff and "+++ b/src/train/train.py" in diff
    patch = tmp_path / "fix.diff"
    patch.write_text(diff, encoding="utf-8")
    check = _git(repo, "apply", "--check", str(patch))
    assert check.returncode == 0, check.stderr
    assert _git(repo, "apply", str(patch)).returncode == 0
    assert script.read_text() == transform(SAMPLE.read_text(), KEPT[:3])[0]


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_without_a_repository_the_diff_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # NOTE: GIT_CEILING_DIRECTORIES keeps git from finding a repository above tmp_path.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    script = tmp_path / "work" / "models" / "train.py"
    script.parent.mkdir(parents=True)
    shutil.copy(SAMPLE, script)
    monkeypatch.chdir(tmp_path / "work")
    diff = make_diff(script, KEPT[:1])
    assert "--- a/models/train.py" in diff
    patch = tmp_path / "fix.diff"
    patch.write_text(diff, encoding="utf-8")
    check = _git(tmp_path / "work", "apply", "--check", str(patch))
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(("call", "changed"), [
    ("x.to(device)", True),
    ('x.to("cuda")', True),
    ('x.to("cuda:1")', True),
    ("x.to(torch.device('cuda', 0))", True),
    ('x.to("cpu")', False),
    ("x.to(torch.device('cpu'))", False),
    ("x.to(torch.float16)", False),
    ("x.to(args.device)", True),
])
def test_non_blocking_goes_only_on_copies_that_may_reach_a_gpu(call: str, changed: bool):
    src = f"import torch\nfor x in loader:\n    y = {call}\n"
    new, _ = transform(src, [Trial("non_blocking_copy", "safe")])
    assert ("non_blocking=True" in new) is changed, new


BRANCHES = '''import torch
from torch import nn

if ARCH == "wide":
    model = nn.Linear(8, 2)
else:
    model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def evaluate(x):
    with torch.no_grad():
        return model(x)


for step in range(3):
    if ARCH == "wide":
        out = model(torch.ones(2, 8))
    else:
        out = model(torch.ones(2, 4))
    out.sum().backward()
    opt.step()

model = torch.load("best.pt")
'''


def test_a_model_built_and_called_in_each_branch_is_edited_whatever_branch_runs():
    # a word language model builds a Transformer or an RNN: the diff edited the first branch's
    # lines only, and the run (the RNN, in the else) got neither compile nor autocast
    new, manual = transform(BRANCHES, [Trial("torch_compile", "unsafe"),
                                       Trial("bf16_autocast", "unsafe", params={"device_type": "cpu"})])
    assert not manual
    lines = new.splitlines()
    compiled = lines.index("model.compile()")
    assert lines[compiled - 1] == "    model = nn.Linear(4, 2)" and new.count(".compile()") == 1  # not after the reload
    assert new.count('torch.autocast(device_type="cpu", dtype=torch.bfloat16)') == 2  # the training and the evaluation call
    assert '    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):\n        if ARCH == "wide":' in new
    compile(new, "branches.py", "exec")
