"""The metrics stage never imports the distributed package (distributed builds on metrics).

Checked statically with :mod:`ast` over every module under ``advisor/metrics/``, including
imports inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

METRICS_DIR = Path(__file__).resolve().parents[2] / "advisor" / "metrics"
FORBIDDEN = "advisor.distributed"


def forbidden_imports(source: str, module: str) -> list[str]:
    """Return ``line: imported name`` for each import of ``advisor.distributed`` in ``source``.

    Args:
        source: Python source text.
        module: Dotted name of the module the source belongs to (resolves relative imports).
    """
    package = module.rsplit(".", 1)[0]
    hits: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # ``from advisor import distributed`` names the package in the alias, not the module.
            names = [target, *(f"{target}.{a.name}" for a in node.names)]
        hits += [f"{node.lineno}: {n}" for n in names if n == FORBIDDEN or n.startswith(FORBIDDEN + ".")]
    return hits


@pytest.mark.parametrize(
    "source",
    [
        "import advisor.distributed.balance",
        "from advisor.distributed.balance import rank_balance",
        "from advisor import distributed",
        "def f():\n    from advisor.distributed import merge\n",
        "from ..distributed.balance import rank_balance",
    ],
)
def test_detector_catches_each_import_form(source: str) -> None:
    assert forbidden_imports(source, "advisor.metrics.compute")


def test_detector_ignores_unrelated_imports() -> None:
    src = "import advisor.metrics.balance\nfrom advisor.metrics import registry\nfrom . import model\n"
    assert forbidden_imports(src, "advisor.metrics.compute") == []


def test_metrics_never_imports_distributed() -> None:
    files = sorted(METRICS_DIR.rglob("*.py"))
    assert files, f"no modules found under {METRICS_DIR}"
    bad = {}
    for path in files:
        rel = path.relative_to(METRICS_DIR.parents[1]).with_suffix("")
        # NOTE: ``advisor.metrics.__init__`` keeps its package ``advisor.metrics`` for relative imports.
        module = ".".join(rel.parts)
        hits = forbidden_imports(path.read_text(encoding="utf-8"), module)
        if hits:
            bad[str(path.relative_to(METRICS_DIR.parents[1]))] = hits
    assert not bad, f"advisor.metrics must not import advisor.distributed: {bad}"


def test_distributed_balance_reexports_the_metrics_implementation() -> None:
    from advisor.distributed import balance as old
    from advisor.metrics import balance as new

    assert old.rank_balance is new.rank_balance and old.RankBalance is new.RankBalance
