"""Rules as data: the YAML loader and validator that fill a :class:`~advisor.engine.ruleset.RuleSet`.

One YAML file per rule, ``rules/<category>/<CODE>.yaml``. Loading validates every key and
compiles ``when``, ``impact`` and ``message`` with the safe evaluator; any problem raises
:class:`~advisor.errors.RuleError` naming the file and the offending key, e.g.::

    rules/sync/SY001.yaml: when: unknown metric 'sync_cout' (did you mean 'sync_count'?)

Where the rules come from (:func:`rules_root`):

1. a source checkout or editable install: the repository's top-level ``rules/`` folder (next
   to ``pyproject.toml``, one level above the ``advisor`` package), so edits show at once;
2. an installed wheel: the package data ``advisor/_rules/`` (pyproject.toml maps the top-level
   ``rules/`` folder to the ``advisor._rules`` package when the wheel is built).

If neither exists the loader raises; there is no built-in fallback copy of the rules.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from advisor._paths import display_path
from advisor.engine.condition import ConditionError, did_you_mean, parse_expression
from advisor.engine.message import parse_template
from advisor.engine.model import (
    CATEGORIES,
    SEVERITIES,
    Category,
    FixRef,
    ImpactBasis,
    LocationKind,
    Safety,
    Severity,
)
from advisor.engine.ruleset import _CODE_RE, GROUPS, Rule, RuleSet, RuleStatus
from advisor.errors import RuleError
from advisor.metrics.registry import METRICS, is_declared

STATUSES: tuple[str, ...] = RuleStatus.values()
IMPACT_BASES: tuple[str, ...] = ImpactBasis.values()
LOCATION_KINDS: tuple[str, ...] = LocationKind.values()
"""``SourceLocation.kind`` values a rule may attach (see advisor.metrics.model)."""

REQUIRED_KEYS: tuple[str, ...] = (
    "code",
    "name",
    "summary",
    "category",
    "severity",
    "status",
    "when",
    "impact",
    "impact_basis",
    "message",
    "fixes",
    "why",
    "example",
    "instead",
    "references",
    "locations",
)
OPTIONAL_KEYS: tuple[str, ...] = ("aliases",)

MAX_RULE_FILE_BYTES = 256 * 1024
"""Largest rule file read (a rule is a page of YAML; a bigger one is a mistake or an attack)."""
# NOTE: libyaml's safe loader (PyYAML's wheels ship it) parses the rules ten times faster than the
# pure-Python one (about 0.1 s of every command's start); the same safe subset of YAML.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_LIST_ITEMS = 50
"""Most entries in a rule's list keys (aliases, references, fixes...)."""
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def checkout_rules_dir() -> Path | None:
    """Return the repository's ``rules/`` folder when running from a source checkout, else None."""
    import advisor

    repo = Path(advisor.__file__).resolve().parent.parent
    rules = repo / "rules"
    if rules.is_dir() and (repo / "pyproject.toml").is_file():
        return rules
    return None


def packaged_rules_dir() -> Any | None:
    """Return the rules shipped in the wheel (``advisor/_rules``) as a Traversable, or None."""
    try:
        candidate = importlib.resources.files("advisor") / "_rules"
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - advisor is importable here
        return None
    return candidate if candidate.is_dir() else None


def rules_root() -> Any:
    """Where the rules are: the checkout's ``rules/`` first, else the wheel's package data.

    Raises:
        RuleError: neither exists (a broken install); never falls back to a built-in copy.
    """
    root = checkout_rules_dir() or packaged_rules_dir()
    if root is None:
        import advisor

        raise RuleError(
            f"no rules folder found (looked for rules/ next to {Path(advisor.__file__).parent} "
            "and for the package data advisor/_rules); reinstall advisor"
        )
    return root


def load_rules(root: Any = None, fixes: Mapping[str, str] | None = None) -> RuleSet:
    """Load and validate every ``<category>/<CODE>.yaml`` under ``root`` (default: :func:`rules_root`).

    Args:
        root: The rules folder.
        fixes: The fix vocabulary, fix id -> safety, that rules' ``fixes`` must name (the fix
            catalog's, passed in by the caller: the engine does not import the fix stage);
            None checks the shape of ``fixes`` only (see :func:`check_fix_refs`).

    Raises:
        RuleError: a missing or empty folder, or any invalid file (names the path and key).
    """
    if root is None:
        root = rules_root()
    elif isinstance(root, (str, os.PathLike)):
        root = Path(root)
        if not root.is_dir():
            raise RuleError(f"{root}: rules folder does not exist")
    ruleset = RuleSet()
    try:
        files = sorted(
            (f for d in root.iterdir() if d.is_dir() for f in d.iterdir() if f.name.endswith((".yaml", ".yml"))),
            key=lambda f: (str(f)),
        )
        stray = [f for f in root.iterdir() if f.is_file() and f.name.endswith((".yaml", ".yml"))]
    except OSError as exc:  # an unreadable rules folder (PermissionError) is the folder's problem, said once
        raise RuleError(f"{display_path(str(exc.filename or root))}: cannot list the rules ({exc.strerror or exc})") from None
    if stray:
        raise RuleError(f"{display_path(str(stray[0]))}: rule files belong in a category folder: rules/<category>/<CODE>.yaml")
    if not files:
        raise RuleError(f"{display_path(str(root))}: no rule files found (expected <category>/<CODE>.yaml)")
    for file in files:
        ruleset.register(load_rule_file(file, fixes))
    return ruleset


@functools.lru_cache(maxsize=1)
def default_rules() -> RuleSet:
    """Return the rules from :func:`rules_root`, loaded once per process."""
    return load_rules()


def load_rule_file(file: Any, fixes: Mapping[str, str] | None = None) -> Rule:
    """Load one rule file (a Path or Traversable) and validate it.

    Raises:
        RuleError: ``<path>: <key>: <problem>``.
    """
    path = display_path(str(file))
    if not file.is_file():
        # NOTE: a FIFO named like a rule blocked `rules` and `analyze` forever in read_bytes
        raise RuleError(f"{path}: not a regular file (a FIFO, device or folder); a rule is a plain YAML file")
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise RuleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_RULE_FILE_BYTES:
        raise RuleError(f"{path}: file is {len(raw)} bytes, more than a rule may hold ({MAX_RULE_FILE_BYTES})")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except UnicodeDecodeError as exc:
        raise RuleError(f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except RecursionError:
        raise RuleError(f"{path}: nested too deeply to be a rule") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise RuleError(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise RuleError(f"{path}: expected a mapping of rule keys at the top level")
    return parse_rule(data, path=path, category_dir=_parent_name(file), file_name=file.name, fixes=fixes)


def parse_rule(
    data: dict[str, Any], path: str, category_dir: str | None = None, file_name: str | None = None,
    fixes: Mapping[str, str] | None = None,
) -> Rule:
    """Validate a rule's mapping and build the :class:`Rule`.

    Args:
        data: The YAML mapping.
        path: Shown in errors.
        category_dir: The folder the file sits in (must equal its category), if from a file.
        file_name: The file's name (must be ``<code>.yaml``), if from a file.
        fixes: The fix vocabulary (id -> safety) to check ``fixes`` against, or None.
    """
    allowed = (*REQUIRED_KEYS, *OPTIONAL_KEYS)

    def fail(key: str, problem: str) -> RuleError:
        return RuleError(f"{path}: {key}: {problem}")

    for key in data:
        if key not in allowed:
            raise fail(str(key), f"unknown key{did_you_mean(str(key), allowed)}")
    for key in REQUIRED_KEYS:
        if key not in data or data[key] is None:
            raise fail(key, "missing required key")

    def text(key: str) -> str:
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            raise fail(key, "expected a non-empty string")
        return value.strip()

    code = text("code")
    if not _CODE_RE.match(code):
        raise fail("code", f"{code!r} is not a code like DL001 (two capital letters, three digits)")
    category = text("category")
    if category not in CATEGORIES:
        raise fail("category", f"unknown category {category!r}{did_you_mean(category, CATEGORIES)}; one of {', '.join(CATEGORIES)}")
    group = GROUPS.get(code[:2])
    if group is None:
        raise fail("code", f"unknown group prefix {code[:2]!r}; one of {', '.join(GROUPS)}")
    if group != category:
        raise fail("category", f"{code[:2]} codes belong to category {group!r}, not {category!r}")
    if file_name is not None and file_name.rsplit(".", 1)[0] != code:
        raise fail("code", f"{code!r} does not match the file name {file_name!r}")
    if category_dir is not None and category_dir != category:
        raise fail("category", f"{category!r} does not match the folder {category_dir!r}")
    name = text("name")
    if not _NAME_RE.match(name):
        raise fail("name", f"{name!r} is not a kebab-case slug")
    severity = text("severity")
    if severity not in SEVERITIES:
        raise fail("severity", f"{severity!r} is not one of {', '.join(SEVERITIES)}")
    status = text("status")
    if status not in STATUSES:
        raise fail("status", f"{status!r} is not one of {', '.join(STATUSES)}")

    known = tuple(METRICS)
    try:
        when = parse_expression(data["when"], is_declared, known)
    except ConditionError as exc:
        raise fail("when", str(exc)) from None
    try:
        impact = parse_expression(data["impact"], is_declared, known)
    except ConditionError as exc:
        raise fail("impact", str(exc)) from None
    basis = text("impact_basis")
    if basis not in IMPACT_BASES:
        raise fail("impact_basis", f"{basis!r} is not one of {', '.join(IMPACT_BASES)}")
    # NOTE: "none" and a constant 0 must go together: a rule that claims no share says so in
    # both places, and one that claims a share says how it got it.
    claims_nothing = not impact.names and impact.evaluate({}) == 0
    if claims_nothing != (basis == ImpactBasis.NONE):
        raise fail("impact_basis", f"{basis!r} with impact {impact.source!r}: use 'none' exactly when the impact is 0")
    try:
        message = parse_template(data["message"], is_declared, known)
    except ConditionError as exc:
        raise fail("message", str(exc)) from None

    fix_refs = _parse_fixes(data["fixes"], fail, fixes)
    references = _string_list(data["references"], "references", fail)
    if not references:
        raise fail("references", "at least one reference URL is required")
    for ref in references:
        if not ref.startswith(("https://", "http://")):
            raise fail("references", f"{ref!r} is not a URL")
    locations = _string_list(data["locations"], "locations", fail)
    for kind in locations:
        if kind not in LOCATION_KINDS:
            raise fail("locations", f"unknown location kind {kind!r}{did_you_mean(kind, LOCATION_KINDS)}")
    aliases = _string_list(data.get("aliases") or [], "aliases", fail)
    for alias in aliases:
        if not _CODE_RE.match(alias):
            raise fail("aliases", f"{alias!r} is not a code like DL001")
    return Rule(
        code=code,
        name=name,
        summary=text("summary"),
        category=Category(category),
        severity=Severity(severity),
        status=RuleStatus(status),
        when=when,
        impact=impact,
        impact_basis=ImpactBasis(basis),
        message=message,
        fixes=fix_refs,
        why=text("why"),
        example=text("example"),
        instead=text("instead"),
        references=references,
        locations=tuple(LocationKind(kind) for kind in locations),
        aliases=aliases,
        path=path,
    )


def _parse_fixes(value: Any, fail: Any, vocabulary: Mapping[str, str] | None) -> tuple[FixRef, ...]:
    if not isinstance(value, list):
        raise fail("fixes", "expected a list of {id, safety} (may be empty)")
    if len(value) > MAX_LIST_ITEMS:
        raise fail("fixes", f"{len(value)} items, more than {MAX_LIST_ITEMS}")
    fixes: list[FixRef] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"id", "safety"}:
            raise fail("fixes", f"expected {{id, safety}}, got {item!r}")
        fix_id, safety = str(item["id"]), str(item["safety"])
        if safety not in FIX_SAFETIES:
            raise fail("fixes", f"fix {fix_id!r}: safety {safety!r} is not one of {', '.join(FIX_SAFETIES)}")
        if vocabulary is not None:
            _check_fix_ref(fix_id, safety, vocabulary, fail)
        fixes.append(FixRef(id=fix_id, safety=Safety(safety)))
    return tuple(fixes)


FIX_SAFETIES: tuple[str, ...] = Safety.values()
"""The fix safety labels a rule may write (the fix catalog says which one each fix has)."""


def _check_fix_ref(fix_id: str, safety: str, vocabulary: Mapping[str, str], fail: Any) -> None:
    if fix_id not in vocabulary:
        raise fail("fixes", f"unknown fix id {fix_id!r}{did_you_mean(fix_id, vocabulary)}")
    if str(vocabulary[fix_id]) != safety:
        raise fail("fixes", f"fix {fix_id!r} is {str(vocabulary[fix_id])!r}, not {safety!r}")


def check_fix_refs(ruleset: RuleSet, vocabulary: Mapping[str, str]) -> None:
    """Check every rule's fix ids and safety labels against the fix vocabulary (id -> safety).

    NOTE: the vocabulary is the fix catalog's (``advisor.fixes.catalog``), passed in by the api:
    the engine never imports the fix stage, which depends on it.

    Raises:
        RuleError: ``<path>: fixes: unknown fix id ...`` or ``... is 'safe', not 'unsafe'``.
    """
    for rule in ruleset:
        def fail(key: str, problem: str, path: str = rule.path) -> RuleError:
            return RuleError(f"{path}: {key}: {problem}")

        for ref in rule.fixes:
            _check_fix_ref(ref.id, ref.safety, vocabulary, fail)


def _string_list(value: Any, key: str, fail: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise fail(key, "expected a list of strings")
    if len(value) > MAX_LIST_ITEMS:
        raise fail(key, f"{len(value)} items, more than {MAX_LIST_ITEMS}")
    return tuple(v.strip() for v in value)


def _parent_name(file: Any) -> str | None:
    parent = getattr(file, "parent", None)
    return parent.name if parent is not None else None
