"""What a verification measured and how it reads against the claim: one frozen record, saved as ``verify.json``."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from advisor._serde import dump_json
from advisor._vocab import Vocab
from advisor.fixes import stats

VERIFY_FILE = "verify.json"


class ClaimScope(Vocab):
    """What a claim covers."""

    RUN = "run"
    """The whole-run projection ("Kept, whole run"): what a plain timing measures."""
    STEPS = "steps"
    """The kept trial's step speedup, where the run's length was unknown: an upper bound for a whole run."""


class Agreement(Vocab):
    """How the plain timing reads against the report's claim."""

    AGREES = "agrees"
    """The two intervals overlap."""
    BELOW = "below the claim"
    """The plain runs' interval lies wholly under the claimed one: the report overstated the gain."""
    ABOVE = "above the claim"
    """The plain runs' interval lies wholly over it: the claim was conservative."""
    UNDECIDED = "undecided"
    """Fewer than two pairs, or no claim to set it against."""


@dataclass(frozen=True)
class Pair:
    """One pair of whole runs: the original and the patched script, wall seconds, and the load before them."""

    original_s: float
    fixed_s: float
    load: float
    fixed_first: bool

    @property
    def ratio(self) -> float:
        """How many times faster the patched run was."""
        return self.original_s / self.fixed_s


@dataclass(frozen=True)
class Claim:
    """What the report claimed for the kept fixes: the ratio with its interval, over ``scope`` (:class:`ClaimScope`)."""

    ratio: float
    low: float | None
    high: float | None
    scope: ClaimScope


@dataclass(frozen=True)
class Verification:
    """The plain timing of a run's kept fixes beside its claim."""

    run_dir: str
    script: str
    args: tuple[str, ...]
    cwd: str
    kept: tuple[str, ...]
    claim: Claim | None
    pairs: tuple[Pair, ...] = ()
    complete: bool = True

    @property
    def estimate(self) -> tuple[float | None, float | None, float | None]:
        """The geometric mean of the pairs' ratios and its 95% t-interval (None where fewer than two pairs).

        The interval is the fix loop's over log-ratios (:func:`advisor.fixes.stats.estimate`),
        around the mean of the logs; the point is that mean, where the loop gives the median.
        """
        ratios = [p.ratio for p in self.pairs if p.original_s > 0 and p.fixed_s > 0]
        if not ratios:
            return None, None, None
        interval = stats.estimate(ratios)
        return math.exp(statistics.fmean(math.log(r) for r in ratios)), interval.ci_low, interval.ci_high

    @property
    def agreement(self) -> Agreement:
        """How the plain timing reads against the claim (:class:`Agreement`)."""
        _, low, high = self.estimate
        claim = self.claim
        if low is None or high is None or claim is None:
            return Agreement.UNDECIDED
        c_low = claim.low if claim.low is not None else claim.ratio
        c_high = claim.high if claim.high is not None else claim.ratio
        if claim.scope == ClaimScope.STEPS:  # a bound: only a whole run faster than the steps contradicts it
            return Agreement.ABOVE if low > c_high else Agreement.AGREES
        if high < c_low:
            return Agreement.BELOW
        if low > c_high:
            return Agreement.ABOVE
        return Agreement.AGREES

    def save(self, run_dir: Path) -> Path:
        """Write ``verify.json`` into ``run_dir`` (atomically) and return its path."""
        path = Path(run_dir) / VERIFY_FILE
        dump_json({**asdict(self), "estimate": self.estimate, "agreement": self.agreement}, path)
        return path
