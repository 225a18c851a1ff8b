"""The ``e2e`` list (tests/e2e_tests.py) names real files and tests, so a rename cannot silently
move an end-to-end test into ``make test-unit``."""

from __future__ import annotations

import ast
from pathlib import Path

from e2e_tests import E2E

REPO = Path(__file__).resolve().parents[1]


def test_every_e2e_entry_exists() -> None:
    missing = []
    for entry in E2E:
        file, _, test = entry.partition("::")
        path = REPO / "tests" / file
        if not path.is_file():
            missing.append(entry)
            continue
        if test:
            names = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.FunctionDef)}
            if test not in names:
                missing.append(entry)
    assert not missing, f"tests/e2e_tests.py names files or tests that do not exist: {missing}"


def test_an_e2e_test_is_marked(request) -> None:
    assert request.node.get_closest_marker("e2e") is None  # this file is a unit test
    assert any(Path(e.partition("::")[0]).name == "test_capture_timeout.py" for e in E2E)
