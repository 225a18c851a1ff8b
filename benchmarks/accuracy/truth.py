"""Truth without advisor: time a case's script plainly with its injection on and off.

The script's own truth mode (``ADVISOR_BENCH_TRUTH=<file>``) alternates rounds of steps with the
injection on and off inside one process and writes every step time, so a slow spell of the
machine falls on both. An injection set once at start (eight intra-op threads) cannot be switched
between rounds without measuring the switch, so it is timed in whole processes instead, on, off,
on, off (``ADVISOR_BENCH_FIXED``). The true share of the step is ``1 - off / on`` of the medians:
what removing the injection gives back, the figure advisor's Amdahl estimate stands for.
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
    """What the plain runs measured: median step with the injection on and off, and the share."""

    on_ms: float
    off_ms: float

    @property
    def share(self) -> float:
        """The step's share the injection costs (0 when switching it off did not help)."""
        return max(0.0, 1.0 - self.off_ms / self.on_ms) if self.on_ms > 0 else 0.0


def _run(script: Path, timeout: float, fixed: str | None = None) -> dict[str, list[float]]:
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
    if kind in PROCESS_LEVEL:
        on: list[float] = []
        off: list[float] = []
        for state in ("on", "off", "on", "off"):
            (on if state == "on" else off).extend(_run(script, timeout, state)[state])
        return Truth(statistics.median(on), statistics.median(off))
    times = _run(script, timeout)
    return Truth(statistics.median(times["on"]), statistics.median(times["off"]))
