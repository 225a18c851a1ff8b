"""Checkpoints between steps: ``torch.save`` in the loop is timed as work between steps, by its caller."""

from __future__ import annotations

import inspect

import torch

from advisor.capture.checkpoints import SAVE, timed_save
from advisor.capture.hooks import TorchHooks
from advisor.capture.phases import Phases
from advisor.capture.recorder import StepRecorder
from advisor.metrics.periodic import project
from tests.fakes import Clock


def _loop(tmp_path, steps: int, every: int, through_function: bool) -> None:
    w = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([w], lr=0.1)
    torch.save({"w": w.detach()}, tmp_path / "initial.pt")  # before the first step: start-up

    def save_checkpoint(step: int) -> None:
        torch.save({"w": w.detach(), "opt": opt.state_dict()}, tmp_path / f"ck{step}.pt")

    for step in range(1, steps + 1):
        (torch.ones(4) @ w - 1).pow(2).backward()
        opt.step()
        opt.zero_grad()
        if step % every == 0:
            if through_function:
                save_checkpoint(step)
            else:
                torch.save({"w": w.detach()}, tmp_path / f"ck{step}.pt")  # the inline save's line


def _captured(tmp_path, through_function: bool):
    original = torch.save
    rec = StepRecorder(Phases(0, 20, 0, 0, full=True))
    hooks = TorchHooks(rec)
    hooks.install()
    try:
        assert torch.save is not original
        rec.script_started()
        _loop(tmp_path, 10, 3, through_function)
    finally:
        hooks.uninstall()
    assert torch.save is original
    return rec.between.records()


def test_an_inline_save_is_named_torch_save_at_its_line_after_each_period(tmp_path):
    works = _captured(tmp_path, through_function=False)
    line = next(i for i, text in enumerate(inspect.getsource(_loop).splitlines()) if "the inline save's line" in text)
    first = _loop.__code__.co_firstlineno
    assert [(w.function, w.step, w.calls) for w in works] == [(SAVE, 3, 1), (SAVE, 6, 1), (SAVE, 9, 1)]
    assert {w.line for w in works} == {first + line} and all(w.file == __file__ for w in works)
    assert all(w.seconds > 0 for w in works)
    assert (tmp_path / "ck9.pt").is_file() and (tmp_path / "initial.pt").is_file()


def test_a_save_in_a_function_is_named_by_that_function(tmp_path):
    works = _captured(tmp_path, through_function=True)
    assert [(w.function, w.step) for w in works] == [("save_checkpoint", 3), ("save_checkpoint", 6), ("save_checkpoint", 9)]


def test_the_projection_counts_each_save_once_per_period():
    clock = Clock()
    rec = StepRecorder(Phases(0, 40, 0, 0, full=True), clock=clock)
    rec.optimizer_created()
    rec.script_started()
    frames = (("train.py", "<module>", 1, 50),)

    def half_a_second() -> None:
        clock.now += 0.5

    save = timed_save(half_a_second, rec, lambda: frames)
    for step in range(1, 31):
        clock.now += 0.01
        rec.module_call(7, 8)
        rec.backward()
        rec.optimizer_step(1)
        if step % 10 == 0:
            save()
    (p,) = project_functions(rec)
    assert (p.function, p.period, p.line) == (SAVE, 10, 50)
    assert abs(p.cost_s - 0.5) < 1e-9


def project_functions(rec):
    from advisor.capture.model import RunCapture

    return project(RunCapture(between_steps=rec.between.records())).functions


def test_a_failing_save_raises_as_it_would_and_its_time_still_counts(tmp_path):
    rec = StepRecorder(Phases(0, 5, 0, 0, full=True))
    rec.steps_seen = 1

    def broken(*_a, **_k):
        raise OSError("disk full")

    save = timed_save(broken, rec, lambda: (("train.py", "<module>", 1, 9),))
    try:
        save({}, tmp_path / "x.pt")
    except OSError as exc:
        assert "disk full" in str(exc)
    else:
        raise AssertionError("the save's own error must reach the script")
    assert [w.function for w in rec.between.records()] == [SAVE]


def test_a_whole_model_saved_mid_run_is_pickled_without_advisors_hooks_which_stay_on_it(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = StepRecorder(Phases(0, 20, 0, 0, full=True))
    hooks = TorchHooks(rec)
    hooks.install()
    hooked = []
    try:
        rec.script_started()
        for step in range(1, 7):
            model(torch.ones(2, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            if step % 3 == 0:
                torch.save(model, tmp_path / f"model{step}.pt")  # word_language_model's checkpoint
                hooked.append(len(model._forward_hooks))
    finally:
        hooks.uninstall()
    assert hooked and all(n > 0 for n in hooked)  # advisor's per-module hooks are back after each save
    loaded = torch.load(tmp_path / "model6.pt", weights_only=False)
    assert not loaded._forward_hooks and not loaded._forward_pre_hooks  # the checkpoint needs no advisor
    assert torch.equal(loaded[0].weight, model[0].weight)
