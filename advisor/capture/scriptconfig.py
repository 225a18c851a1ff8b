"""The script's own configuration surface, recorded in the capture child.

A fix the user can make by changing the script's arguments (a larger batch and no accumulation,
more loader workers) is best tried, and handed over, as a new command line: it is exactly what
the user will run. This module records what can be changed that way, without touching the
script:

* argparse: ``ArgumentParser.parse_known_args`` (``parse_args`` goes through it, and so do
  subclasses such as Hugging Face's ``HfArgumentParser``) is wrapped; a parse of the script's
  own command line (``args`` left to ``sys.argv``) records each optional argument that stores
  one scalar or is a switch: its ``dest``, first long option string, default and parsed value;
* a nanoGPT-style configurator (``exec(open("configurator.py").read())``, where ``--key=value``
  overrides the global ``key``): the script's module globals of scalar type, read once while
  the script runs (:meth:`ConfigRecorder.read_globals`), when a ``--key=value`` argument names
  one of them or the script's source executes a configurator.

Lightning ``Trainer`` arguments and ``TrainingArguments`` built in code (not parsed from the
command line) are not recorded: they are no command-line surface.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from advisor.capture.model import ScriptConfig
from advisor.capture.records import ScriptOption
from advisor.capture.vocab import ConfigStyle

MAX_OPTIONS = 200
"""At most this many settings are kept (a script's globals can be many)."""

MAX_STR = 200
"""String values longer than this are left out (paths and prompts are no knobs)."""

_KEY_VALUE = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*)=")
_CONFIGURATOR = re.compile(r"exec\s*\(\s*open\s*\(.*configurator", re.IGNORECASE)

_ACTIONS: dict[type, str] = {
    argparse._StoreAction: "store",  # noqa: SLF001 - argparse names its action classes privately
    argparse._StoreTrueAction: "store_true",  # noqa: SLF001
    argparse._StoreFalseAction: "store_false",  # noqa: SLF001
}


def _scalar(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar worth recording."""
    if isinstance(value, str):
        return len(value) <= MAX_STR
    return value is None or type(value) in (bool, int, float)


def options_of(parser: argparse.ArgumentParser, namespace: Any) -> list[ScriptOption]:
    """Return the scalar optional arguments of ``parser`` with their values in ``namespace``."""
    out: list[ScriptOption] = []
    for action in parser._actions:  # noqa: SLF001 - the only way to list a parser's arguments
        kind = _ACTIONS.get(type(action))
        if kind is None or not action.option_strings or action.nargs not in (None, 0):
            continue  # help, version, append, count, positionals, lists: no single knob
        if not hasattr(namespace, action.dest):
            continue
        value = getattr(namespace, action.dest)
        if not _scalar(value):
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        default = action.default if _scalar(action.default) else None
        out.append(ScriptOption(action.dest, value, ConfigStyle.ARGPARSE, flag, kind, default))
    return out


class ConfigRecorder:
    """Records the script's configuration surface (install before the script, read at the end).

    Args:
        script: The script's path (its source tells whether it runs a configurator).
        argv: The script's arguments (``sys.argv[1:]`` as it will see them).
    """

    def __init__(self, script: str, argv: list[str]) -> None:
        self.script = script
        self.argv = list(argv)
        self.options: dict[str, ScriptOption] = {}
        self.notes: list[str] = []
        self._globals_read = False
        self._undo: list[Any] = []

    def install(self) -> None:
        """Wrap ``ArgumentParser.parse_known_args``; the wrapper never changes what it returns."""
        original = argparse.ArgumentParser.parse_known_args
        recorder = self

        def parse_known_args(parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
            result = original(parser, args, namespace)
            if args is None or list(args) == recorder.argv:
                try:
                    recorder._add(options_of(parser, result[0]))
                except Exception as exc:  # noqa: BLE001 - recording must never break the script
                    recorder.notes.append(f"the script's argparse options could not be read ({exc})")
            return result

        argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(argparse.ArgumentParser, "parse_known_args", original))

    def uninstall(self) -> None:
        """Restore argparse."""
        while self._undo:
            self._undo.pop()()

    def read_globals(self, module_globals: dict[str, Any]) -> None:
        """Record configurator globals from the running script's namespace (once)."""
        if self._globals_read:
            return
        self._globals_read = True
        names = {n: v for n, v in module_globals.items() if not n.startswith("_") and _scalar(v) and v is not None}
        keyed = {m.group(1) for a in self.argv if (m := _KEY_VALUE.match(a))}
        if not (keyed & set(names) or self._runs_configurator()):
            return
        self._add(ScriptOption(n, v, ConfigStyle.CONFIGURATOR, f"--{n}") for n, v in names.items())

    def config(self) -> ScriptConfig:
        """Return what was recorded so far."""
        return ScriptConfig(options=tuple(self.options.values()), notes=tuple(self.notes))

    def _runs_configurator(self) -> bool:
        try:
            return bool(_CONFIGURATOR.search(Path(self.script).read_text(encoding="utf-8", errors="replace")))
        except OSError:
            return False

    def _add(self, options: Any) -> None:
        for option in options:
            if len(self.options) >= MAX_OPTIONS:
                return
            self.options.setdefault(option.name, option)  # the first parse of a name wins
