"""Run the original and the patched script as whole processes, in alternating pairs.

Each run is a fresh interpreter in its own process group (``advisor._proc.own_group``), ended
whole on Ctrl-C; its output goes to a log in the run folder. The order flips every pair, so a
machine that slows down over the minutes weighs on both sides alike, and the load average is
read before each pair: absolute times here move by 15% quiet and far more beside a busy process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from advisor._proc import kill_group, own_group
from advisor.errors import ScriptFailed
from advisor.verify.model import Pair


def timed_run(script: Path, source: Path, args: Sequence[str], cwd: Path, log: Path) -> float:
    """Run ``source`` as ``python script args`` from ``cwd`` and return its wall seconds.

    Raises:
        ScriptFailed: the script exited non-zero (its log's path is in the message).
        KeyboardInterrupt: the process group is ended first.
    """
    cmd = [sys.executable, "-m", "advisor.verify.runner", str(script), str(source), *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=partial(own_group, signal.SIGKILL))  # noqa: PLW1509 - setpgid and prctl only
        try:
            code = proc.wait()
        except BaseException:
            kill_group(proc.pid)
            proc.wait()
            raise
        wall = time.perf_counter() - t0
    kill_group(proc.pid)  # what the script left running in its group (a worker it never joined)
    if code != 0:
        raise ScriptFailed(f"{script.name} exited with code {code} in a timed run; its output is in {log}")
    return wall


def time_pairs(
    script: Path, original: Path, fixed: Path, args: Sequence[str], cwd: Path, logs: Path, pairs: int,
    on_pair: Callable[[Pair], None],
) -> None:
    """Time ``pairs`` pairs, the patched run first in every other pair; ``on_pair`` gets each as it ends."""
    for i in range(pairs):
        load = os.getloadavg()[0]
        fixed_first = i % 2 == 1
        times: dict[str, float] = {}
        for side in (("fixed", "original") if fixed_first else ("original", "fixed")):
            times[side] = timed_run(script, fixed if side == "fixed" else original, args, cwd,
                                    logs / f"{side}-{i + 1}.log")
        on_pair(Pair(times["original"], times["fixed"], round(load, 2), fixed_first))
