"""A rule as the engine holds it: the :class:`Rule` record, its :class:`RuleStatus` and the :class:`RuleSet` registry.

:mod:`advisor.engine.rules` builds these from the YAML files and validates them; everything
else in the engine (selection, evaluation, suppression) reads rules through this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from advisor._vocab import Vocab
from advisor.engine.condition import Expression, did_you_mean
from advisor.engine.message import Template
from advisor.engine.model import Category, FixRef, ImpactBasis, LocationKind, Severity
from advisor.errors import RuleError, UsageError

GROUPS: dict[str, str] = {
    "DL": "data_loading",
    "HD": "host_to_device",
    "SY": "sync",
    "SK": "small_kernels",
    "ME": "memory",
    "CO": "compute",
    "CM": "communication",
    "HB": "host",
}
"""Code prefix (group) -> category. A rule's code prefix must match its category."""


class RuleStatus(Vocab):
    """A rule's life stage: ``preview`` rules run only with ``--preview``."""

    STABLE = "stable"
    PREVIEW = "preview"
    DEPRECATED = "deprecated"


_CODE_RE = re.compile(r"^[A-Z]{2}[0-9]{3}$")


@dataclass(frozen=True)
class Rule:
    """One validated rule, as loaded from its YAML file.

    Attributes:
        code: ``DL001`` style code; its two-letter prefix is the group.
        name: Kebab-case slug.
        summary: One line.
        category: Its :class:`~advisor.engine.model.Category`.
        severity: Its :class:`~advisor.engine.model.Severity`.
        status: :class:`RuleStatus` (``preview`` needs ``--preview``).
        when: Condition over declared metrics; the rule fires when it holds.
        impact: Share of step time the fix could recover (for the primary choice).
        impact_basis: How that share is obtained (:class:`~advisor.engine.model.ImpactBasis`).
        message: Template filled with the evidence.
        fixes: Fix ids (shared vocabulary) with their safety.
        why: Why it matters, and where each threshold comes from.
        example: Code that triggers the rule.
        instead: The code to write instead.
        references: URLs of the sources behind the thresholds and advice.
        locations: ``SourceLocation`` kinds to attach to a finding.
        aliases: Former codes that still select this rule.
        path: The file it was loaded from (for messages).
    """

    code: str
    name: str
    summary: str
    category: Category
    severity: Severity
    status: RuleStatus
    when: Expression
    impact: Expression
    impact_basis: ImpactBasis
    message: Template
    fixes: tuple[FixRef, ...]
    why: str
    example: str
    instead: str
    references: tuple[str, ...]
    locations: tuple[LocationKind, ...]
    aliases: tuple[str, ...] = ()
    path: str = ""

    @property
    def evidence_names(self) -> tuple[str, ...]:
        """Metric names the condition, impact and message read, sorted."""
        return tuple(sorted({*self.when.names, *self.impact.names, *self.message.names}))

    def doc(self) -> dict[str, Any]:
        """Describe the rule as JSON-able data (``advisor rule --format json``, generated docs)."""
        return {
            "code": self.code,
            "name": self.name,
            "summary": self.summary,
            "category": self.category,
            "severity": self.severity,
            "status": self.status,
            "when": self.when.source,
            "impact": self.impact.source,
            "impact_basis": self.impact_basis,
            "message": self.message.source,
            "fixes": [{"id": f.id, "safety": f.safety} for f in self.fixes],
            "why": self.why,
            "example": self.example,
            "instead": self.instead,
            "references": list(self.references),
            "locations": list(self.locations),
            "aliases": list(self.aliases),
        }


class RuleSet:
    """A registry of rules keyed by code; refuses duplicate codes, names and aliases."""

    def __init__(self, rules: tuple[Rule, ...] | list[Rule] = ()) -> None:
        self._rules: dict[str, Rule] = {}
        self._aliases: dict[str, str] = {}
        self._names: dict[str, str] = {}
        for rule in rules:
            self.register(rule)

    def register(self, rule: Rule) -> None:
        """Add ``rule``.

        Raises:
            RuleError: its code, an alias or its name is already taken.
        """
        for code in (rule.code, *rule.aliases):
            owner = self._rules.get(code) or self._rules.get(self._aliases.get(code, ""))
            if owner is not None:
                raise RuleError(
                    f"{rule.path}: code: duplicate code {code!r} (already used by {owner.path})"
                )
        if rule.name in self._names:
            other = self._rules[self._names[rule.name]]
            raise RuleError(f"{rule.path}: name: duplicate name {rule.name!r} (already used by {other.path})")
        self._rules[rule.code] = rule
        self._names[rule.name] = rule.code
        for alias in rule.aliases:
            self._aliases[alias] = rule.code

    def __iter__(self) -> Iterator[Rule]:
        """Rules sorted by code."""
        return iter(sorted(self._rules.values(), key=lambda r: r.code))

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, code: object) -> bool:
        return isinstance(code, str) and self.get(code) is not None

    def get(self, code: str) -> Rule | None:
        """Return the rule with this code, alias or name (case-insensitive code), or None."""
        key = code.strip()
        upper = key.upper()
        if upper in self._rules:
            return self._rules[upper]
        if upper in self._aliases:
            return self._rules[self._aliases[upper]]
        if key in self._names:
            return self._rules[self._names[key]]
        return None

    def lookup(self, code: str) -> Rule:
        """Like :meth:`get`, but an unknown code raises a UsageError with close matches."""
        rule = self.get(code)
        if rule is None:
            candidates = [*self._rules, *self._aliases, *self._names]
            hint = did_you_mean(code.upper() if _CODE_RE.match(code.upper()) else code, candidates)
            raise UsageError(f"unknown rule code {code!r}{hint}; `advisor rules` lists them all")
        return rule

    @property
    def codes(self) -> tuple[str, ...]:
        """Every code, sorted."""
        return tuple(sorted(self._rules))

    @property
    def aliases(self) -> dict[str, str]:
        """Alias -> current code."""
        return dict(self._aliases)
