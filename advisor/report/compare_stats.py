"""Run-to-run statistics for ``advisor compare``: intervals over runs, the script's noise, the trial.

Steps inside one run are correlated and share whatever disturbed that run (another process, a
cold cache, the loader's workers starting), so an interval bootstrapped over one run's steps says
nothing about the next run. Here every figure is over *runs*:

* :func:`group_ratio`: the speedup between two groups of runs is the ratio of their geometric
  mean throughputs, and its 95% interval a Student-t interval on the difference of the mean log
  throughputs (variance pooled over both groups: runs of one script on one machine). The point
  is the interval's centre in log space, so it always lies inside it. It needs two runs on at
  least one side; with one run a side there is no interval.
* :func:`noise_from_values` / :func:`run_dir_noise`: for single runs, the spread of the diagnose's
  own baseline runs (``RUN/trials/baseline-*``, the unchanged script run again and again) is that
  script's run-to-run noise; a ratio of two single runs inside its 95% prediction band is noise.
* :func:`kept_trial`: ``RUN/kept`` of a diagnose was measured by the fix loop as an interleaved
  trial; its figure is shown beside compare's own.
* :func:`contention_warning`: a side measured while other work held the cores.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from advisor._num import finite, median
from advisor.fixes.model import Trial
from advisor.fixes.stats import MIN_EFFECT, t_quantile
from advisor.report.model import Report
from advisor.report.style import VERDICT_LABELS
from advisor.rundir import CAPTURE_FILE, KEPT_DIR, REPORT_FILE, TRIALS_DIR, read_json

BASELINE_PREFIX = "baseline-"
"""Trial folders of the unchanged script (``trials/baseline-1``...): the fix loop's baseline runs."""

DEFAULT_NOISE_BAND = 1.0
"""Relative change between two single runs treated as noise when that script's noise is unknown:
a factor of 2 either way.

Measured (docs/benchmarks-compare.md, ``benchmarks/compare_aa.py``): on this project's shared
2-core machine at load 4-8, 60 pairs of single ``diagnose --no-fixes`` runs of unchanged examples
were a median factor of 1.39 apart, 72% within a factor of 2, up to 9.9x (every run was flagged
busy, and compare calls no change from a busy run anyway); the issue behind this module saw 1.87x
between two such runs; on a quiet machine plain runs of one script stayed within 20%. A real
change smaller than a factor of 2 needs repeated runs (``--before``/``--after`` groups) or a
diagnose's measured noise to show."""

SUB_MS_STEP_MS = 1.0
SUB_MS_NOISE_BAND = 2.0
"""The band when the noise is unknown and a side's median step is under :data:`SUB_MS_STEP_MS`: a
factor of 3 either way.

A sub-millisecond step is per-op overhead, and its speed is the core's state, not the code's:
16 plain processes of one unchanged 0.5 ms MLP step (nothing else running, load 1.1-1.5) held
per-process medians from 0.45 to 1.14 ms (2.55x), and 20 quiet A/A pairs of the zoo's
tiny_model read 0.48x-2.10x; its pairs beyond a factor of 2 were steady runs, each at one level,
so neither the window nor the steadiness check can tell. The 48 ms and copy-bound examples
stayed within 1.36x over the same 20 pairs."""

MIN_EFFECT_BAND = MIN_EFFECT
"""The smallest band ever used, even when the baseline runs happened to agree closely: the fix
loop's minimum effect (3%), below which no change is called."""


@dataclass(frozen=True)
class Noise:
    """The run-to-run noise of one script, from repeated runs of the unchanged code.

    Attributes:
        values: Each run's throughput (samples/s, or steps/s when samples are not counted).
        sd_log: Sample standard deviation of the log throughputs.
        band: Relative half-width of the 95% prediction band on the ratio of two new single runs
            (``exp(t * sd_log * sqrt(2)) - 1``, at least :data:`MIN_EFFECT_BAND`).
        source: Where the runs came from, in words.
    """

    values: tuple[float, ...]
    sd_log: float
    band: float
    source: str

    @property
    def runs(self) -> int:
        """How many runs measured it."""
        return len(self.values)

    def describe(self) -> str:
        """One line: the runs' range and the band it gives."""
        lo, hi = min(self.values), max(self.values)
        spread = hi / lo - 1.0 if lo > 0 else float("inf")
        return (
            f"run-to-run noise of this script: {self.runs} {self.source} ran at {_fmt(lo)}–{_fmt(hi)} "
            f"({spread:.0%} apart): two single runs within {band_text(self.band)} of each other are noise"
        )


@dataclass(frozen=True)
class GroupRatio:
    """The speedup between two groups of runs, with its interval when the runs allow one.

    Attributes:
        speedup: Geometric mean after ÷ geometric mean before (>1 is faster).
        ci_low / ci_high: 95% t interval over runs (None with one run a side).
        before_mean / after_mean: Each group's geometric mean.
        n_before / n_after: Runs per group.
    """

    speedup: float
    ci_low: float | None
    ci_high: float | None
    before_mean: float
    after_mean: float
    n_before: int
    n_after: int


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def group_ratio(before: Sequence[float], after: Sequence[float]) -> GroupRatio | None:
    """Return the ratio of geometric means ``after / before`` and its 95% pooled-variance t interval over runs.

    Args:
        before: One positive throughput per run before the change (higher is faster).
        after: The same after it.

    Returns:
        None when a side has no positive value. The interval is None unless one side has 2+ runs
        (one degree of freedom at least); it is centred on the point in log space.
    """
    a = [v for v in before if v and v > 0 and math.isfinite(v)]
    b = [v for v in after if v and v > 0 and math.isfinite(v)]
    if not a or not b:
        return None
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    diff = statistics.fmean(lb) - statistics.fmean(la)
    df = len(a) + len(b) - 2
    lo = hi = None
    if df >= 1:
        ss = sum((x - statistics.fmean(la)) ** 2 for x in la) + sum((x - statistics.fmean(lb)) ** 2 for x in lb)
        # NOTE: variance pooled over both groups (one script, one machine: the same noise), so a
        # single run on one side still gets an interval from the other side's repeats.
        half = t_quantile(df) * math.sqrt(ss / df) * math.sqrt(1 / len(a) + 1 / len(b))
        lo, hi = math.exp(diff - half), math.exp(diff + half)
    return GroupRatio(math.exp(diff), lo, hi, _geomean(a), _geomean(b), len(a), len(b))


def noise_from_values(values: Sequence[float], source: str) -> Noise | None:
    """Return the noise of a script from throughputs of repeated unchanged runs (None with fewer than 2)."""
    vals = tuple(v for v in values if v and v > 0 and math.isfinite(v))
    if len(vals) < 2:
        return None
    sd = statistics.stdev(math.log(v) for v in vals)
    # NOTE: a prediction band for the log ratio of two *new* single runs: each carries the
    # script's variance once (sqrt 2), and the variance itself is estimated from few runs (t).
    band = math.exp(t_quantile(len(vals) - 1) * sd * math.sqrt(2.0)) - 1.0
    return Noise(vals, sd, max(band, MIN_EFFECT_BAND), source)


def _capture_rate(capture: dict, samples: bool) -> float | None:
    """Return a capture's timed throughput: samples/s, or steps/s from its median timed step."""
    timed = capture.get("timed") or {}
    if samples:
        return finite(timed.get("samples_per_s"))
    step = median(v for v in (finite(x) for x in timed.get("step_times_ms") or ()) if v and v > 0)
    return 1000.0 / step if step else None


def run_dir_noise(run_dir: str | Path) -> Noise | None:
    """Return the noise measured by a diagnose's fix loop: its baseline runs under ``RUN/trials/baseline-*``.

    ``RUN/kept`` reads its parent's. None without two such runs.
    """
    root = Path(run_dir)
    if root.name == REPORT_FILE:
        root = root.parent
    if root.name == KEPT_DIR and (root.parent / TRIALS_DIR).is_dir():
        root = root.parent
    trials = root / TRIALS_DIR
    if not trials.is_dir():
        return None
    found = (read_json(p / CAPTURE_FILE) for p in sorted(trials.glob(f"{BASELINE_PREFIX}*")) if p.is_dir())
    captures = [c for c in found if c]
    # NOTE: one unit for every run (samples/s only when all counted samples): mixing samples/s
    # and steps/s would measure the unit, not the noise.
    samples = all(finite((c.get("timed") or {}).get("samples_per_s")) for c in captures)
    rates = [_capture_rate(c, samples) for c in captures]
    return noise_from_values([r for r in rates if r], f"baseline runs of {root.name}'s fix trials")


def kept_trial(run_dir: str | Path) -> Trial | None:
    """Return the fix loop's interleaved trial of ``RUN/kept`` from ``RUN/report.json`` (None otherwise)."""
    root = Path(run_dir)
    if root.name == REPORT_FILE:
        root = root.parent
    if root.name != KEPT_DIR or not (root.parent / REPORT_FILE).is_file():
        return None
    try:
        parent = Report.load(root.parent)
    except Exception:  # noqa: BLE001 - a broken parent report only loses the side figure
        return None
    return parent.kept_trial


def _times(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f"[{lo:.2f}–{hi:.2f}]"


def default_noise_band(step_ms: Sequence[float | None]) -> float:
    """Return the band for single runs of unknown noise: wider when a side's median step is sub-millisecond."""
    known = [v for v in step_ms if v]
    return SUB_MS_NOISE_BAND if known and min(known) < SUB_MS_STEP_MS else DEFAULT_NOISE_BAND


def interval_notes(n_a: int, n_b: int, ci: tuple[float, float] | None, noise: Noise | None, band: float) -> list[str]:
    """Say what the interval is over, or why there is none and which noise band decided."""
    if ci is not None:
        return [f"95% interval: t interval over runs ({n_a} before, {n_b} after), on log throughput"]
    out = ["one run a side: no interval (the steps of one run share whatever disturbed it; repeat "
           "the runs and pass them as groups for one)"]
    if noise is not None:
        out.append(noise.describe())
    elif band >= SUB_MS_NOISE_BAND:
        out.append(
            f"this script's run-to-run noise is unknown and its steps take under {SUB_MS_STEP_MS:g} ms: changes "
            f"within {band_text(band)} are treated as noise (per-op-bound steps of unchanged code ran at "
            "per-process levels up to 2.55x apart on a quiet machine)"
        )
    else:
        out.append(
            f"this script's run-to-run noise is unknown (a diagnose with fix trials measures it): changes "
            f"within {band_text(band)} are treated as noise, the spread measured between single runs of unchanged "
            "examples on a busy machine"
        )
    return out


def trial_note(trial: Trial, speedup: float | None) -> str:
    """Say what the diagnose measured for the kept fixes, and whether this comparison agrees."""
    verdict = VERDICT_LABELS.get(str(trial.verdict), str(trial.verdict))
    text = (
        f"the diagnose measured the kept fixes ({trial.fix}) at {_times(trial.speedup)} {_ci(trial.ci_low, trial.ci_high)} "
        f"{verdict} over {trial.repeats} interleaved run pair(s): the figure to trust"
    ).replace("  ", " ")
    one = one_pair_range(trial)
    if one is not None:
        text += f"; one pair of single runs, as this comparison is, falls within {_ci(*one)} (95%)"
        if speedup is not None and not one[0] <= speedup <= one[1]:
            text += (f"; this comparison's {_times(speedup)} lies outside it (one profiled run of the kept fixes "
                     "against the baseline capture, not interleaved)")
    return text


def one_pair_range(trial: Trial) -> tuple[float, float] | None:
    """Return where one new pair of single runs should fall, by the trial's own measurement (95%).

    The trial's interval is for its *mean* speedup over ``n`` pairs; a comparison of one run
    against one run is a single pair, whose spread is the pairs' own: the prediction interval
    ``mean ± t·s·sqrt(1 + 1/n)``, which is the confidence interval widened by ``sqrt(n + 1)``
    (on logs). A range over runs (``interval: run_range``) already spans single runs.
    """
    lo, hi, n = trial.ci_low, trial.ci_high, trial.repeats
    if lo is None or hi is None or lo <= 0 or hi <= 0 or not n:
        return None
    if str(trial.interval) == "run_range":
        return lo, hi
    centre, half = (math.log(lo) + math.log(hi)) / 2.0, (math.log(hi) - math.log(lo)) / 2.0
    widen = half * math.sqrt(n + 1)
    return math.exp(centre - widen), math.exp(centre + widen)


def contention_warning(report: Report) -> str | None:
    """Return the report's busy-machine warning, shortened to its figures, when it carries one."""
    if report.summary.get("contention_flag") != 1.0:
        return None
    text = next((w for w in report.warnings if "competed for the cores" in w), "")
    # NOTE: the report's warning goes on about the primary category; compare needs the figures.
    m = re.search(r"competed for the cores (\([^)]*\))", text)
    return "measured while other work competed for the cores" + (f" {m.group(1)}" if m else "")


def band_text(band: float) -> str:
    """Return a noise band in words: ``±25%``, or ``a factor of 2`` when it is 100% or more."""
    return f"±{band:.0%}" if band < 1.0 else f"a factor of {1 + band:.2g}"
