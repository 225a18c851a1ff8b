"""Step sources beyond the optimizer (issue 15): backward calls, model calls, cycles of several
optimizers or modules, and what each step consumed. Fake clock, no torch."""

from __future__ import annotations

import pytest
from test_recorder import make


def test_hand_written_updates_count_a_step_per_backward():
    rec, clock, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True, record_loss_steps=10)
    for i in range(5):
        rec.module_call(key=1, samples=32)  # fc(batch_x)
        rec.loss(float(i))
        rec.backward()  # param.data.add_ follows; no optimizer anywhere
        clock.advance(0.002)
    assert rec.source == "backward"
    # the first backward starts step 1 (like a DataLoader's first request): 4 steps from 5 calls
    assert rec.steps_seen == 4
    assert rec.step_samples == [32, 32, 32] and rec.step_backwards == [1, 1, 1]
    assert rec.step_times_ms == pytest.approx([2.0, 2.0, 2.0])
    assert rec.losses == [1.0, 2.0, 3.0, 4.0]
    assert "backward() call" in rec.source_reason()
    assert rec.module_keys_needed() == {1}  # fc's inputs still count the samples
    assert rec.timed_phase().backwards == (1, 1, 1)


def test_gan_two_optimizers_are_one_step_per_iteration():
    rec, clock, *_ = make(warmup=3, timed=3, profiled=0, cprofile=0, full=True)
    d, g = 101, 202
    for _ in range(8):
        rec.batch_requested()
        rec.batch_yielded(16)
        rec.backward()
        rec.optimizer_step(d)
        rec.backward()
        rec.optimizer_step(g)
        clock.advance(0.01)
    assert rec.source == "optimizer"
    # D, G (2 boundaries while learning), then a step at each G only: 2 + 7
    assert rec.steps_seen == 9
    assert rec.step_samples == [16, 16, 16] and rec.step_backwards == [2, 2, 2]
    assert rec.step_times_ms == pytest.approx([10.0, 10.0, 10.0])
    assert "2 torch.optim optimizers" in rec.source_reason()


def test_gan_cycle_learned_after_warmup_restarts_measurement():
    rec, clock, *_ = make(warmup=1, timed=2, profiled=0, cprofile=0, full=True)
    for _ in range(4):
        rec.optimizer_step(1)
        clock.advance(0.001)
        rec.optimizer_step(2)
        clock.advance(0.009)
    # measured steps before the cycle was known would mix half iterations: only whole ones count
    assert rec.step_times_ms == pytest.approx([10.0, 10.0])


def test_inference_counts_model_calls_and_learns_a_loss_module():
    rec, clock, *_ = make(warmup=2, timed=3, profiled=0, cprofile=0, full=True)
    model, criterion = 1, 2
    for _ in range(8):
        rec.module_call(model, 8)
        rec.module_call(criterion, 8)
        clock.advance(0.005)
    assert rec.source == "module"
    assert rec.step_samples == [8, 8, 8]  # the lead module's inputs, not the criterion's
    assert rec.step_times_ms == pytest.approx([5.0, 5.0, 5.0])
    assert "the last of the 2 modules" in rec.source_reason()
    assert rec.module_keys_needed() == {model, criterion}


def test_dataloader_samples_win_over_model_inputs():
    rec, clock, *_ = make(warmup=1, timed=2, profiled=0, cprofile=0, full=True)
    for _ in range(5):
        rec.batch_requested()
        rec.batch_yielded(4)
        rec.module_call(7, 999)  # e.g. a sequence-first tensor: the DataLoader knows better
        clock.advance(0.001)
    assert rec.source == "module" and rec.step_samples == [4, 4]


def test_training_loop_switches_module_backward_optimizer_in_warmup():
    rec, clock, *_ = make(warmup=2, timed=2, profiled=0, cprofile=0, full=True, record_loss_steps=3)
    for i in range(6):
        rec.batch_requested()
        rec.batch_yielded(8)
        rec.module_call(1, 8)
        rec.loss(float(i + 1))
        rec.backward()
        rec.optimizer_step(5)
        clock.advance(0.004)
    assert rec.source == "optimizer" and rec.steps_seen == 6 and rec.notes == []
    assert rec.step_samples == [8, 8] and rec.step_backwards == [1, 1]
    assert rec.losses == [1.0, 2.0, 3.0]  # the first iteration's loss stays step 1's
    assert rec.module_keys_needed() == frozenset()  # the DataLoader counts samples


def test_accumulation_from_the_loop_itself():
    rec, clock, *_ = make(warmup=3, timed=2, profiled=0, cprofile=0, full=True)
    for _ in range(6):
        for _ in range(4):  # 4 micro-batches of 2, sliced from a tensor: no DataLoader
            rec.module_call(1, 2)
            rec.backward()
        rec.optimizer_step(9)
        clock.advance(0.01)
    timed = rec.timed_phase()
    assert timed.backwards == (4, 4) and timed.samples == (8, 8)
    assert timed.backwards_per_step == 4.0 and timed.micro_batch_samples == 2.0
    assert timed.optimizers_per_step == 1 and timed.accumulation == 4


def test_lower_sources_are_ignored_once_a_better_one_rules():
    rec, clock, *_ = make(warmup=0, timed=5, profiled=0, cprofile=0, full=True)
    rec.optimizer_step(1)
    rec.module_call(3, 4)
    rec.backward()
    rec.batch_requested()
    assert rec.source == "optimizer" and rec.steps_seen == 1


def test_gan_backward_calls_are_not_accumulation():
    rec, clock, *_ = make(warmup=3, timed=3, profiled=0, cprofile=0, full=True)
    for _ in range(8):
        rec.module_call(1, 16)
        rec.backward()  # D on real
        rec.backward()  # D on fake
        rec.optimizer_step(101)
        rec.backward()  # G
        rec.optimizer_step(202)
        clock.advance(0.01)
    timed = rec.timed_phase()
    assert timed.backwards_per_step == 3.0 and timed.optimizers_per_step == 2
    assert timed.accumulation is None  # 3 backward calls over 2 optimizers: not micro-batches


def test_one_backward_per_step_is_not_accumulation():
    rec, clock, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True)
    for _ in range(6):
        rec.module_call(1, 8)
        rec.backward()
        rec.optimizer_step(1)
        clock.advance(0.01)
    assert rec.timed_phase().accumulation is None
    # steps counted from backward calls (no optimizer): nothing to divide by
    rec2, clock2, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True)
    for _ in range(6):
        rec2.module_call(1, 8)
        rec2.backward()
        clock2.advance(0.01)
    assert rec2.timed_phase().optimizers_per_step == 0 and rec2.timed_phase().accumulation is None


def test_accumulation_longer_than_the_phases_discards_the_wrong_source_trace():
    """Micro-batches outnumber the steps asked for: backward calls filled the phases before the first optimizer step."""
    from test_recorder import FakeProfiler

    from advisor.capture.phases import Phases, StopScript
    from advisor.capture.recorder import StepRecorder
    from tests.fakes import Clock

    class Exporting(FakeProfiler):
        def discard(self) -> None:
            self.calls.append("drop-exported")

    clock, prof = Clock(100.0), Exporting()
    rec = StepRecorder(Phases(1, 1, 1, 4, False), profiler=prof, cprofiler=FakeProfiler(), clock=clock)
    rec.script_started()
    with pytest.raises(StopScript):
        for _ in range(20):
            for _ in range(6):  # 6 backward boundaries outrun warm-up, timed and profiled
                rec.module_call(1, 2)
                rec.backward()
                clock.advance(0.001)
            rec.optimizer_step(9)
    # the backward-source window was exported, then dropped when the optimizer took over
    assert prof.calls[:4] == ["start", "export", "drop-exported", "start"]
    assert rec.source == "optimizer" and rec.timed_phase().accumulation == 6


def test_a_created_optimizer_is_awaited_through_long_accumulation():
    rec, clock, prof, _ = make(warmup=1, timed=3, profiled=2, cprofile=2, full=True)
    rec.optimizer_created()
    for _ in range(7):
        for _ in range(40):  # 40 micro-batches, more than the 8 steps asked for
            rec.module_call(1, 8)
            rec.backward()
            clock.advance(0.001)
        rec.optimizer_step(9)
    assert rec.source == "optimizer" and rec.steps_seen == 7
    assert rec.timed_phase().backwards == (40, 40, 40) and rec.timed_phase().samples == (320, 320, 320)
    assert rec.step_times_ms == pytest.approx([40.0, 40.0, 40.0])
    assert prof.calls[0] == "start" and "discard" not in prof.calls  # no window was wasted
    assert not any("restarted" in n for n in rec.notes)


def test_an_optimizer_that_never_steps_gives_way_to_backward_calls():
    from advisor.capture.phases import ACCUMULATION_GRACE

    rec, clock, *_ = make(warmup=1, timed=2, profiled=0, cprofile=0, full=True)
    rec.optimizer_created()  # built, but the script updates parameters by hand
    for _ in range(ACCUMULATION_GRACE + 4):
        rec.module_call(1, 8)
        rec.backward()
        clock.advance(0.001)
    assert rec.source == "backward" and rec.steps_seen == 3


def test_evaluation_before_the_first_optimizer_step_is_no_step():
    # nanoGPT-style: the optimizer is built, then estimate_loss() runs 400 forward passes under
    # no_grad at iteration 0, then training; the steps are optimizer steps, 32 samples each.
    rec, clock, *_ = make(warmup=2, timed=3, profiled=0, cprofile=0, full=True)
    model = 1
    rec.optimizer_created()
    for _ in range(400):
        rec.batch_requested(grad=False)
        rec.batch_yielded(64, grad=False)
        rec.module_call(model, 64, grad=False)
        clock.advance(0.001)
    rec.epoch_ended(grad=False)  # the validation loader ran out: no epoch of the training loader
    for _ in range(6):
        rec.module_call(model, 32)
        rec.backward()
        clock.advance(0.01)
        rec.optimizer_step()
    assert rec.source == "optimizer"
    assert rec.step_samples == [32, 32, 32] and rec.step_times_ms == pytest.approx([10.0] * 3)
    assert not any("restart" in n or "dropped" in n for n in rec.notes)


def test_without_an_optimizer_no_grad_calls_are_the_steps_of_inference():
    rec, clock, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True)
    for _ in range(6):
        rec.module_call(1, 8, grad=False)
        clock.advance(0.002)
    assert rec.source == "module" and rec.step_times_ms == pytest.approx([2.0] * 3)
