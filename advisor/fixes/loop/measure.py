"""The *measure* part of the fix loop: :class:`Measurer` runs the trial captures and pairs them.

One measurement interleaves reference and variant runs (``A V1 V2 .. A V2 V1 .. A``), stops a
trial early once its interval is decided, and turns each variant into a :class:`Trial`
(docs/fix-loop.md, steps 3 and 4).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor.capture.model import FixRequest, NoteState, RunCapture, RunSpec
from advisor.errors import AdvisorError
from advisor.fixes import catalog
from advisor.fixes.agreement import RunFacts, arm_medians, change_note, facts_of
from advisor.fixes.fix import Objective, RungRuns
from advisor.fixes.loop.counting import Counting
from advisor.fixes.loop.memory import judge_memory, over_budget
from advisor.fixes.loop.options import DEFAULT_SEED, INSTALLER, Runner, trial_window
from advisor.fixes.loop.pairing import against_partner, estimate_of, still_running
from advisor.fixes.loop.progress import (
    STEP_EVENT_INTERVAL_S,
    Progress,
    TrialProgress,
    runs_left,
    takes_progress,
)
from advisor.fixes.loop.select import collapse
from advisor.fixes.loop.spread import disagree, spread_reason
from advisor.fixes.loop.stops import stop_if_outrun, worth_more_rounds
from advisor.fixes.loop.text import (
    baseline_prefix,
    failure_reason,
    recompile_failure,
    safe_name,
    since,
)
from advisor.fixes.loop.variant import FAILED, SKIPPED, Variant, describe
from advisor.fixes.model import FixOutcome, Interval, Trial
from advisor.fixes.stats import (
    MIN_PAIRS,
    decides,
    loss_parity,
    paired_estimate,
    paired_ratios,
    range_estimate,
)
from advisor.rundir import TRIALS_DIR

FRESH_NOTE = "its runs and their baseline runs each in a fresh interpreter: a forked run inherits the server's heap"
"""A fresh-process measurement's reason says so (:attr:`advisor.fixes.fix.Fix.fresh_process`)."""


class Measurer:
    """Runs captures for the trials and keeps the baseline runs of each measurement (the *measure* part)."""

    def __init__(
        self, spec: RunSpec, runner: Runner, progress: Progress | None, repeats: int,
        min_effect: float, loss_steps: int,
    ) -> None:
        self.spec = spec
        self.runner = runner
        self.progress = progress
        self.repeats = repeats
        self.min_effect = min_effect
        self.loss_steps = loss_steps
        self.root = Path(spec.out_dir) / TRIALS_DIR
        self.baseline_losses: tuple[float | None, ...] = ()
        self.base_timeout: float | None = spec.timeout_s
        self.max_repeats = repeats
        self.base_step_ms: float | None = None
        # per variant label, each measured run's (median timed step ms, epochs ended while timed,
        # step source): what fixes measured on top of that rung read before they run (Fix.inert)
        self.rung_runs: dict[str, list[tuple[float | None, int, str | None]]] = {}
        self.on_run: Callable[[], None] | None = None
        self.on_baseline: Callable[[RunCapture], None] | None = None  # each plain baseline run, once run
        self.runs = 0
        self.phases_s: dict[str, float] = {}
        self.starts: dict[str, int] = {}  # runs per start kind (cold, warm)
        self.walls: list[float] = []
        self.left: int | None = None
        self.current: list[Variant] = []
        self.early_stop = True
        self.warmup_steps: int | None = None  # fewer than the spec's when the baseline settled early
        self.deadline: float | None = None  # perf_counter() by which the loop should end (--budget)
        self.clock: Callable[[], float] = time.perf_counter
        self.started = self.clock()
        self.unit = ""  # samples/s or steps/s: what the first baseline run counted
        # NOTE: the rates of every run of one reference setting, across stages, in run order:
        # the demo's plain baseline ran at 279-372 samples/s in the first stage and 245-254 in
        # the combination's, whose two pairs alone read [1.67-1.82] (stats.paired_estimate).
        self.history: dict[str, list[float | None]] = {}
        self.fresh = False  # the measurement running now starts every run cold (Fix.fresh_process)

    @property
    def budget_s(self) -> float | None:
        """The whole loop's budget in seconds (None: no budget)."""
        return None if self.deadline is None else self.deadline - self.started

    def affords(self, runs: int) -> bool:
        """Whether ``runs`` more runs of the median wall time so far fit in the budget (always, without one)."""
        if self.deadline is None:
            return True
        typical = median(self.walls) or 0.0
        return self.clock() + runs * typical <= self.deadline

    def trial_spec(self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any]) -> RunSpec:
        """Return the spec of one trial run: timed steps only, seeded, losses recorded."""
        s = replace(
            self.spec,
            out_dir=self.root / name,
            profiled_steps=0,
            full=False,
            fixes=fixes,
            seed=self.spec.seed if self.spec.seed is not None else DEFAULT_SEED,
            record_loss_steps=self.loss_steps,
            quiet=True,
            timeout_s=self.base_timeout,
            timed_steps=(window := trial_window(self.spec, self.base_step_ms))[0],
            min_timed_s=window[1],
            fix_installers=(INSTALLER,) if fixes else (),
        )
        if self.warmup_steps is not None:
            s = replace(s, warmup_steps=self.warmup_steps)
        if self.fresh:
            s = replace(s, fresh_process=True)
        if hasattr(s, "cprofile_steps"):
            s = replace(s, cprofile_steps=0)
        return replace(s, **overrides) if overrides else s

    def evidence(self, label: str, shares: Mapping[str, float] | None) -> RungRuns:
        """Return what the measured runs of the rung ``label`` saw (for :attr:`Fix.inert`)."""
        runs = self.rung_runs.get(label, [])
        return RungRuns(
            label=label, step_ms=median([ms for ms, _, _ in runs if ms is not None]),
            epoch_ends=tuple(n for _, n, _ in runs), base_step_ms=self.base_step_ms, shares=dict(shares or {}),
            step_source=next((src for _, _, src in runs if src), None),
        )

    def run(
        self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any] | None = None,
        flight: TrialProgress | None = None,
    ) -> RunCapture:
        """Run one capture with ``fixes``; a capture-stage error becomes a crashed capture.

        With ``flight`` (what the run is: its label, round, stage) and a runner that takes a
        ``progress`` callback, the run's step updates are passed on as in-flight
        :class:`TrialProgress` events while it runs.
        """
        spec = self.trial_spec(name, fixes, overrides or {})
        try:
            if flight is not None and self.progress is not None and takes_progress(self.runner):
                cap = self.runner(spec, progress=self._relay(flight))  # type: ignore[call-arg]
            else:
                cap = self.runner(spec)
        except AdvisorError as exc:  # the capture stage may raise for a script that failed
            from advisor.capture.model import RunStatus, ScriptError

            cap = RunCapture(
                run_dir=str(spec.out_dir), status=RunStatus.CRASHED,
                error=ScriptError(type=type(exc).__name__, message=str(exc)),
            )
        self.account(cap)
        return cap

    def account(self, cap: RunCapture, timed: bool = True) -> None:
        """Count a finished run: its wall time (for the ETA, when ``timed``) and its phases."""
        self.runs += 1
        start = str(getattr(cap, "start", "cold"))
        self.starts[start] = self.starts.get(start, 0) + 1
        if cap.wall_s and timed:
            self.walls.append(float(cap.wall_s))
        for phase, seconds in (cap.phases_s or {}).items():
            self.phases_s[phase] = round(self.phases_s.get(phase, 0.0) + float(seconds), 4)

    def _relay(self, flight: TrialProgress) -> Callable[[Any], None]:
        """Return a capture-progress callback passing the run's steps on, throttled (a background thread calls it)."""
        last = {"phase": "", "t": -math.inf}
        progress = self.progress

        def on_event(event: Any) -> None:
            phase = str(getattr(event, "phase", ""))
            now = self.clock()
            if progress is None or phase in ("", "done"):
                return
            if phase == last["phase"] and now - last["t"] < STEP_EVENT_INTERVAL_S:
                return
            last["phase"], last["t"] = phase, now
            typical = median(self.walls)
            progress(replace(
                flight, in_flight=phase, step=int(getattr(event, "step", 0) or 0),
                steps_total=int(getattr(event, "steps_total", 0) or 0), run=self.runs + 1,
                runs_left=self.left, eta_s=None if self.left is None or typical is None else self.left * typical,
            ))

        return on_event

    def run_baseline(
        self, name: str, k: int, fixes: tuple[FixRequest, ...] = (), flight: TrialProgress | None = None,
    ) -> RunCapture:
        """Run a reference run (the plain baseline, or the fixes others are measured on top of)."""
        cap = self.run(f"{name}-{k}", fixes, flight=flight)
        if not fixes and cap.ok and not self.baseline_losses:
            self.baseline_losses = tuple(cap.losses)
        if not fixes and self.on_baseline is not None:
            self.on_baseline(cap)
        if self.spec.timeout_s is None and cap.ok and cap.wall_s:
            # NOTE: a hung variant must not hang the loop: allow generous slack over the
            # baseline (compile can take 15 s cold) but not forever.
            self.base_timeout = max(self.base_timeout or 0.0, 120.0, 6 * cap.wall_s)
        return cap

    def rate(self, cap: RunCapture) -> float | None:
        """Steady samples/s of a run (steps/s when the script yields no DataLoader batches)."""
        if not cap.ok:
            return None
        t = cap.timed
        value = t.samples_per_s if t.samples_per_s else t.steps_per_s
        return float(value) if value and value > 0 else None

    def emit(self, event: TrialProgress) -> None:
        """Pass a progress event to the caller, if it listens; then let it save what is known."""
        if self.progress is not None:
            typical = median(self.walls)
            eta = None if self.left is None or typical is None else self.left * typical
            self.progress(replace(event, run=self.runs, runs_left=self.left, eta_s=eta))
        if self.on_run is not None:
            self.on_run()

    def snapshot(
        self, wanted: Sequence[str], results: dict[str, Trial], notes: Sequence[str],
        hidden: tuple[str, ...], started: float,
    ) -> FixOutcome:
        """Return what the loop knows now: finished trials, and the ones being measured marked unfinished.

        Nothing is kept and no diff is made: selection needs every trial finished.
        """
        pending = collapse([self.unfinished(v) for v in self.current if v.rates or not v.active])
        known = {**pending, **results}
        return FixOutcome(
            trials=tuple(known[f] for f in wanted if f in known), notes=tuple(notes),
            hidden_unsafe=hidden, wall_s=since(started, self.clock), runs=self.runs, phases_s=dict(self.phases_s),
            starts=dict(self.starts),
        )

    def unfinished(self, v: Variant) -> Trial:
        """Return a variant still being measured as a trial from the pairs so far (its reason says so)."""
        if not v.active:  # failed or skipped: its verdict is final already
            return self.trial(v)
        # NOTE: the variant's last run may still wait for its closing reference run: pairing it
        # with the reference before it alone is what paired_ratios does with a missing neighbour.
        t = self.trial(replace(v, ref_rates=[*v.ref_rates, None]))
        what = f"unfinished: {t.repeats} of {self.repeats} planned pairs measured so far"
        return replace(t, reason=f"{what}; {t.reason}" if t.reason else what, unfinished=True)

    def measure(
        self,
        variants: list[Variant],
        reference: tuple[FixRequest, ...],
        ref_label: str,
        first_baseline: RunCapture | None = None,
        stage: str = "trials",
        fresh: bool = False,
    ) -> None:
        """Interleave reference and variant runs for ``repeats`` rounds, closing with a reference.

        A variant still undecided after ``repeats`` rounds (its interval straddles 1.0 while its
        median shows an effect) gets extra rounds, up to ``max_repeats``, with only the
        undecided variants; the closing reference of one round opens the next. ``fresh``: every
        run of it starts cold (:attr:`advisor.fixes.fix.Fix.fresh_process`), its references too.
        """
        if not variants:
            return
        self.fresh = fresh
        try:
            self._measure(variants, reference, ref_label, first_baseline, stage)
        finally:
            self.fresh = False

    def _measure(
        self, variants: list[Variant], reference: tuple[FixRequest, ...], ref_label: str,
        first_baseline: RunCapture | None, stage: str,
    ) -> None:
        prefix = baseline_prefix(stage) if not reference else f"{safe_name(ref_label)}-ref"
        if self.fresh:
            prefix = f"cold-{prefix}"
        ref_rates: list[float | None] = []
        ref_ttfs: list[float] = []
        ref_peaks: list[int] = []
        ref_losses: list[tuple[float | None, ...]] = []
        ref_loaders: tuple[Any, ...] = ()
        ref_counting: Counting | None = None
        ref_facts: list[RunFacts] = []
        # NOTE: cold runs have their own history: their rates are another population's
        history = self.history.setdefault(("cold:" if self.fresh else "") + (ref_label if reference else ""), [])
        for v in variants:
            v.ref_rates, v.ref_ttfs, v.ref_peaks, v.ref_facts = ref_rates, ref_ttfs, ref_peaks, ref_facts
            v.ref_history = history
            if self.fresh and not v.ref_note:
                v.ref_note = FRESH_NOTE
        planned = self.repeats
        running = list(variants)
        self.current = list(variants)
        shown = ("baseline" if not reference else ref_label) + (" (fresh process)" if self.fresh else "")
        r, last = 0, False
        while True:
            cap = first_baseline if (r == 0 and first_baseline is not None) else self.run_baseline(
                prefix, r + 1, reference, flight=TrialProgress(
                    fix=shown, repeat=r + 1, repeats=planned + 1, stage=stage,
                ),
            )
            ref_rates.append(self.rate(cap))
            history.append(ref_rates[-1])
            if cap.ok:
                ref_facts.append(facts_of(cap, ref_rates[-1]))
                self.unit = self.unit or ("samples/s" if cap.timed.samples_per_s else "steps/s")
            ref_loaders = ref_loaders or tuple(cap.dataloaders)
            ref_counting = ref_counting or (Counting.of(cap) if cap.ok else None)
            if cap.ok and cap.timed.time_to_first_step_s is not None:
                ref_ttfs.append(cap.timed.time_to_first_step_s)
            if cap.ok and cap.peak_memory_bytes:
                ref_peaks.append(int(cap.peak_memory_bytes))
            ref_losses.append(tuple(cap.losses) if cap.ok else ())
            self.left = runs_left(r, planned, sum(v.active for v in running), 0)
            # NOTE: a stage runs its reference once more than its rounds (the closing run); counted
            # as the rounds, the closing run read "baseline 3/3" a second time.
            self.emit(TrialProgress(
                fix=shown, repeat=r + 1, repeats=planned + 1, samples_per_s=ref_rates[-1], stage=stage,
                message="" if cap.ok else f"reference run failed: {failure_reason(cap)}",
            ))
            if last:
                self.current = []
                break
            if r == planned:
                running = still_running([v for v in running if v.active and (v.anchor or self._more(v))])
                # NOTE: an extra round is paid for by the budget, or not run.
                if not running or planned >= self.max_repeats or not self.affords(len(running) + 1):
                    self.current = []
                    break
                planned += 1
            elif r >= MIN_PAIRS:
                for v in running:
                    # NOTE: runs that disagree are judged by their range, never stopped on an interval.
                    if (
                        self.early_stop and v.active and not v.anchor and not disagree(against_partner(v))
                        and decides(estimate_of(v, self.min_effect, 0.05 / self.looks), self.min_effect)
                    ):
                        v.early = r
                    elif self.early_stop:
                        stop_if_outrun(v, self.current, self.min_effect, 0.05 / self.looks, r)
                running = still_running([v for v in running if v.active and not v.early])
                if not running or not self.affords(len(running) + 1):
                    for v in running:  # the budget ends the measurement: say so in its reason
                        v.early, v.cut = r, True
                    self.current = []
                    break
            order = running if r % 2 == 0 else list(reversed(running))
            queue = still_running([v for v in order if v.active])
            for i, v in enumerate(queue):
                if v.active and (v.partner is None or v.partner.active):
                    self.left = runs_left(r, planned, len(queue), i + 1)
                    self._run_variant(
                        v, r, planned, ref_rates, ref_losses[-1] or self.baseline_losses, stage,
                        v.partner.loaders if v.partner else ref_loaders, ref_counting,
                    )
            r += 1
            # NOTE: every variant failed or lost its partner: one reference run closes the round
            # just run, and no round follows (none could be paired)
            if not still_running([v for v in running if v.active]):
                last = bool(queue)
                if not last:
                    self.current = []
                    break

    def _more(self, v: Variant) -> bool:
        """Whether ``v`` gets a round past the planned ones: still a possible win, and not outrun."""
        if not worth_more_rounds(v, self.min_effect):
            return False
        return not (self.early_stop and stop_if_outrun(v, self.current, self.min_effect, 0.05, len(v.rates)))

    @property
    def looks(self) -> int:
        """Early looks a measurement may take (after :data:`MIN_PAIRS` pairs up to ``repeats``)."""
        return max(1, self.repeats - MIN_PAIRS + 1)

    def _run_variant(
        self, v: Variant, r: int, n: int, ref_rates: list[float | None],
        ref_losses: tuple[float | None, ...], stage: str, ref_loaders: tuple[Any, ...] = (),
        ref_counting: Counting | None = None,
    ) -> None:
        cap = self.run(f"{safe_name(v.label)}{'-ref' if v.anchor else ''}-{r + 1}", v.requests, v.overrides,
                       flight=TrialProgress(fix=v.label, repeat=r + 1, repeats=n, stage=stage))
        note = cap.fix_notes.get(v.fix) if len(v.fixes) <= 1 else None
        if note is not None:
            v.note = note.detail
        message = ""
        if not cap.ok:
            v.failure = failure_reason(cap)
            message = f"failed: {v.failure}"
        elif note is not None and note.state is NoteState.SKIPPED:
            v.skip = note.detail
            message = f"skipped: {v.skip}"
        elif (recompiled := recompile_failure(cap)) is not None:
            v.failure = recompiled
            message = f"failed: {v.failure}"
        elif (over := over_budget(cap.peak_memory_bytes, self.spec.memory_budget_bytes)) is not None:
            v.failure = over
            message = f"failed: {v.failure}"
        elif ref_counting is not None and (mismatch := ref_counting.mismatch(cap, v.fixes)) is not None:
            v.failure = mismatch
            message = f"failed: {v.failure}"
        elif (
            len(v.fixes) == 1 and catalog.get(v.fix).changes_loader
            and ref_loaders and tuple(cap.dataloaders) == ref_loaders
        ):
            v.skip = "the DataLoader settings did not change: the fix found nothing to apply"
            message = f"skipped: {v.skip}"
        else:
            rate = self.rate(cap)
            v.loaders = v.loaders or tuple(cap.dataloaders)
            if rate is None:
                v.failure = "the run recorded no timed steps"
            self.rung_runs.setdefault(v.label, []).append(
                (median(cap.timed.step_times_ms), cap.timed.epoch_ends, cap.step_source))
            while len(v.rates) < r:
                v.rates.append(None)
            v.rates.append(rate)
            v.facts.append(facts_of(cap, rate))
            if cap.timed.time_to_first_step_s is not None:
                v.ttfs.append(cap.timed.time_to_first_step_s)
            if cap.peak_memory_bytes:
                v.peaks.append(int(cap.peak_memory_bytes))
                v.memory_kind = cap.memory_kind
            base_losses = ref_losses or self.baseline_losses
            check = loss_parity(base_losses, cap.losses, v.loss_rtol)
            if check.max_rel_diff is not None:
                v.loss_diffs.append(check.max_rel_diff)
            if check.failure is not None:
                v.failure = check.failure
                message = f"failed: {check.failure}"
        est = estimate_of(v, self.min_effect) if v.partner else paired_estimate(ref_rates + [None], v.rates,
                                                                                 self.min_effect)
        self.emit(TrialProgress(
            fix=v.label, repeat=r + 1, repeats=n, estimate=est.speedup,
            samples_per_s=self.rate(cap), stage=stage, message=message,
        ))

    def trial(self, v: Variant) -> Trial:
        """Turn a measured variant into a :class:`Trial` with its verdict (a partnered one: against its partner)."""
        v = against_partner(v)
        ref_rates = v.ref_rates
        ratios = paired_ratios(ref_rates, v.rates)
        base_ttfs = median(v.ref_ttfs)
        loss = max(v.loss_diffs) if v.loss_diffs else None
        peak, base_peak = median(v.peaks), median(v.ref_peaks)
        common = {
            "fix": v.fix, "safety": v.safety, "params": dict(v.params),
            "fixes": v.fixes or (v.fix,), "reference": v.reference or None,
            "loss_max_rel_diff": loss, "time_to_first_step_s": median(v.ttfs),
            "baseline_time_to_first_step_s": base_ttfs,
            "peak_memory_bytes": None if peak is None else int(peak),
            "baseline_peak_memory_bytes": None if base_peak is None else int(base_peak),
            "memory_kind": v.memory_kind, **arm_medians(v.facts, v.ref_facts),
        }
        if v.skip is not None:
            return Trial(**common, verdict=SKIPPED, reason=v.skip, repeats=0)
        if v.failure is not None:
            return Trial(**common, verdict=FAILED, reason=v.failure, repeats=len(ratios))
        spread = disagree(v)
        if spread:
            est = range_estimate(ref_rates, v.rates, self.min_effect)
        else:
            est = estimate_of(v, self.min_effect)
        used = [a for a in ref_rates if a]
        verdict, why = est.verdict, est.reason
        if spread:
            why = "; ".join(x for x in (spread_reason(v, self.unit or "samples/s"), why) if x)
        if len(common["fixes"]) == 1 and catalog.get(v.fix).objective is Objective.MEMORY:
            verdict, why = judge_memory(common["peak_memory_bytes"], common["baseline_peak_memory_bytes"], est)
        reason = "; ".join(r for r in (describe(v), why, change_note(v.facts, v.ref_facts)) if r)
        return Trial(
            **common,
            baseline_samples_per_s=median(used),
            samples_per_s=median([x for x in v.rates if x]),
            speedup=est.speedup, ci_low=est.ci_low, ci_high=est.ci_high,
            interval=Interval.RUN_RANGE if spread else Interval.CI95,
            verdict=verdict, reason=reason, repeats=est.pairs,
        )

