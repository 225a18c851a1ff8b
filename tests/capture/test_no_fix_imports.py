"""The capture stage knows nothing of the fix stage: the child imports installers by name."""

from __future__ import annotations

import ast
from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[2] / "advisor" / "capture"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_capture_module_imports_the_fix_stage():
    found = {
        f"{path.name}: {name}"
        for path in sorted(CAPTURE.glob("*.py"))
        for name in _imports(path)
        if name == "advisor.fixes" or name.startswith("advisor.fixes.")
    }
    assert not found, f"capture imports the fix stage: {sorted(found)}"


def test_a_run_with_fixes_and_no_installer_says_so(tmp_path: Path):
    from advisor.capture.child import ChildSession
    from advisor.capture.model import FixRequest, RunSpec

    child = ChildSession.__new__(ChildSession)
    child.spec = RunSpec(script=tmp_path / "x.py", fixes=(FixRequest("pin_memory"),))
    child.notes = []
    child._install_fixes()
    assert child.fix_notes == {"pin_memory": "not applied: the run asked for fixes but named no installer"}
    assert child.notes == ["run-time fixes were asked for but no installer was named"]
