"""A deterministic fake of the capture stage for the trial loop."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from advisor.capture.model import (
    DataLoaderInfo,
    Environment,
    RunCapture,
    RunSpec,
    ScriptError,
    TimedPhase,
)
from advisor.capture.records import OUT_OF_MEMORY
from advisor.engine.model import FixRef
from advisor.fixes.model import FixOutcome, Trial

Effect = float | Callable[[dict], float]


@dataclass
class FakeRunner:
    """Returns captures whose throughput is ``base`` times each applied fix's effect.

    Noise is deterministic: a +-``noise`` factor derived from the run directory's name.
    """

    effects: dict[str, Effect] = field(default_factory=dict)
    base: float = 100.0
    noise: float = 0.01
    crash: set[str] = field(default_factory=set)
    nan_loss: set[str] = field(default_factory=set)
    not_applicable: dict[str, str] = field(default_factory=dict)
    inert: set[str] = field(default_factory=set)  # notes say "installed:", nothing changes
    workers: int = 0
    batches_per_step: int = 1
    device: str = "cpu"
    cpu_count: int = 2
    step_source: dict[str, str] = field(default_factory=dict)  # fix id -> step source it causes
    memory: dict[str, Effect] = field(default_factory=dict)  # fix id -> factor on the peak memory
    base_memory: int = 100 * 2**20
    calls: list[RunSpec] = field(default_factory=list)
    epoch_ends: int = 1  # epochs ended in each run's timed steps (0: persistent_workers is inert)
    step_ms: dict[str, float] = field(default_factory=dict)  # fix id -> median step ms of its runs
    # fix ids whose runs go over the memory budget between two of the watchdog's polls: they end
    # normally, their own peak (the child's maximum) over the budget
    peak_between_polls: set[str] = field(default_factory=set)

    def __call__(self, spec: RunSpec) -> RunCapture:
        self.calls.append(spec)
        ids = [f.id for f in spec.fixes]
        run_dir = str(spec.out_dir)
        env = Environment(device=self.device, cpu_count=self.cpu_count)
        notes = {f.id: self.not_applicable.get(f.id, "applied: fake") for f in spec.fixes}
        notes.update({f.id: "installed: waiting" for f in spec.fixes if f.id in self.inert})
        applied = {
            f.id: f.params for f in spec.fixes
            if not notes[f.id].startswith(("not applied", "installed"))
        }
        loader = DataLoaderInfo(batch_size=8, num_workers=self.workers)
        if "dataloader_workers" in applied:
            loader = replace(loader, num_workers=applied["dataloader_workers"]["num_workers"])
        if "prefetch_factor" in applied:
            loader = replace(loader, prefetch_factor=applied["prefetch_factor"].get("prefetch_factor", 4))
        if "persistent_workers" in applied:
            loader = replace(loader, persistent_workers=True)
        if "batch_fusion" in applied:
            loader = replace(loader, batch_size=8 * applied["batch_fusion"]["factor"])
        if "larger_batch" in applied:
            loader = replace(loader, batch_size=loader.batch_size * applied["larger_batch"]["factor"])
        if "fit_accumulation" in applied:
            loader = replace(loader, batch_size=loader.batch_size // applied["fit_accumulation"]["k"])
        loaders = (loader,)
        if notes and all(n.startswith("not applied") for n in notes.values()):
            notes = {k: "not applied: " + v.split(": ", 1)[1] for k, v in notes.items()}
        for fix in ids:
            if fix in self.crash:
                return RunCapture(
                    run_dir=run_dir, status="crashed", exit_code=1, environment=env,
                    error=ScriptError(type="RuntimeError", message="out of memory"), fix_notes=notes,
                )
        rate = self.base
        for f in spec.fixes:
            if f.id not in applied:
                continue
            effect = self.effects.get(f.id, 1.0)
            rate *= effect(f.params) if callable(effect) else effect
        jitter = (zlib.crc32(spec.out_dir.name.encode()) % 2001 - 1000) / 1000 * self.noise
        rate *= 1 + jitter
        losses = [2.3 - 0.1 * i for i in range(spec.record_loss_steps)]
        if any(f in self.nan_loss for f in ids) and losses:
            losses[-1] = float("nan")
        n = spec.timed_steps
        peak = float(self.base_memory)
        for fix_id in applied:
            m = self.memory.get(fix_id, 1.0)
            peak *= m(applied[fix_id]) if callable(m) else m
        if spec.memory_budget_bytes and peak > spec.memory_budget_bytes and not self.peak_between_polls & set(ids):
            return RunCapture(
                run_dir=run_dir, status="crashed", exit_code=-15, environment=env, dataloaders=loaders,
                fix_notes=notes, peak_memory_bytes=int(peak), memory_kind="rss",
                error=ScriptError(type=OUT_OF_MEMORY, message="over the memory budget"),
            )
        source = next((self.step_source[i] for i in ids if i in self.step_source), "optimizer")
        return RunCapture(
            run_dir=run_dir,
            status="stopped",
            step_source=source,
            exit_code=0,
            environment=env,
            dataloaders=loaders,
            fix_notes=notes,
            losses=tuple(losses),
            peak_memory_bytes=int(peak),
            memory_kind="rss",
            timed=TimedPhase(
                step_times_ms=(next((self.step_ms[i] for i in ids if i in self.step_ms), 8000.0 / rate),) * n,
                epoch_ends=self.epoch_ends,
                samples=(loader.batch_size * self.batches_per_step,) * n,
                samples_per_s=rate,
                steps_per_s=rate / (loader.batch_size * self.batches_per_step),
                time_to_first_step_s=3.0 if "torch_compile" in ids else 1.0,
                batches=(self.batches_per_step,) * n,
            ),
        )

    def runs_with(self, fix: str) -> int:
        return sum(1 for s in self.calls if any(f.id == fix for f in s.fixes))


def refs(*ids: str) -> list[FixRef]:
    """FixRefs for these fix ids, each with its catalog safety."""
    from advisor.fixes import catalog

    return [FixRef(i, catalog.get(i).safety) for i in ids]


def by_fix(outcome: FixOutcome) -> dict[str, Trial]:
    """A loop outcome's trials by fix name."""
    return {t.fix: t for t in outcome.trials}
