"""Find the file ``python -m package.module`` would run, without importing anything.

``advisor diagnose -m package.module`` needs the file before the child starts (the run
directory's name, the config search, the report's source look-ups), but importing the user's
package in advisor's own process would run its code there. :class:`importlib.machinery.PathFinder`
locates each dotted part on disk without executing any ``__init__``.
"""

from __future__ import annotations

import importlib.machinery
import re
from collections.abc import Sequence
from pathlib import Path

from advisor.errors import UsageError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def find_module_file(name: str, search: Sequence[str | Path]) -> Path:
    """Return the source file ``python -m name`` runs (a package's ``__main__.py``).

    Args:
        name: A dotted module name, ``package.module``.
        search: Folders to look in, first match wins (the current folder first, as ``python -m``).

    Raises:
        UsageError: The name is not a module name, or no such module is found as Python source.
    """
    if not _NAME_RE.match(name):
        raise UsageError(f"-m expects a module name such as package.module, got {name!r}")
    paths = [str(p) for p in search]
    spec = None
    parts = name.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), paths)
        if spec is None:
            raise UsageError(
                f"module {name!r} not found (no {'.'.join(parts[: i + 1])} under "
                f"{paths[0] if paths else 'the search path'}); run advisor from the folder "
                "`python -m` would run it from"
            )
        if i < len(parts) - 1:
            if not spec.submodule_search_locations:
                raise UsageError(f"{'.'.join(parts[: i + 1])} is a module, not a package; -m {name} cannot run")
            paths = list(spec.submodule_search_locations)
    assert spec is not None  # NOTE: a valid name has at least one part
    if spec.submodule_search_locations:  # a package: python -m runs its __main__
        for folder in spec.submodule_search_locations:
            main = Path(folder) / "__main__.py"
            if main.is_file():
                return main.resolve()
        raise UsageError(f"{name} is a package without a __main__.py; -m {name} cannot run")
    origin = spec.origin
    if not origin or not origin.endswith(".py") or not Path(origin).is_file():
        raise UsageError(f"module {name!r} is not a Python source file ({origin}); advisor runs Python scripts")
    return Path(origin).resolve()
