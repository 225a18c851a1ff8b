"""The rule engine's output: :class:`Finding` per rule hit and a :class:`Diagnosis` over them."""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES: tuple[str, ...] = (
    "data_loading",
    "host_to_device",
    "sync",
    "small_kernels",
    "memory",
    "compute",
    "communication",
)
"""The fixed vocabulary of bottleneck categories; reports and JSON use exactly these words."""

SEVERITIES: tuple[str, ...] = ("info", "warning", "error")
"""Severities, lowest first (``--fail-on`` compares by this order)."""


@dataclass(frozen=True)
class FixRef:
    """A fix a finding suggests: a registered fix id and its safety (``safe`` or ``unsafe``)."""

    id: str
    safety: str


@dataclass(frozen=True)
class Location:
    """A ``file:line`` in the user's code."""

    file: str
    line: int
    function: str = ""


@dataclass(frozen=True)
class Finding:
    """One rule that fired, with the evidence that made it fire.

    Attributes:
        code: Rule code (e.g. ``DL001``).
        name: Rule slug (e.g. ``dataloader-starved-step``).
        category: One of :data:`CATEGORIES`.
        severity: One of :data:`SEVERITIES`.
        message: The rule's message template filled with the evidence.
        evidence: Metric name -> value used by the condition and message.
        locations: Where in the user's code (may be empty).
        fixes: Fixes to try, with their safety.
        impact_frac: Share of step time this finding could recover (for the primary choice).
    """

    code: str
    name: str
    category: str
    severity: str
    message: str
    evidence: dict[str, float | int | str | None]
    locations: tuple[Location, ...] = ()
    fixes: tuple[FixRef, ...] = ()
    impact_frac: float = 0.0


@dataclass(frozen=True)
class Primary:
    """The primary bottleneck: the category with the most recoverable step time.

    ``estimated_speedup`` is the Amdahl bound ``1 / (1 - share)`` if that time went away.
    """

    category: str
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
