"""What the fix loop is asked to do (:class:`LoopOptions`), and the constants of its trial runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.capture.model import RunCapture, RunSpec
from advisor.errors import UsageError
from advisor.fixes.loop.progress import Progress
from advisor.fixes.model import FixOutcome
from advisor.fixes.stats import MIN_EFFECT

INSTALLER = "advisor.fixes.runtime"
"""The module the capture child imports by name to install fixes (``RunSpec.fix_installers``)."""


def installer_modules() -> tuple[str, ...]:
    """Return what a warm-start server imports for runs that install fixes: :data:`INSTALLER`, every fix's module.

    A warm child that installs a fix reads the whole catalog, 22 modules: 25-35 ms a run when the
    server had not imported them (0.1 s in a fresh interpreter).
    """
    from advisor.fixes.catalog import module_names

    return (INSTALLER, *(f"advisor.fixes.catalog.{name}" for name in module_names()))


DEFAULT_LOSS_STEPS = 5
DEFAULT_SEED = 0
# Every trial run times at least this much of the script (RunSpec.min_timed_s): 20 steps of a
# tiny model are a 10-15 ms window, where one slow step halved a baseline's rate and inflated a
# larger_batch speedup to 19.8x against 11.4x timed plainly over the whole script (tiny_model,
# benchmarks/fix_speedups.py). Slow steps already fill it; only fast ones run longer. 1.5 s, not
# 1 s: a run costs 0.3-0.45 s outside its window (fork, first step, warm-up, exit), which against
# 1 s made about 30% of the demo's diagnose overhead, over issue #33's 25% (docs/benchmarks.md).
MIN_TRIAL_WINDOW_S = 1.5
# A trial run times this many steps (fewer when the user asked for fewer), extended to
# MIN_TRIAL_WINDOW_S: each run yields one rate for the paired test, and the window, not a fixed
# 20 steps, is what steadies it. 20 steps of a 95 ms step were 1.9 s per run, 74 of the demo's
# 104 s; the capture still times the user's --steps.
TRIAL_TIMED_STEPS = 8
# Trial runs keep at least this many warm-up steps however stable the baseline's steps were:
# a variant pays its own one-time costs (worker start-up, a compile) that the baseline cannot
# show, and they land in its first step or two.
MIN_TRIAL_WARMUP = 2
# A warm-up step further than this factor from the baseline's steady median (either way, and
# outside the steady steps' own range) is still warming up (settled_warmup).
WARMUP_SETTLED = 1.25
# A warm-up step this close to the steady steps' fastest or slowest (either way) is as settled as
# that step: the extremes of a dozen steps move with the machine. On a VM whose speed drifted
# within one baseline run (steady steps 77-119 ms), warm-up steps of 120-122 ms sent every trial
# run of a diagnose through the full 5 warm-up steps: 0.3 s a run, 6 s of its overhead.
WARMUP_EDGE = 1.1


def trial_window(spec: RunSpec, base_step_ms: float | None) -> tuple[int, float]:
    """Return a trial run's timed steps and the least time they must add up to (``RunSpec.min_timed_s``).

    One process extends its own window to :data:`MIN_TRIAL_WINDOW_S`. The ranks of a job must
    stop at the same step (:mod:`advisor.distributed.launch`): each extending by its own clock,
    rank 0 stopped after step 22 while rank 1 began step 23's all-reduce and died with
    "Connection reset by peer". Their window is a step count instead, as long as the first
    baseline's median step (``base_step_ms``) needs to fill the same time.
    """
    steps = min(spec.timed_steps, TRIAL_TIMED_STEPS)
    if not spec.multi_process:
        return steps, MIN_TRIAL_WINDOW_S
    if base_step_ms:
        steps = max(steps, math.ceil(MIN_TRIAL_WINDOW_S * 1000.0 / base_step_ms))
    return steps, 0.0


Runner = Callable[[RunSpec], RunCapture]


def default_runner(spec: RunSpec, progress: Callable[[Any], None] | None = None) -> RunCapture:
    """Run one capture with the real capture stage (imported lazily)."""
    from advisor.capture.run import capture

    return capture(spec, progress=progress)


@dataclass(frozen=True)
class LoopOptions:
    """How :func:`~advisor.fixes.loop.run.run_trials` tries the fixes (every field has a default).

    Attributes:
        unsafe: Also try unsafe fixes (precision, batch semantics, compile).
        only: Try exactly these fix ids instead of the suggestions (``--fix ID``).
        repeats: Interleaved baseline/variant rounds per trial (at least 1; 3 by default).
        runner: Runs one capture (the real capture stage by default; tests pass a fake).
        progress: Called after every run with a :class:`~advisor.fixes.loop.progress.TrialProgress`.
        min_effect: Smallest relative change reported as an effect.
        loss_steps: First steps whose loss is compared with the baseline.
        make_diff_text: Also compute the source diff for the kept fixes.
        max_repeats: Rounds an undecided trial may grow to (default ``2 * repeats``).
        checkpoint: Called after every run with what is known so far (finished trials, and
            trials still being measured marked unfinished), so the caller can save it: an
            interrupted loop then loses nothing it measured.
        breakdown: The diagnosis's share of step time per category: a fix whose Amdahl bound
            on it cannot reach ``min_effect`` is skipped unrun (:mod:`advisor.fixes.bounds`).
        impacts: Fix id -> the largest recoverable share its findings claim (orders the fixes
            under a budget when the fix declares no categories).
        gpu_busy: On a GPU run, the diagnosed share of the step the GPU is busy: it bounds the
            fixes that only make kernels faster (:mod:`advisor.fixes.bounds`).
        peak_at / peak_activation_frac: Where the diagnosed peak memory is allocated and the
            activations' share of it (the memory finding's locations and evidence); the memory
            fixes' diff notes name them (:func:`~advisor.fixes.fix.peak_note`).
        budget_s: Seconds the whole loop may take (``--budget``): fixes are measured largest
            possible gain first, and those the remaining time cannot pay for are not tried
            (skipped, saying so); a measurement stops early once every trial has its minimum
            pairs and the next round would overrun.
        early_stop: Stop a trial's rounds as soon as its interval is decided (from
            :data:`~advisor.fixes.stats.MIN_PAIRS` pairs, see
            :func:`~advisor.fixes.stats.decided_early`); False runs every planned round.
        settle_warmup: Let trial runs warm up for only as many steps as the first baseline
            (or, when it did not settle, a later plain baseline) needed to reach a stable step
            time (:func:`~advisor.fixes.loop.plan.settled_warmup`); False keeps the spec's.
        skip_inert: Skip a fix measured on top of another's rung when that rung's runs show it
            could not change the measurement (:attr:`~advisor.fixes.fix.Fix.inert`); never for
            fixes named in ``only``.
        profile_kept: Run the kept fixes once more under the profiler, into
            ``<out_dir>/kept/``, so the run leaves a before/after pair of traces.
        clock: The clock the budget is kept with (tests pass a fake).
    """

    unsafe: bool = False
    only: Sequence[str] = ()
    repeats: int = 3
    runner: Runner = default_runner
    progress: Progress | None = None
    min_effect: float = MIN_EFFECT
    loss_steps: int = DEFAULT_LOSS_STEPS
    make_diff_text: bool = True
    max_repeats: int | None = None
    checkpoint: Callable[[FixOutcome], None] | None = None
    breakdown: Mapping[str, float] | None = None
    impacts: Mapping[str, float] | None = None
    gpu_busy: float | None = None
    peak_at: tuple[str, ...] = ()
    peak_activation_frac: float | None = None
    budget_s: float | None = None
    early_stop: bool = True
    settle_warmup: bool = True
    skip_inert: bool = True
    profile_kept: bool = False
    clock: Callable[[], float] = time.perf_counter

    def check(self) -> None:
        """Refuse values no loop can run with.

        Raises:
            UsageError: ``repeats`` is below 1, or ``budget_s`` is not a positive number.
        """
        if self.repeats < 1:
            raise UsageError(f"--repeats must be at least 1, not {self.repeats}")
        if self.budget_s is not None and not self.budget_s > 0:
            raise UsageError(f"--budget must be a positive number of seconds, not {self.budget_s}")
