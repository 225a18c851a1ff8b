"""A fake capture for sweep tests: throughput, memory, losses and FLOPs follow the cell's settings."""

from __future__ import annotations

import json
from pathlib import Path

from advisor.capture.model import (
    DataLoaderInfo,
    Environment,
    RunCapture,
    RunSpec,
    ScriptConfig,
    ScriptError,
    TimedPhase,
)
from advisor.capture.peak import MatmulPeak
from advisor.capture.records import OUT_OF_MEMORY, ScriptOption
from advisor.sweep.child import ACCUMULATE, COUNT_FLOPS

FLOPS_PER_SAMPLE = 3e9
PEAKS = (MatmulPeak("fp32", 2, 2.0), MatmulPeak("bf16", 2, 4.0))  # above what the fake cells reach


class MemoryRunner:
    """Throughput and memory grow with the batch factor; over a budget, out of memory.

    Accumulation ``a`` (run-time request, or ``--accum A`` among the args) makes a step hold
    ``a`` batches at the same memory; a FLOP-count request writes ``FLOPS_PER_SAMPLE`` times the
    step's samples where the child would. A ``--patch-size S`` among the args (or the script's own
    option's value) adds ``S`` MiB, and the counted input is a batch of ``S``-sided volumes.
    """

    def __init__(
        self, budget: int | None = None, stop_at: int | None = None, options: tuple[ScriptOption, ...] = (),
        own_accumulation: int = 1, flops: bool = True, peaks: tuple[MatmulPeak, ...] = PEAKS,
    ) -> None:
        self.budget = budget
        self.stop_at = stop_at  # raise KeyboardInterrupt on this call (1-based): a Ctrl-C mid-run
        self.options = options  # the script's own command-line options, as the capture records them
        self.own_accumulation = own_accumulation  # backward calls per optimizer step in the script's loop
        self.flops = flops  # write the FLOP count where the child would
        self.peaks = peaks  # the matmul rates the capture says it measured
        self.calls: list[RunSpec] = []

    def __call__(self, spec: RunSpec) -> RunCapture:
        self.calls.append(spec)
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        factor = next((f.params["factor"] for f in spec.fixes if f.id == "larger_batch"), 1)
        accum = next((f.params["factor"] for f in spec.fixes if f.id == ACCUMULATE), 1)
        runtime_accum = accum > 1
        if "--accum" in spec.args:
            accum = int(spec.args[spec.args.index("--accum") + 1])
        bf16 = any(f.id == "bf16_autocast" for f in spec.fixes)
        own_size = next((o.value for o in self.options if o.name == "patch_size"), None)
        size = int(spec.args[spec.args.index("--patch-size") + 1]) if "--patch-size" in spec.args else own_size
        peak = (300 + 64 * factor + (size or 0)) * 2**20
        if self.budget is not None and peak > self.budget:
            return RunCapture(run_dir=str(spec.out_dir), status="crashed",
                              error=ScriptError(type=OUT_OF_MEMORY, message="over the memory budget"))
        rate = 100.0 * factor ** 0.5 * (1.3 if bf16 else 1.0) * (1 + 0.1 * (accum - 1)) * (1 + (len(self.calls) % 3) / 100)
        samples = 8 * factor * accum
        for f in spec.fixes:
            if f.id == COUNT_FLOPS and self.flops:
                path = Path(f.params["path"])
                path.parent.mkdir(parents=True, exist_ok=True)
                shape = [8 * factor, 1, size, size, size] if size else [8 * factor, 4]
                path.write_text(json.dumps({"flops": FLOPS_PER_SAMPLE * samples, "step": f.params["step"],
                                            "input_shape": shape, "input_integer": False}))
        return RunCapture(
            run_dir=str(spec.out_dir), status="stopped", step_source="optimizer", wall_s=1.0,
            dataloaders=(DataLoaderInfo(batch_size=8 * factor),), peak_memory_bytes=peak, memory_kind="rss",
            environment=Environment(device="cpu", matmul_peaks=self.peaks),
            script_config=ScriptConfig(options=self.options),
            # NOTE: the capture sums a step's micro-batch losses; a script divides them by its
            # accumulation itself, the run-time accumulation does not.
            losses=tuple((accum if runtime_accum else 1) * (2.0 - 0.1 * i + (0.01 if bf16 else 0.0)) for i in range(spec.record_loss_steps)),
            timed=TimedPhase(
                step_times_ms=(10.0,) * 20, samples=(samples,) * 20, samples_per_s=rate,
                backwards=(self.own_accumulation,) * 20, optimizers_per_step=1,
            ),
        )
