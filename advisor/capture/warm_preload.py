"""What the warm-start server imports before it forks, and why it may refuse to serve.

The script's top-level imports are read from its AST (the script's code never runs in the
server), kept when they resolve to installed modules, and imported; a module that starts a
thread while imported, a GPU visible to a CUDA/ROCm torch, or a script folder shadowing a module
the server already imported makes the server refuse (see :mod:`advisor.capture.warm`).
"""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.capture.syspath import first_for_a_while

LAZY_MODULES = ("torch._dynamo",)
"""Modules the server preloads that a script imports only by what it does, not by an import line.

A script's first ``torch.optim`` optimizer imports ``torch._dynamo`` (and sympy with it, about
800 modules and 1.1-1.8 s on this machine); a script that updates its parameters by hand, or only
infers, never does. The capture records which of these its first step had imported
(:func:`lazy_imported`), and the fix loop's server leaves out the others."""


ON_SIGHT_MODULES = ("torch._inductor.compile_fx",)
"""Modules the server preloads only where the capture saw the script import them.

``torch.compile`` imports inductor's compiler (about 600 modules, 1.1 s here) and, at its first
compiled call, probes which vector instruction sets the C++ compiler can build for (ten
compiler runs, 2.4 s): torch caches both in the process, so every trial run of a compiled
script paid both again in its set-up, 28 runs of a compiled CNN of ours 98 s of a 229 s
diagnose. Unlike :data:`LAZY_MODULES` they are not imported on a guess: a server that imported
them for a script that never compiles would take 3.5 s of a core from the capture beside it."""


def lazy_imported() -> tuple[str, ...]:
    """Return the :data:`LAZY_MODULES` and :data:`ON_SIGHT_MODULES` imported in this process so far."""
    return tuple(m for m in (*LAZY_MODULES, *ON_SIGHT_MODULES) if m in sys.modules)


def probe_vector_isa() -> None:
    """Run inductor's probe of the vector instruction sets, which it caches in the process.

    The answer depends only on the machine and its compiler, so children forked after it share
    it; a cold run (the capture) still pays it, as the user's own start does. A torch without
    the probe, or a probe that fails, leaves it to the children, which run it as they would cold.
    """
    try:
        from torch._inductor import cpu_vec_isa  # noqa: PLC0415 - only where the script compiles

        cpu_vec_isa.valid_vec_isa_list()
    except Exception:  # noqa: BLE001, S110 - a warm-up only: the child probes again if it must
        pass


WARMERS = {"torch._inductor.compile_fx": probe_vector_isa}
"""What the server runs once after importing a module, beside the import: state torch caches in
the process that every forked child would otherwise build again."""


def _import_warm(name: str) -> None:
    """Import ``name`` and run its warmer (:data:`WARMERS`), if it has one."""
    importlib.import_module(name)
    if name in WARMERS:
        WARMERS[name]()


def script_imports(path: Path) -> list[str]:
    """Return the modules ``path`` imports at its top level, in order, without running it.

    Plain ``import a.b`` and ``from a.b import c`` statements directly in the module body (not
    inside functions, ``if`` or ``try``, which may be conditional); relative imports and
    ``__future__`` are left out. A file that cannot be read or parsed has none.
    """
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
            names.append(node.module)
    return list(dict.fromkeys(names))


def installed_module(name: str, roots: tuple[str, ...]) -> bool:
    """Tell whether ``name``'s top-level package resolves, on the current ``sys.path``, under ``roots``.

    Only the top-level package is looked up (``find_spec`` of a dotted name would import its
    parents): a module of the user's own folders, one shadowing an installed name, a namespace
    package and a missing one are all not installed.
    """
    top = name.split(".", 1)[0]
    if top in sys.modules:
        file = getattr(sys.modules[top], "__file__", None)
        return isinstance(file, str) and os.path.abspath(file).startswith(roots)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin == "built-in" or origin == "frozen":
        return True
    return isinstance(origin, str) and os.path.isabs(origin) and os.path.abspath(origin).startswith(roots)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


WARM_GPU_ENV = "ADVISOR_WARM_GPU"
"""``ADVISOR_WARM_GPU=1``: serve warm starts where a GPU is visible too (experimental, see
:func:`cuda_started`). On an H200 every cold trial run took 8-11 s to its first step, about 4 s
of it imports the server would pay once."""


def warm_gpu() -> bool:
    """Whether the experimental warm start beside a visible GPU was asked for."""
    return os.environ.get(WARM_GPU_ENV, "") == "1"


def cuda_started(maps: str | None = None) -> str | None:
    """Say why this process can no longer fork children that use CUDA (None: it can).

    A fork is safe for CUDA only while the parent never started the driver: a child of a parent
    that did fails at its first CUDA call. torch starts it lazily, at the first call that needs
    a device (``torch.cuda.is_available()`` is one, unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``,
    which the server sets while it imports). The driver's library mapped into the process means
    something loaded it: the server then refuses, whatever torch says.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch started CUDA in the warm-start server"
    if maps is None:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
                maps = fh.read()
        except OSError:
            return "cannot tell whether the CUDA driver is loaded (no /proc/self/maps)"
    if "libcuda.so" in maps:
        return "the CUDA driver was loaded in the warm-start server"
    return None


def gpu_visible() -> str | None:
    """Say why a GPU may be in use (a CUDA or ROCm torch with a device node present); None when not.

    Decided without calling CUDA: initialising it before a fork would break every child.
    """
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None) is None and getattr(version, "hip", None) is None:
        return None
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return None
    if glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"):
        return "a GPU is visible to this CUDA/ROCm build of torch, and CUDA cannot be forked"
    return None


def preload(modules: Sequence[str], script: str | None, module: str | None) -> dict[str, Any]:
    """Import what the children will need; return the server's ``ready`` message.

    ``script``'s top-level imports are resolved as its child would resolve them (``sys.path[0]``
    is the script's folder, or the working directory for ``-m``) and imported only when they are
    installed modules. An import that fails is left to the script (its child imports it again
    and fails, or not, as it would cold).
    """
    imported: list[str] = []
    failed: list[str] = []
    refusal = None
    base = None
    if warm_gpu():
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # the server's own; each child gets its run's env
    for name in modules:
        _import_warm(name)  # ours and torch: a failure here is the server's failure
        imported.append(name)
        # NOTE: loading torch's libraries starts one idle native thread (it waits on a futex);
        # every cold child has it too. Any thread started after that is refused.
        base = _threads() if base is None else base
        if _threads() > base and refusal is None:
            refusal = f"importing {name} started a thread, which a fork would not copy"
    base = _threads() if base is None else base
    from advisor.capture.usercode import library_roots

    roots = library_roots()
    gpu = gpu_visible()
    refusal = refusal or (None if gpu is None or warm_gpu() else gpu)
    wanted = script_imports(Path(script)) if script else []
    folder = os.getcwd() if module else os.path.dirname(os.path.abspath(script or "."))
    with first_for_a_while(folder):
        for name in wanted:
            if refusal is not None:
                break
            if name in sys.modules or not installed_module(name, roots):
                continue
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - the script's import, the script's problem
                failed.append(f"{name} ({type(exc).__name__})")
                continue
            imported.append(name)
            if _threads() > base:
                refusal = f"importing {name} started a thread, which a fork would not copy"
        refusal = refusal or shadowed(folder)
    if gpu is not None and warm_gpu():
        refusal = refusal or cuda_started()
    return {"ready": refusal is None, "refusal": refusal, "imported": imported, "failed": failed,
            "threads": _threads()}


def preload_more(modules: Sequence[str]) -> dict[str, Any]:
    """Import ``modules`` into a server that is serving already; return its new ``ready`` message.

    The diagnose launches the server before the capture, which then shows what else the runs
    need (a script seen to compile: :data:`ON_SIGHT_MODULES`): importing that into the running
    server spares a new server's whole start (torch again, 3 s here). A module that fails to
    import or starts a thread ends the server's use, as at its start.
    """
    base, t0, imported = _threads(), time.perf_counter(), []
    for name in modules:
        try:
            _import_warm(name)
        except BaseException as exc:  # noqa: BLE001 - say why; the runs then start cold
            return {"ready": False, "refusal": f"the server's imports failed ({type(exc).__name__}: {exc})"}
        imported.append(name)
        if _threads() > base:
            return {"ready": False, "refusal": f"importing {name} started a thread, which a fork would not copy"}
    return {"ready": True, "refusal": None, "imported": imported, "import_s": time.perf_counter() - t0}


def shadowed(folder: str) -> str | None:
    """Say which module of ``folder`` (the script's ``sys.path[0]``) the server already imported from elsewhere.

    A cold child imports the script's own ``colorsys.py`` when the script asks for it; a warm
    child would find the library's, imported in the server (torch._dynamo brings hundreds of
    modules): such a script must start cold.
    """
    try:
        entries = os.listdir(folder) if folder else []
    except OSError:
        return None
    for entry in sorted(entries):
        name = entry[:-3] if entry.endswith(".py") else entry
        if not name.isidentifier() or name not in sys.modules:
            continue
        if entry.endswith(".py") or os.path.isfile(os.path.join(folder, entry, "__init__.py")):
            return f"the script's folder has {entry}, and the server imported a module of that name from elsewhere"
    return None
