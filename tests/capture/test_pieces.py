"""Small pieces: sample counting, DataLoader description, progress display, run-dir handling."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from advisor.capture.child import rank_dir
from advisor.capture.hooks import count_samples, describe_dataloader
from advisor.capture.model import ProgressEvent
from advisor.capture.progress import LiveProgress, describe
from advisor.capture.run import prepare_run_dir


def test_count_samples_finds_the_first_tensor():
    assert count_samples(torch.zeros(5, 3)) == 5
    assert count_samples((torch.zeros(7, 2), torch.zeros(7))) == 7
    assert count_samples({"image": torch.zeros(2, 1, 4, 4), "label": torch.zeros(2)}) == 2
    assert count_samples([["a", "b"], torch.zeros(3)]) == 3
    assert count_samples(torch.tensor(1.0)) is None
    assert count_samples(["a", "b"]) is None


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def test_describe_dataloader_reads_effective_settings():
    loader = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2, num_workers=2,
                        pin_memory=True, persistent_workers=True, prefetch_factor=3)
    info = describe_dataloader(loader, "train.py", 12)
    assert (info.batch_size, info.num_workers, info.pin_memory, info.persistent_workers,
            info.prefetch_factor) == (2, 2, True, True, 3)
    assert info.dataset_type == "torch.utils.data.dataset.TensorDataset"
    assert (info.file, info.line, info.iterable_dataset, info.batches) == ("train.py", 12, False, 2)
    stream = describe_dataloader(DataLoader(Stream(), batch_size=None), None, None)
    assert stream.iterable_dataset and stream.batch_size is None and stream.prefetch_factor is None
    assert stream.batches is None
    assert describe_dataloader(DataLoader(TensorDataset(torch.zeros(5, 1)), batch_size=2, drop_last=True),
                               None, None).batches == 2


def test_rank_dir_only_under_torchrun(tmp_path):
    assert rank_dir(tmp_path, {}) == tmp_path
    assert rank_dir(tmp_path, {"WORLD_SIZE": "1", "RANK": "0"}) == tmp_path
    assert rank_dir(tmp_path, {"WORLD_SIZE": "4", "RANK": "3"}) == tmp_path / "rank3"


def test_progress_display_writes_phase_and_steps():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100)
    with LiveProgress(console=console, title="train.py") as show:
        show(ProgressEvent("timed", step=3, steps_total=8, phase_step=2, phase_steps=3))
        show(ProgressEvent("done", step=8, steps_total=8, message="stopped"))
    text = out.getvalue()
    assert "train.py" in text and "8/8 steps" in text and "done: complete" in text  # "stopped" read as a failure (issue #32)
    assert describe(ProgressEvent("timed", phase_step=2, phase_steps=3)) == "timed steps 2/3"


def test_prepare_run_dir_replaces_a_previous_capture_only(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "old.pt.trace.json").write_text("{}")
    (run / "capture.json").write_text("{}")
    (run / "mine.txt").write_text("user file")
    assert prepare_run_dir(run) == run.resolve()
    assert sorted(p.name for p in run.iterdir()) == ["mine.txt"]
    assert Path(run / "mine.txt").read_text() == "user file"


def test_hooks_count_steps_in_process_and_leave_nothing_behind():
    from torch.optim import optimizer as optim_mod
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    import advisor
    from advisor.capture.hooks import TorchHooks
    from advisor.capture.phases import Phases
    from advisor.capture.recorder import StepRecorder

    originals = (DataLoader.__init__, _BaseDataLoaderIter.__next__, torch.autograd.backward)
    post_hooks = dict(optim_mod._global_optimizer_post_hooks)
    rec = StepRecorder(Phases(1, 2, 0, 0, full=True), record_loss_steps=2)
    hooks = TorchHooks(rec)
    hooks.install()
    try:
        rec.script_started()
        loader = DataLoader(TensorDataset(torch.ones(12, 2)), batch_size=3)
        w = torch.nn.Parameter(torch.zeros(2))
        opt = torch.optim.SGD([w], lr=0.1)
        for (x,) in loader:
            (x @ w + 1).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    finally:
        hooks.uninstall()
    assert rec.source == "optimizer" and rec.steps_seen == 4
    assert rec.step_samples == [3, 3] and rec.step_batches == [1, 1]
    # the loader the steps iterate: its epoch's batches; one loader, so no evaluation loader
    assert rec.between.train_batches == 4 and not rec.between.eval_loader and rec.between.epoch_ends == [4]
    # step 1: w = 0, loss 1; SGD moves w to -0.2 each, so step 2's loss is (1 - 0.4)^2
    assert rec.losses == pytest.approx([1.0, 0.36])
    (info,) = hooks.dataloaders
    assert info.file == __file__ and info.batch_size == 3
    assert (DataLoader.__init__, _BaseDataLoaderIter.__next__, torch.autograd.backward) == originals
    assert dict(optim_mod._global_optimizer_post_hooks) == post_hooks
    assert advisor._step_callback is None


def test_progress_never_prints_an_unknown_total():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100)
    with LiveProgress(console=console, title="train.py"):
        pass  # the script failed before its first step: no step count was ever known
    assert "None" not in out.getvalue() and "0/" not in out.getvalue()


def test_a_module_compiled_in_place_is_seen_once_a_call() -> None:
    from advisor.capture.compiled_calls import watch_inplace_compile

    undo: list = []

    def patch(owner, name, value):  # type: ignore[no-untyped-def]
        original = owner.__dict__[name]
        setattr(owner, name, value)
        undo.append(lambda: setattr(owner, name, original))

    seen: list = []
    quiet = [0]
    watch_inplace_compile(torch, lambda m, a: seen.append(("before", type(m).__name__, a[0].shape[0])),
                          lambda m, a, k, out: seen.append(("after", type(m).__name__, out.shape[0])),
                          quiet, patch, torch.compiler.is_compiling)
    try:
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        net.compile(backend="eager")
        for _ in range(2):
            net(torch.ones(3, 4))
    finally:
        while undo:
            undo.pop()()
        torch._dynamo.reset()
    assert seen == [("before", "Sequential", 3), ("after", "Sequential", 3)] * 2 and quiet == [0]
    assert "compile" not in torch.nn.Module.__dict__ or torch.nn.Module.compile.__module__ == "torch.nn.modules.module"
