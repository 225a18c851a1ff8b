"""The short texts of the fix loop: run labels and folder names, reasons, notes, and the diff.

Pure helpers the loop's parts share, so that a failure or a speedup reads the same in every
reason and note.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from advisor.capture.model import RunCapture, RunSpec
from advisor.fixes import catalog
from advisor.fixes.model import Trial


def failure_reason(cap: RunCapture) -> str:
    """Say why a run failed, naming its stderr log ("no timed steps" for a run that ended well but timed nothing)."""
    where = f" (see {Path(cap.run_dir) / cap.stderr_log})" if cap.run_dir else ""
    if cap.error is not None:
        return f"{cap.status}: {cap.error.type}: {cap.error.message}{where}"
    if cap.ok:
        return "no timed steps"
    return f"{cap.status} (exit code {cap.exit_code}){where}"


BASELINE_STAGES = ("on-top", "combined", "confirm")
"""The stages after the first that measure against the plain baseline, each in folders of its own."""

BASELINE_PREFIXES = ("baseline-", *(f"{stage}-baseline-" for stage in BASELINE_STAGES))
"""Trial folders of the unchanged script's runs (:func:`baseline_prefix`, numbered from 1)."""


def baseline_prefix(stage: str) -> str:
    """Name the plain baseline's run folders of a stage: ``baseline`` in the first, ``<stage>-baseline`` after it.

    A stage's folders never take another's: a later stage writing ``baseline-1`` again would
    replace the first stage's run.
    """
    return f"{stage}-baseline" if stage in BASELINE_STAGES else "baseline"


MAX_TIMED_COMPILES = 1
"""Graphs a run may compile inside its timed window before its speed is not the compiled speed.

One may be legitimate (a second graph the script reaches late, such as an evaluation pass); more
is a loop that keeps recompiling (a shape or guard that changes between steps)."""


def recompile_failure(cap: RunCapture) -> str | None:
    """Say why a run that compiled more than :data:`MAX_TIMED_COMPILES` graphs in its timed window failed (else None)."""
    if not (cap.ok and cap.timed.compiles > MAX_TIMED_COMPILES):
        return None
    return (
        f"compiled {cap.timed.compiles} graphs during its {len(cap.timed.step_times_ms)} timed steps: "
        "it keeps recompiling, so its steps time the compiler, not compiled code; a shape or guard "
        "that changes between steps is the finding (TORCH_LOGS=recompiles names it)"
    )


def times(x: float | None) -> str:
    """Write a speedup or ratio as ``1.23x`` (``n/a`` when unknown)."""
    return "n/a" if x is None else f"{x:.2f}x"


def safe_name(label: str) -> str:
    """Turn a trial label into a run folder's name: ``dataloader_workers@2`` -> ``dataloader_workers-w2``."""
    return label.replace("@x", "-x").replace("@", "-w").replace("+", "_").replace("/", "_")


def mib(n: float | None) -> str:
    """Write bytes as ``1,234 MiB`` (``n/a`` when unknown or zero)."""
    return "n/a" if not n else f"{n / 2**20:,.0f} MiB"


def since(t0: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Return the seconds from ``t0`` to now on ``clock``, rounded to the millisecond."""
    return round(clock() - t0, 3)


def label_of(t: Trial) -> str:
    """Name the run of a measured rung as its variant was named (``dataloader_workers@2``)."""
    return catalog.get(t.fix).run_label(dict(t.params))


def advice_note(advice: Sequence[Trial]) -> str:
    """Write the note naming the fixes offered as advice (never run)."""
    return f"advice, not measured: {', '.join(t.fix for t in advice)} (no safe run-time change; the diff includes it)"


def diff_text(spec: RunSpec, trials: Sequence[Trial], notes: list[str]) -> str:
    """Return the diff making ``trials`` permanent; a failure is a note, never a lost measurement."""
    try:
        from advisor.fixes.diff import make_diff

        return make_diff(Path(spec.script), list(trials))
    except Exception as exc:  # noqa: BLE001 - a diff problem must not lose the measurements
        notes.append(f"no diff: {type(exc).__name__}: {exc}")
        return ""
