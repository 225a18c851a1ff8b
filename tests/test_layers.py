"""The layers of the house, checked statically: which of our packages each package may import.

cli -> api -> {report, fixes, distributed, engine, metrics, capture, trace}. Every import of an
``advisor`` module is read with :mod:`ast` from every file under ``advisor/``, including imports
inside functions and under ``TYPE_CHECKING`` (a lazy import is still a dependency), and each
edge between two packages must be allowed by :data:`ALLOWED` or listed in :data:`EXCEPTIONS`.
A new leak fails here with the file, line and imported module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ADVISOR = Path(__file__).resolve().parents[1] / "advisor"

ROOT = "(root)"
"""``advisor/__init__.py`` (``__version__``, ``advisor.step``): imports nothing of ours."""
SHARED = frozenset({ROOT, "errors", "_serde", "_vocab", "_num", "_paths", "_proc", "_proctree", "_listeners", "_files", "_terminal", "_steady", "rundir"})
"""Small leaf modules every layer may use (errors, JSON helpers, vocabularies, path display, processes and their trees
and the listener folders they leave,
safe file writers, terminal-safe text, the run directory's names)."""

ALLOWED: dict[str, frozenset[str]] = {
    # The command line: only the api door (and the error types and version it prints).
    # NOTE: and the two leaf helpers of the process's own boundary: signal handling (_proc) and
    # terminal-safe text for the error line it prints (_terminal).
    "cli": frozenset({ROOT, "errors", "api", "_proc", "_terminal"}),
    "__main__": frozenset({"cli"}),
    # The door: every stage, never the command line.
    "api": SHARED | {"config", "capture", "trace", "metrics", "engine", "fixes", "distributed", "report", "sweep",
                     "verify"},
    # Times a saved run's script plainly beside its claim: reads the run (capture, report) and the
    # fix loop's t quantile and the whole run's scope.
    "verify": SHARED | {"capture", "fixes", "metrics", "report"},
    # The batch x precision table: runs cells through the fix loop's measurer and catalog, reads
    # device peaks (metrics) and draws its HTML page with the report's page shell and plot helpers.
    "sweep": SHARED | {"capture", "fixes", "metrics", "report"},
    # Renders saved models of every stage; never calls back into the api.
    "report": SHARED | {"capture", "trace", "metrics", "engine", "fixes", "distributed"},
    "fixes": SHARED | {"capture", "trace", "metrics", "engine"},
    "distributed": SHARED | {"capture", "trace", "metrics"},
    "engine": SHARED | {"metrics"},
    "config": SHARED | {"engine"},
    "metrics": SHARED | {"capture", "trace"},
    # Runs the script; knows neither ranks (distributed) nor fix installers (fixes).
    "capture": SHARED,
    # Reads trace files; knows nothing of ours but the errors.
    "trace": frozenset({"errors"}),
    "errors": frozenset(),
    "_serde": frozenset({"errors", "_files"}),
    "_vocab": frozenset(),
    "_num": frozenset(),
    "_steady": frozenset({"_vocab"}),
    "_paths": frozenset({"errors"}),
    "_proc": frozenset({"errors", "_proctree", "_listeners"}),
    "_proctree": frozenset(),
    "_listeners": frozenset(),
    "_files": frozenset({"errors"}),
    "_terminal": frozenset(),
    "rundir": frozenset({"errors"}),
    ROOT: frozenset(),
}
"""Package (or top-level module) -> the other packages of ours it may import."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    # NOTE: the public Python API (issue #20): ``advisor.diagnose``/``analyze``/``load``,
    # ``advisor.frames`` and ``advisor.Report`` are imported in the root's ``__getattr__`` on
    # first use (and under TYPE_CHECKING), never when ``advisor`` is imported, so the stages
    # still load without the root importing them; tests/test_api.py checks ``import advisor``
    # imports none of them.
    ("advisor", "advisor.api"): "the public facade (issue #20), lazy",
    ("advisor", "advisor.report.frames"): "the public facade (issue #20), lazy",
    ("advisor", "advisor.report.model"): "the public facade (issue #20), lazy",
}
"""(importing module, imported module) -> the issue that removes the leak. Nothing else."""


@dataclass(frozen=True)
class Edge:
    """One import of an advisor module: who imports what, and where."""

    module: str
    imported: str
    path: Path
    line: int


def module_names(root: Path = ADVISOR) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (packages by their ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(source: str, module: str, is_package: bool, known: set[str] | dict[str, Path]) -> list[tuple[str, int]]:
    """Return ``(imported advisor module, line)`` for every import in ``source``.

    ``from advisor.x import y`` names ``advisor.x.y`` when that is a module of ours, else
    ``advisor.x``; relative imports are resolved against ``module``.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        found += [(t, node.lineno) for t in targets if t == "advisor" or t.startswith("advisor.")]
    return found


def layer_of(module: str) -> str:
    """``advisor.metrics.steps`` -> ``metrics``; ``advisor`` -> :data:`ROOT`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def all_edges() -> list[Edge]:
    """Every import of an advisor module by an advisor module, across packages."""
    known = module_names()
    edges: list[Edge] = []
    for module, path in known.items():
        for imported, line in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py", known):
            if layer_of(imported) != layer_of(module):
                edges.append(Edge(module, imported, path, line))
    return edges


def leaks(edges: list[Edge]) -> list[str]:
    """The edges :data:`ALLOWED` and :data:`EXCEPTIONS` do not permit, one readable line each."""
    bad = []
    for e in edges:
        allowed = ALLOWED.get(layer_of(e.module))
        if allowed is None:
            bad.append(f"{e.path.relative_to(ADVISOR.parent)}: package {layer_of(e.module)!r} has no entry in ALLOWED")
        elif layer_of(e.imported) not in allowed and (e.module, e.imported) not in EXCEPTIONS:
            bad.append(f"{e.path.relative_to(ADVISOR.parent)}:{e.line}: {e.module} imports {e.imported}")
    return bad


def test_layers_hold() -> None:
    edges = all_edges()
    assert len(edges) > 50, "the import scan found almost nothing; is ADVISOR right?"
    bad = leaks(edges)
    assert not bad, "imports that break the layers (see ALLOWED in tests/test_layers.py):\n" + "\n".join(bad)


def test_every_exception_is_still_needed() -> None:
    used = {(e.module, e.imported) for e in all_edges()}
    stale = [f"{a} -> {b} ({issue})" for (a, b), issue in EXCEPTIONS.items() if (a, b) not in used]
    assert not stale, f"delete these entries from EXCEPTIONS, the imports are gone: {stale}"


def test_allowed_layers_form_no_cycle() -> None:
    """The allowed package graph is a DAG, so no two packages can ever import each other."""
    state: dict[str, int] = {}

    def visit(node: str, trail: tuple[str, ...]) -> None:
        if state.get(node) == 2:
            return
        assert state.get(node) != 1, f"cycle among allowed layers: {' -> '.join((*trail, node))}"
        state[node] = 1
        for nxt in ALLOWED.get(node, ()):
            visit(nxt, (*trail, node))
        state[node] = 2

    for layer in ALLOWED:
        visit(layer, ())


def test_every_package_has_a_layer() -> None:
    missing = {layer_of(m) for m in module_names()} - set(ALLOWED)
    assert not missing, f"add these packages to ALLOWED in tests/test_layers.py: {sorted(missing)}"


# --- the named rules of issue #13, spelled out (ALLOWED already implies them) ---


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("cli", {"capture", "trace", "metrics", "engine", "fixes", "distributed", "report", "config"}),
        ("report", {"api", "cli"}),
        ("capture", {"distributed", "fixes"}),
        ("metrics", {"fixes", "report", "distributed"}),
        ("trace", set(SHARED | set(ALLOWED)) - {"errors", "trace"}),
        ("api", {"cli"}),
    ],
)
def test_named_rule(importer: str, forbidden: set[str]) -> None:
    assert not (ALLOWED[importer] & forbidden), f"ALLOWED[{importer!r}] grants {sorted(ALLOWED[importer] & forbidden)}"
    hits = [
        f"{e.path.relative_to(ADVISOR.parent)}:{e.line}: {e.imported}"
        for e in all_edges()
        if layer_of(e.module) == importer and layer_of(e.imported) in forbidden and (e.module, e.imported) not in EXCEPTIONS
    ]
    assert not hits, f"{importer} must not import {sorted(forbidden)}: {hits}"


# --- the scanner itself: each import form is seen ---

KNOWN = {"advisor", "advisor.metrics", "advisor.metrics.compute", "advisor.distributed", "advisor.distributed.balance"}


@pytest.mark.parametrize(
    "source",
    [
        "import advisor.distributed.balance",
        "from advisor.distributed.balance import rank_balance",
        "from advisor import distributed",
        "def f():\n    from advisor.distributed import balance\n",
        "from ..distributed.balance import rank_balance",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from advisor.distributed import balance\n",
    ],
)
def test_scanner_sees_each_import_form(source: str) -> None:
    found = imports_of(source, "advisor.metrics.compute", False, KNOWN)
    assert [layer_of(m) for m, _ in found] == ["distributed"]


def test_scanner_ignores_other_packages_and_resolves_relative_imports() -> None:
    src = "import os\nimport torch\nfrom . import compute\nfrom .compute import x\n"
    found = [m for m, _ in imports_of(src, "advisor.metrics.steps", False, KNOWN)]
    assert found == ["advisor.metrics.compute", "advisor.metrics.compute"]


def test_a_leak_is_reported_with_file_and_line() -> None:
    fake = Edge("advisor.report.compare", "advisor.api", ADVISOR / "report" / "compare.py", 7)
    assert leaks([fake]) == ["advisor/report/compare.py:7: advisor.report.compare imports advisor.api"]


# --- no cycle between the modules of one package ---


def package_cycles(edges: list[tuple[str, str]]) -> list[list[str]]:
    """Return one cycle (``[a, b, ..., a]``) per strongly connected group of modules in ``edges``."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    cycles: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        # NOTE: an iterative depth-first walk: the first back edge found closes one cycle.
        trail: list[str] = [start]
        on_trail = {start}
        todo = [iter(sorted(graph[start]))]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                finished = trail.pop()
                done.add(finished)
                on_trail.discard(finished)
                todo.pop()
            elif nxt in on_trail:
                cycles.append([*trail[trail.index(nxt):], nxt])
                done.update(trail)
                break
            elif nxt not in done:
                trail.append(nxt)
                on_trail.add(nxt)
                todo.append(iter(sorted(graph[nxt])))
    return cycles


def test_no_import_cycle_inside_a_package() -> None:
    """Modules of one package import each other one way only, lazy imports included.

    A function-level import that closes a loop works at run time but hides a tangle (the report's
    view once imported the terminal renderer, which imported the view back).
    """
    known = module_names()
    edges = []
    for module, path in known.items():
        for imported, _ in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py", known):
            same = layer_of(imported) == layer_of(module) != ROOT
            if same and imported != module and imported in known:
                edges.append((module, imported))
    assert len(edges) > 50, "the import scan found almost nothing; is ADVISOR right?"
    cycles = package_cycles(edges)
    assert not cycles, "import cycles inside a package:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ([("a", "b"), ("b", "c")], []),
        ([("a", "b"), ("b", "a")], [["a", "b", "a"]]),
        ([("a", "b"), ("b", "c"), ("c", "b")], [["b", "c", "b"]]),
    ],
)
def test_the_cycle_finder(edges: list[tuple[str, str]], expected: list[list[str]]) -> None:
    assert package_cycles(edges) == expected
