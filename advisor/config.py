"""Layered configuration: ``[tool.advisor]`` in the closest pyproject.toml / advisor.toml, then the CLI.

Layers, lowest precedence first (ruff's model, https://docs.astral.sh/ruff/configuration/):

1. the rules' own defaults (every ``stable`` rule);
2. the closest config file, searching from the script's (or working) directory upwards:
   ``advisor.toml`` (top-level keys) wins over ``pyproject.toml`` (``[tool.advisor]``) in the same
   folder; a ``pyproject.toml`` without a ``[tool.advisor]`` table is skipped. A file may name
   ``extend = "../base.toml"`` to build on another file (its settings form a lower layer);
3. the command line.

Keys: ``select``, ``extend-select``, ``ignore`` (lists of codes or prefixes), ``preview`` (bool),
``unknown-codes`` (``"error"`` or ``"warn"``), ``extend`` (path), plus the command options the
caller names (``option_keys``): the command line passes every ``advisor diagnose`` option that a
project may fix once (``steps = 30``, ``warmup``, ``repeats``, ``unsafe-fixes = true``...), named
as the long option without its dashes. Their values are kept as written here and checked by the
command that takes them (its Click types), which also lets the command line win. An unknown key or a badly typed value raises
:class:`UsageError` naming the file and suggesting the closest key, because a silently ignored
typo in ``ignore`` would change the diagnosis without anyone noticing. For the same reason a rule
code that matches no rule (``select = ["DL01"]`` would turn every rule off, and a ``--fail-on``
gate would pass) is an error, unless ``unknown-codes = "warn"`` asks for a warning only.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.engine.condition import did_you_mean
from advisor.engine.model import EngineConfig
from advisor.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_FILES: tuple[str, ...] = ("advisor.toml", ".advisor.toml", "pyproject.toml")
"""File names searched in each folder, first match wins within a folder."""

LIST_KEYS: tuple[str, ...] = ("select", "extend-select", "ignore")
BOOL_KEYS: tuple[str, ...] = ("preview",)
CHOICE_KEYS: dict[str, tuple[str, ...]] = {"unknown-codes": ("error", "warn")}
"""Keys whose value is one of a few words."""
KNOWN_KEYS: tuple[str, ...] = (*LIST_KEYS, *BOOL_KEYS, *CHOICE_KEYS, "extend")

ANY_OPTION: frozenset[str] = frozenset({"*"})
"""``option_keys`` value that accepts every key beyond the selection keys, unchecked (the Python
API, whose options are keyword arguments checked by Python)."""

REMOVED_KEYS: dict[str, str] = {}
"""Keys that used to exist -> the migration message shown instead of "unknown key"."""


@dataclass(frozen=True)
class ConfigFile:
    """Settings read from one config file.

    Attributes:
        path: The file.
        settings: Validated key -> value (keys as written, with hyphens).
        base: The file it extends, if any.
    """

    path: Path
    settings: dict[str, Any]
    base: ConfigFile | None = None

    def engine_layers(self) -> tuple[tuple[EngineConfig, str], ...]:
        """Return this file's selection as engine layers (the extended file's first), with sources."""
        own = (
            EngineConfig(
                select=tuple(self.settings["select"]) if "select" in self.settings else None,
                extend_select=tuple(self.settings.get("extend-select", ())),
                ignore=tuple(self.settings.get("ignore", ())),
                preview=bool(self.settings.get("preview", False)),
            ),
            str(self.path),
        )
        return (*(self.base.engine_layers() if self.base else ()), own)

    def preview(self) -> bool | None:
        """Return the ``preview`` setting, this file's over its base's; None when unset."""
        return self.flag("preview")

    def flag(self, key: str) -> bool | None:
        """Return a boolean setting, this file's over its base's; None when unset."""
        value = self.closest(key)
        return None if value is None else bool(value)

    def closest(self, key: str) -> Any:
        """Return a setting, this file's over its base's; None when unset."""
        if key in self.settings:
            return self.settings[key]
        return self.base.closest(key) if self.base else None


def find_config_file(start: Path | None = None) -> Path | None:
    """Find the closest config file at or above ``start`` (default: the working directory)."""
    here = Path(start or Path.cwd()).resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        for name in CONFIG_FILES:
            candidate = folder / name
            if not candidate.is_file():
                continue
            if name == "pyproject.toml" and _tool_table(_read_toml(candidate)) is None:
                continue
            return candidate
    return None


def _tool_table(data: dict[str, Any]) -> Any:
    """``[tool.advisor]`` of a pyproject.toml, or None; a ``tool`` that is not a table has none.

    ``tool = 5`` raised AttributeError, an internal error (issue #30 campaign).
    """
    tool = data.get("tool")
    return tool.get("advisor") if isinstance(tool, dict) else None


def load_config_file(
    path: Path, _seen: tuple[Path, ...] = (), option_keys: Collection[str] = ()
) -> ConfigFile:
    """Read and validate one config file (and the files it ``extend``s).

    Args:
        path: The file.
        option_keys: Command option keys allowed beside the selection keys (see the module's
            docstring); :data:`ANY_OPTION` allows any.

    Raises:
        UsageError: unreadable TOML, an unknown key, a bad value, or an ``extend`` cycle.
    """
    path = Path(path).resolve()
    if path in _seen:
        raise UsageError(f"{path}: extend: cycle through {' -> '.join(str(p) for p in (*_seen, path))}")
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        table = _tool_table(data)
        table = {} if table is None else table
        where = f"{path}: [tool.advisor]"
    else:
        table = data
        where = str(path)
    if not isinstance(table, dict):
        raise UsageError(f"{where}: expected a table of settings")
    settings = validate_settings(table, where, option_keys)
    base = None
    if "extend" in settings:
        target = (path.parent / Path(settings["extend"]).expanduser()).resolve()
        if not target.is_file():
            raise UsageError(f"{where}: extend: {target} does not exist")
        base = load_config_file(target, (*_seen, path), option_keys)
    return ConfigFile(path=path, settings=settings, base=base)


def validate_settings(
    table: dict[str, Any], where: str, option_keys: Collection[str] = ()
) -> dict[str, Any]:
    """Check keys and value types; return the settings with list values as tuples of str.

    A key of ``option_keys`` is kept as written (its command checks the value).

    Raises:
        UsageError: ``<where>: unknown key 'ignor' (did you mean 'ignore'?)`` and the like.
    """
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key in REMOVED_KEYS:
            raise UsageError(f"{where}: {key}: {REMOVED_KEYS[key]}")
        if key not in KNOWN_KEYS:
            if option_keys is ANY_OPTION or key in option_keys:
                if isinstance(value, (datetime.date, datetime.time)):
                    # NOTE: TOML's own dates reached `advisor config` as an internal error (issue #30 campaign)
                    raise UsageError(f"{where}: {key}: a date or time is not a value --{key} takes")
                settings[key] = value
                continue
            known = (*KNOWN_KEYS, *sorted(option_keys))
            raise UsageError(
                f"{where}: unknown key {key!r}{did_you_mean(key, known)}; known keys: {', '.join(known)}"
            )
        if key in LIST_KEYS:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"{where}: {key}: expected a list of rule codes, e.g. [\"DL001\", \"SY\"]")
            settings[key] = tuple(v.strip() for v in value if v.strip())
        elif key in BOOL_KEYS:
            if not isinstance(value, bool):
                raise UsageError(f"{where}: {key}: expected true or false")
            settings[key] = value
        elif key in CHOICE_KEYS:
            if value not in CHOICE_KEYS[key]:
                raise UsageError(f"{where}: {key}: expected one of {', '.join(repr(c) for c in CHOICE_KEYS[key])}")
            settings[key] = value
        else:
            if not isinstance(value, str):
                raise UsageError(f"{where}: {key}: expected a path")
            settings[key] = value
    return settings


def resolve_engine_config(
    select: tuple[str, ...] | None = None,
    extend_select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    preview: bool | None = None,
    start: Path | None = None,
    config_file: Path | None = None,
    option_keys: Collection[str] = (),
) -> EngineConfig:
    """Build the engine configuration: the closest config file's layers under the CLI's flags.

    Args:
        select: ``--select`` (None when not given: keep the config's selection).
        extend_select: ``--extend-select``.
        ignore: ``--ignore``.
        preview: ``--preview`` (None when not given: the config's value, default off).
        start: Where to search for the config file (the script's folder, or the cwd).
        config_file: Use this file instead of searching.
        option_keys: Command option keys the file may also hold (:func:`load_config_file`).

    Raises:
        UsageError: the config file is invalid.
    """
    path = config_file or find_config_file(start)
    loaded = load_config_file(path, option_keys=option_keys) if path is not None else None
    config = _engine_config(loaded, select, extend_select, ignore, preview)
    if not (loaded is not None and loaded.closest("unknown-codes") == "warn"):
        check_codes(config)
    return config


def check_codes(config: EngineConfig) -> None:
    """Refuse a selector (select, extend-select, ignore) that matches no rule.

    Raises:
        UsageError: ``unknown rule code 'DL01' in select (did you mean 'DL001'?)``, saying how
            to turn it into a warning.
    """
    from advisor.engine.rules import default_rules
    from advisor.engine.selection import UNKNOWN_PREFIX, select_rules

    unknown = [w for w in select_rules(default_rules(), config).warnings if w.startswith(UNKNOWN_PREFIX)]
    if unknown:
        raise UsageError(
            f"{unknown[0]}; fix the code (`advisor rules` lists them), or set unknown-codes = \"warn\" "
            "in [tool.advisor] to only warn"
        )


def _engine_config(
    loaded: ConfigFile | None,
    select: tuple[str, ...] | None = None,
    extend_select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    preview: bool | None = None,
) -> EngineConfig:
    """Build the engine configuration from an already loaded config file (None: none) under the flags."""
    layers: tuple[tuple[EngineConfig, str], ...] = ()
    file_preview: bool | None = None
    if loaded is not None:
        layers = loaded.engine_layers()
        file_preview = loaded.preview()
    return EngineConfig(
        select=tuple(select) if select is not None else None,
        extend_select=tuple(extend_select),
        ignore=tuple(ignore),
        preview=bool(preview if preview is not None else file_preview),
        layers=tuple(layer for layer, _ in layers),
        sources=(*(src for _, src in layers), "command line"),
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML ({exc}); fix the file or remove it") from None


DEFAULT_VALUES: dict[str, Any] = {
    "select": None,
    "extend-select": (),
    "ignore": (),
    "preview": False,
    "unknown-codes": "error",
    "extend": None,
}
"""Each key's value when no config file sets it (``select`` None: every stable rule)."""


@dataclass(frozen=True)
class Setting:
    """One resolved setting and where it came from (``advisor config``).

    Attributes:
        key: The key as written in the file (``extend-select``).
        value: The resolved value: a tuple of codes, a bool, a path, or None when unset.
        sources: The files that set it, lowest layer first; empty when it is the default.
            ``select``, ``preview`` and ``extend`` come from the closest file that sets them;
            ``extend-select`` and ``ignore`` add up over the ``extend`` chain, as the engine
            applies them layer by layer, down to the closest file that sets ``select`` (whose
            selection replaces what the files below it built).
    """

    key: str
    value: Any
    sources: tuple[Path, ...] = ()

    @property
    def is_default(self) -> bool:
        """True when no config file sets this key."""
        return not self.sources


@dataclass(frozen=True)
class ResolvedConfig:
    """The configuration that applies to a folder, setting by setting.

    Attributes:
        path: The config file that applies (None: only defaults).
        files: That file and the files it extends, closest first.
        settings: One :class:`Setting` per key of :data:`KNOWN_KEYS`, in that order.
        engine: The same configuration as the engine receives it (no command-line flags).
        notes: Settings that are written but have no effect (a closer ``select`` replaced them).
    """

    path: Path | None
    files: tuple[Path, ...]
    settings: tuple[Setting, ...]
    engine: EngineConfig
    notes: tuple[str, ...] = ()


def resolve_config(
    start: Path | None = None, config_file: Path | None = None, option_keys: Collection[str] = ()
) -> ResolvedConfig:
    """Resolve the configuration for ``start`` (a script or folder; default: the working directory).

    Uses the same search (:func:`find_config_file`), loader and validation
    (:func:`load_config_file`) as every command, so what this shows is what runs. The command
    options a file sets (``option_keys``) follow the selection keys, closest file first.

    Raises:
        UsageError: the config file is invalid (the same one-line message as elsewhere).
    """
    path = config_file or find_config_file(start)
    chain: list[ConfigFile] = []
    loaded = load_config_file(path, option_keys=option_keys) if path is not None else None
    node = loaded
    while node is not None:
        chain.append(node)
        node = node.base
    # NOTE: a layer's ``select`` replaces the selection built below it, so the lists of files
    # under the closest ``select`` no longer count (see advisor.engine.selection).
    cut = next((i for i, c in enumerate(chain) if "select" in c.settings), len(chain) - 1)
    live, dropped = chain[: cut + 1], chain[cut + 1 :]
    notes = tuple(
        f"{describe_source(c.path)}: {' and '.join(k for k in ('extend-select', 'ignore') if k in c.settings)} "
        f"replaced by the select in {describe_source(chain[cut].path)}"
        for c in dropped
        if any(k in c.settings for k in ("extend-select", "ignore"))
    )
    settings: list[Setting] = []
    for key in KNOWN_KEYS:
        setters = [c for c in chain if key in c.settings]  # closest first
        if key in ("extend-select", "ignore"):
            setters = [c for c in live if key in c.settings]
        if not setters:
            settings.append(Setting(key, DEFAULT_VALUES.get(key)))
        elif key in ("extend-select", "ignore"):
            ordered = list(reversed(setters))  # lowest layer first, as the engine applies them
            value = tuple(dict.fromkeys(v for c in ordered for v in c.settings[key]))
            settings.append(Setting(key, value, tuple(c.path for c in ordered)))
        else:
            settings.append(Setting(key, setters[0].settings[key], (setters[0].path,)))
    for key, (value, source) in command_options(loaded).items():
        settings.append(Setting(key, value, (source,)))
    # NOTE: from the file already loaded above; loading it again would re-read the extend chain.
    engine = _engine_config(loaded) if loaded is not None else EngineConfig()
    return ResolvedConfig(
        path=path.resolve() if path is not None else None,
        files=tuple(c.path for c in chain),
        settings=tuple(settings),
        engine=engine,
        notes=notes,
    )


def command_options(loaded: ConfigFile | None) -> dict[str, tuple[Any, Path]]:
    """Return the command options a loaded file (and its ``extend`` chain) sets: key -> (value, file).

    The closest file wins, as for ``select``; the values are as written (the command checks them).
    """
    found: dict[str, tuple[Any, Path]] = {}
    node = loaded
    while node is not None:
        for key, value in node.settings.items():
            if key not in KNOWN_KEYS and key not in found:
                found[key] = (value, node.path)
        node = node.base
    return found


def options_for(start: Path | None, option_keys: Collection[str]) -> dict[str, tuple[Any, Path]]:
    """Load the closest config file above ``start`` and return the command options it sets.

    Raises:
        UsageError: the config file is invalid, or holds a key that is neither a selection key
            nor one of ``option_keys``.
    """
    path = find_config_file(start)
    return command_options(load_config_file(path, option_keys=option_keys) if path is not None else None)


def describe_source(path: Path | None, relative_to: Path | None = None) -> str:
    """Name a setting's source: ``default``, ``path/pyproject.toml [tool.advisor]`` or ``path/advisor.toml``.

    Args:
        path: The config file, or None for the default.
        relative_to: Show the path relative to this folder when it is inside it.
    """
    if path is None:
        return "default"
    shown = path
    if relative_to is not None:
        try:
            shown = path.relative_to(Path(relative_to).resolve())
        except ValueError:
            shown = path
    return f"{shown} [tool.advisor]" if path.name == "pyproject.toml" else str(shown)
