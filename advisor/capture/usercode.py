"""What counts as "the user's code", decided once when the script runs and recorded in the run.

A frame belongs to the user when its file lies under none of the interpreter's library roots
(the standard library, site-packages, torch, advisor), the policy pyinstrument records as a
session's ``sys_prefixes``. The capture child builds a :class:`UserCode` at the end of the run
(:func:`user_code_now`) and saves it in ``capture.json``; the metrics stage asks it about every
frame. Only traces without a capture fall back to a name heuristic
(:func:`advisor.metrics.userframes.looks_like_user_file`).

torch.profiler's Python stacks name files relative to the ``sys.path`` entry (or site folder)
they were found under (``train.py(12): step``, ``torch/nn/modules/module.py(1751): _call_impl``),
so absolute roots alone cannot classify them: the capture also records the user's files under
those same relative names.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

_STDLIB_PACKAGES = frozenset(getattr(sys, "stdlib_module_names", ()))
_MAX_USER_FILES = 5000  # a bound on what a run records (a project rarely imports more)

CALL_PREFIX = "advisor.call@"
"""Name prefix of the trace ranges that carry a host read's, copy's or sync's call site:
``advisor.call@<line>@<function>@<file>`` (the file last: it may hold ``@``). The capture's
hooks record them (:class:`advisor.capture.hooks.CallSites`); the metrics stage reads them."""


def parse_call_site(name: str) -> tuple[str, int, str] | None:
    """``advisor.call@<line>@<function>@<file>`` -> (file, line, function); None for other names."""
    if not name.startswith(CALL_PREFIX):
        return None
    parts = name[len(CALL_PREFIX) :].split("@", 2)
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    return parts[2], int(parts[0]), parts[1]


@dataclass(frozen=True)
class UserCode:
    """The run's user-code policy.

    Attributes:
        library_roots: Absolute folders (with a trailing separator) whose files are libraries.
        user_files: The user's source files as the profiler names them (relative to the
            ``sys.path`` entry they were found under), plus their absolute paths.
    """

    library_roots: tuple[str, ...] = ()
    user_files: tuple[str, ...] = ()

    @cached_property
    def _files(self) -> frozenset[str]:
        return frozenset(f.replace("\\", "/") for f in self.user_files)

    @cached_property
    def _packages(self) -> frozenset[str]:
        # NOTE: the top folders of the user's relative files: a file of theirs that was never
        # imported as a module (exec'd, or a data-loader worker's) still names its package.
        return frozenset(f.split("/", 1)[0] for f in self._files if "/" in f and not f.startswith("/"))

    @cached_property
    def _roots(self) -> tuple[str, ...]:
        return tuple(r.replace("\\", "/") for r in self.library_roots)

    @cached_property
    def _memo(self) -> dict[str, bool]:
        return {}

    def is_user_file(self, path: str) -> bool:
        """Tell whether ``path`` (absolute, or relative as a profiler stack names it) is user code."""
        known = self._memo.get(path)
        if known is None:
            known = self._memo[path] = self._classify(path)
        return known

    def _classify(self, path: str) -> bool:
        if not path or path.startswith("<"):
            return False
        norm = path.replace("\\", "/")
        if norm.startswith("/") or (len(norm) > 2 and norm[1] == ":"):
            return not norm.startswith(self._roots) and not os.path.realpath(path).replace(
                "\\", "/"
            ).startswith(self._roots)
        if norm in self._files:
            return True
        top = norm.split("/", 1)[0]
        # NOTE: a standard-library package (multiprocessing/queues.py in a loader's frames) is
        # never the user's by its folder alone; a user file of that name is in _files above.
        return top in self._packages and top not in _STDLIB_PACKAGES


def library_roots() -> tuple[str, ...]:
    """Return the folders whose files are not the user's (stdlib, site-packages, torch, advisor).

    Each root is given as written and resolved (symlinked virtual environments), with a
    trailing separator so that ``/usr/lib/python3`` does not claim ``/usr/lib/python3-project``.
    """
    import advisor

    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(_site_dirs())
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        roots.add(os.path.dirname(torch.__file__))
    roots.add(os.path.dirname(advisor.__file__))
    out: set[str] = set()
    for root in roots:
        if root:
            out.add(os.path.abspath(root).rstrip(os.sep) + os.sep)
            out.add(os.path.realpath(root).rstrip(os.sep) + os.sep)
    return tuple(sorted(out))


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # NOTE: some embedded interpreters lack it
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        dirs.append(user_site)
    return dirs


def profiler_name(path: str, prefixes: tuple[str, ...]) -> str:
    """Return ``path`` as torch.profiler's stacks name it: relative to its first matching prefix."""
    for prefix in prefixes:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _profiler_prefixes() -> tuple[str, ...]:
    """Return the prefixes torch.profiler strips from stack file names, longest-sorting first."""
    raw = [*_site_dirs(), *sys.path, site.getuserbase()]
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        raw.append(os.path.dirname(os.path.dirname(torch.__file__)))
    prefixes = {os.path.abspath(p or os.curdir) for p in raw if isinstance(p, str)}
    return tuple(p + os.sep for p in sorted(prefixes, reverse=True))


def user_code_now(extra_files: Iterable[str] = ()) -> UserCode:
    """Build the policy from this interpreter: its library roots and the user modules it loaded.

    Args:
        extra_files: Files to record as the user's even when no module holds them (the script,
            which runs as ``__main__`` through runpy).
    """
    roots = library_roots()
    policy = UserCode(library_roots=roots)
    prefixes = _profiler_prefixes()
    files: set[str] = set()
    candidates = [*extra_files]
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        # NOTE: absolute paths only: a few objects in sys.modules (torch.ops, torch.classes)
        # carry a made-up relative __file__.
        if isinstance(file, str) and file.endswith(".py") and os.path.isabs(file):
            candidates.append(file)
    for file in candidates:
        path = os.path.abspath(file)
        if not policy.is_user_file(path):
            continue
        files.add(path)
        files.add(profiler_name(path, prefixes))
        if len(files) >= _MAX_USER_FILES:
            break
    return UserCode(library_roots=roots, user_files=tuple(sorted(files)))
