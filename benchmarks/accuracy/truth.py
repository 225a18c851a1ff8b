"""Truth without advisor: time a case's script plainly with its injection on and off.

The script's own truth mode (``ADVISOR_BENCH_TRUTH=<file>``) alternates rounds of steps with the
injection on and off inside one process and writes every step time, so a slow spell of the
machine falls on both. An injection set once at start (eight intra-op threads) cannot be switched
between rounds without measuring the switch, so it is timed in whole processes instead, on, off,
on, off (``ADVISOR_BENCH_FIXED``). The injection's true share of the step is ``1 - off / on`` of
the medians: what removing the injection gives back, the figure advisor's Amdahl estimate stands
for.

The input path is timed too, whatever the kind: ``next()`` of the batch iterator (the DataLoader
with its collate, or the script's own assembly), injected work included. Its share of the step
with the injection on is the data-loading share advisor sees, so a case whose plain input costs
a real share is labelled by it (:func:`benchmarks.accuracy.score.expectation`), never assumed
free because nothing was injected there.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zoo import run_group  # a sibling script: kills the whole group on a timeout

PROCESS_LEVEL = ("oversubscribed",)


@dataclass(frozen=True)
class Truth:
    """What the plain runs measured: median step with the injection on and off, the input path, and the shares."""

    on_ms: float
    off_ms: float
    input_on_ms: float = 0.0
    """Median ``next()`` of the batch iterator with the injection on (part of ``on_ms``)."""

    @property
    def share(self) -> float:
        """The step's share the injection costs (0 when switching it off did not help)."""
        return max(0.0, 1.0 - self.off_ms / self.on_ms) if self.on_ms > 0 else 0.0

    @property
    def input_share(self) -> float:
        """The step's share spent in the input path, with the injection on (as advisor runs it)."""
        return min(1.0, self.input_on_ms / self.on_ms) if self.on_ms > 0 else 0.0


def _run(script: Path, timeout: float, fixed: str | None = None) -> dict[str, dict[str, list[float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "truth.json"
        env = {**os.environ, "ADVISOR_BENCH_TRUTH": str(out)}
        if fixed:
            env["ADVISOR_BENCH_FIXED"] = fixed
        proc = run_group([sys.executable, script.name], timeout, cwd=script.parent, env=env)
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"truth run of {script.name} exited {proc.returncode}: {tail[:200]}")
        return json.loads(out.read_text())


def measure(script: Path, kind: str, timeout: float = 300.0) -> Truth:
    """Time ``script`` plainly and return its :class:`Truth`."""
    times: dict[str, dict[str, list[float]]] = {"on": {"step": [], "input": []}, "off": {"step": [], "input": []}}
    runs = [_run(script, timeout, state) for state in ("on", "off", "on", "off")] if kind in PROCESS_LEVEL \
        else [_run(script, timeout)]
    for run in runs:
        for state, parts in run.items():
            for part, values in parts.items():
                times[state][part].extend(values)
    med = {state: {part: statistics.median(v) for part, v in parts.items()} for state, parts in times.items()}
    return Truth(med["on"]["step"], med["off"]["step"], med["on"]["input"])
