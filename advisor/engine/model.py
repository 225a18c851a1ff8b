"""The rule engine's output: :class:`Finding` per rule hit and a :class:`Diagnosis` over them."""

from __future__ import annotations

from dataclasses import dataclass

from advisor._vocab import Vocab


class Category(Vocab):
    """The fixed vocabulary of bottleneck categories; reports and JSON use exactly these words."""

    DATA_LOADING = "data_loading"
    HOST_TO_DEVICE = "host_to_device"
    SYNC = "sync"
    SMALL_KERNELS = "small_kernels"
    MEMORY = "memory"
    COMPUTE = "compute"
    COMMUNICATION = "communication"
    HOST = "host"


class Severity(Vocab):
    """How serious a finding is, lowest first (``--fail-on`` compares by this order)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Safety(Vocab):
    """Whether a fix keeps numerics (``safe``) or may change numerics or memory (``unsafe``)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class ImpactBasis(Vocab):
    """How a rule's ``impact`` share of the step was obtained (``impact_basis:`` in a rule file).

    The primary choice ranks a measured share above a bound (:func:`advisor.engine.evaluate.choose_primary`).
    """

    MEASURED = "measured"  # time the trace measured the step spending on this cause (a wait, a copy)
    BOUND = "bound"  # a model's upper bound on what the fix could recover (per-op overhead, precision)
    NONE = "none"  # no share claimed: only a fix trial measures it (impact is 0)


class LocationKind(Vocab):
    """Which source locations a rule's finding points at (``locations:`` in a rule file)."""

    SYNC = "sync"
    ITEM = "item"
    H2D = "h2d"
    D2H = "d2h"
    DATA_LOADING = "data_loading"
    HOT = "hot"
    PREPROCESS = "preprocess"  # GPU idle in input preprocessing (advisor.metrics.idle)
    HOST = "host"  # GPU idle in other host work (advisor.metrics.idle)
    MISALIGNED = "misaligned"  # a tensor-core-unfriendly GEMM (advisor.metrics.tensorcore)
    MEMORY = "memory"  # a line holding memory live at the peak (advisor.metrics.memory_lines)
    PERIODIC = "periodic"  # work between steps every N steps (advisor.metrics.periodic)
    TINY_OPS = "tiny_ops"  # runs of tiny operators (advisor.metrics.tiny_ops)
    GENERATION = "generation"  # a line generating without a KV cache in periodic work (advisor.metrics.generation)
    ONE_SAMPLE = "one_sample"  # a line inferring one sample per call in periodic work (advisor.metrics.generation)


CATEGORIES: tuple[str, ...] = Category.values()
"""Category words in declaration order (ties in the primary choice go to the first)."""
SEVERITIES: tuple[str, ...] = Severity.values()
"""Severity words, lowest first."""


def severity_rank(severity: str) -> int:
    """Position of ``severity`` among :class:`Severity` (higher is worse); -1 when unknown.

    An unknown word (a report from a newer advisor) ranks below every known one: it sorts last
    and never trips ``--fail-on``, rather than being taken for the most severe.
    """
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


@dataclass(frozen=True)
class FixRef:
    """A fix a finding suggests: a registered fix id and its safety."""

    id: str
    safety: Safety


@dataclass(frozen=True)
class Location:
    """A ``file:line`` in the user's code (line 0: the function is known, its line is not)."""

    file: str
    line: int
    function: str = ""

    @property
    def where(self) -> str:
        """``file:line``, or the file alone when the line is not known."""
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Finding:
    """One rule that fired, with the evidence that made it fire.

    Attributes:
        code: Rule code (e.g. ``DL001``).
        name: Rule slug (e.g. ``dataloader-starved-step``).
        category: The bottleneck :class:`Category`.
        severity: The finding's :class:`Severity`.
        message: The rule's message template filled with the evidence.
        evidence: Metric name -> value used by the condition and message.
        locations: Where in the user's code (may be empty).
        fixes: Fixes to try, with their safety.
        impact_frac: Share of step time this finding could recover (for the primary choice).
        impact_basis: How ``impact_frac`` was obtained; a report from before it was recorded
            reads as ``bound``, the weaker claim.
    """

    code: str
    name: str
    category: Category
    severity: Severity
    message: str
    evidence: dict[str, float | int | str | None]
    locations: tuple[Location, ...] = ()
    fixes: tuple[FixRef, ...] = ()
    impact_frac: float = 0.0
    impact_basis: ImpactBasis = ImpactBasis.BOUND


@dataclass(frozen=True)
class Primary:
    """The primary bottleneck: the category with the most recoverable step time.

    ``estimated_speedup`` is the Amdahl bound ``1 / (1 - share)`` if that time went away.
    """

    category: Category
    share: float
    estimated_speedup: float


@dataclass(frozen=True)
class Diagnosis:
    """All findings for one input, sorted by severity, code and location, plus the primary."""

    findings: tuple[Finding, ...]
    primary: Primary | None
    breakdown: dict[str, float]
    rules_evaluated: int = 0
    suppressed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    """Information for the report, not a problem to fix (e.g. findings hidden by comments)."""
    evaluated: tuple[str, ...] = ()
    """Codes of the rules evaluated (the selection), fired or not."""


@dataclass(frozen=True)
class EngineConfig:
    """Which rules run, with ruff's vocabulary (CLI over config; see :mod:`advisor.config`).

    Attributes:
        select: Codes or prefixes to run (``None``: every stable rule; ``ALL``: every rule).
        extend_select: Codes or prefixes added to the selection.
        ignore: Codes or prefixes to skip (the more specific selector wins over a broader one).
        preview: Also run ``preview`` rules.
        layers: Lower-precedence selections applied first (e.g. ``[tool.advisor]`` under the
            CLI's flags); each is itself an EngineConfig without layers.
        sources: Where each setting came from, for messages (e.g. ``pyproject.toml``).
    """

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    preview: bool = False
    layers: tuple[EngineConfig, ...] = ()
    sources: tuple[str, ...] = ()


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> tuple[Finding, ...]:
    """Sort by severity (highest first), then code, then first location: stable output for diffs."""

    def key(f: Finding) -> tuple[int, str, str, int]:
        loc = f.locations[0] if f.locations else None
        return (-severity_rank(f.severity), f.code, loc.file if loc else "", loc.line if loc else 0)

    return tuple(sorted(findings, key=key))
