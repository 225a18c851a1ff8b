"""Rule selection with ruff's vocabulary: ``select``, ``extend-select``, ``ignore``, ``preview``.

Semantics (ruff's, as documented at https://docs.astral.sh/ruff/linter/#rule-selection):

* A selector is ``ALL``, a code (``DL001``), an alias, or a code prefix (``DL``, ``SY0``).
* Layers apply lowest precedence first (``[tool.advisor]``, then the command line). In each
  layer ``select`` (when given) replaces the selection carried from the layers below,
  ``extend-select`` adds to it, and ``ignore`` removes from it.
* Within a layer, when a rule matches both a selector and an ignore, the more specific one
  wins (``select = ["SY001"]`` with ``ignore = ["SY"]`` keeps SY001); on a tie, ignore wins.
* Without any ``select`` the default selection is every ``stable`` rule (plus the ``preview``
  ones in preview mode).
* ``preview`` rules run only with ``preview`` on, even when selected; ``deprecated`` rules
  run only when selected by their exact code.
* A selector that matches no rule produces a warning that starts with ``unknown rule code``
  and suggests close matches; here it never stops the run (the CLI's configuration,
  :func:`advisor.config.check_codes`, makes it an error unless asked to warn).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.engine.condition import did_you_mean
from advisor.engine.model import EngineConfig
from advisor.engine.ruleset import GROUPS, Rule, RuleSet


@dataclass(frozen=True)
class Selection:
    """The outcome of selecting rules.

    Attributes:
        selected: Rules to evaluate, sorted by code.
        deselected: Loaded rules that will not run (ignored, unselected or preview).
        warnings: Unknown selectors, with suggestions.
    """

    selected: tuple[Rule, ...]
    deselected: tuple[Rule, ...]
    warnings: tuple[str, ...]


def select_rules(ruleset: RuleSet, config: EngineConfig | None = None) -> Selection:
    """Apply ``config`` (and its lower layers) to ``ruleset``."""
    config = config or EngineConfig()
    rules = list(ruleset)
    warnings: list[str] = []
    layers = [*config.layers, config]
    default_statuses = ("stable", "preview") if config.preview else ("stable",)
    enabled: set[str] = {r.code for r in rules if r.status in default_statuses}
    exact_codes: set[str] = set()
    for index, layer in enumerate(layers):
        origin = _origin(config, index, len(layers))
        for key, selectors in (
            ("select", layer.select or ()),
            ("extend-select", layer.extend_select),
            ("ignore", layer.ignore),
        ):
            for selector in selectors:
                if not any(_specificity(selector, r, ruleset) >= 0 for r in rules):
                    warnings.append(_unknown(selector, key, origin, ruleset))
        chosen = (*(layer.select or ()), *layer.extend_select)
        exact_codes |= {r.code for r in rules for s in chosen if _specificity(s, r, ruleset) == 5}
        carried = set() if layer.select is not None else set(enabled)
        next_enabled: set[str] = set()
        for rule in rules:
            select_level = max((_specificity(s, rule, ruleset) for s in chosen), default=-1)
            if rule.code in carried and select_level < 0:
                select_level = -0.5  # carried from a lower layer: any matching ignore removes it
            if select_level == -1:
                continue
            ignore_level = max((_specificity(s, rule, ruleset) for s in layer.ignore), default=-1)
            if ignore_level >= 0 and ignore_level >= select_level:
                continue
            next_enabled.add(rule.code)
        enabled = next_enabled
    selected: list[Rule] = []
    deselected: list[Rule] = []
    for rule in rules:
        ok = rule.code in enabled
        if rule.status == "preview" and not config.preview:
            ok = False
        if rule.status == "deprecated" and rule.code not in exact_codes:
            ok = False
        (selected if ok else deselected).append(rule)
    return Selection(tuple(selected), tuple(deselected), tuple(dict.fromkeys(warnings)))


def _specificity(selector: str, rule: Rule, ruleset: RuleSet) -> float:
    """How specifically ``selector`` matches ``rule``: -1 no match, 0 ``ALL``, else its length."""
    sel = selector.strip().upper()
    if sel == "ALL":
        return 0
    if sel == rule.code or sel in rule.aliases:
        return 5
    if sel and rule.code.startswith(sel):
        return len(sel)
    return -1


UNKNOWN_PREFIX = "unknown rule code"
"""How a warning about a selector that matches no rule starts."""


def _unknown(selector: str, key: str, origin: str, ruleset: RuleSet) -> str:
    candidates = [*ruleset.codes, *ruleset.aliases, *GROUPS, "ALL"]
    hint = did_you_mean(selector.strip().upper(), candidates)
    return f"{UNKNOWN_PREFIX} {selector!r} in {key}{origin}{hint}"


def _origin(config: EngineConfig, index: int, count: int) -> str:
    if index < len(config.sources) and config.sources[index]:
        return f" ({config.sources[index]})"
    return ""
