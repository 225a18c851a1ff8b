"""A fix brings its own source edit: the seam between DiffPlan's generic pass and a fix's transformation.

``diff.transform`` runs every :class:`~advisor.fixes.diff_plan.SourceEdit` the kept fixes
planned, in catalog order, once per fix, before the generic pass; nothing in the core names
a fix's edit. A stand-in fix outside the catalog shows it, and the catalog's own edits
("fused_attention", "host_reads", "activation_checkpointing") are found through the same seam.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import libcst as cst
import pytest

from advisor.fixes import catalog
from advisor.fixes.diff import transform
from advisor.fixes.diff_plan import DiffPlan, EditScope, SourceEdit
from advisor.fixes.fix import SAFE, Fix
from advisor.fixes.model import Trial, set_name

CATALOG = Path(catalog.__file__).parent

SCRIPT = """\
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=8)
for x, y in loader:
    loss = model(x)
    print(loss.item())
"""


@dataclasses.dataclass(frozen=True)
class Mark:
    """A stand-in fix's edit: one statement at the end, and a note."""

    text: str
    name: str = "mark_edit"

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        scope.header_statements.append("torch.manual_seed(0)")
        seen = f"loaders={sorted(scope.loaders)}"
        return module.with_changes(body=[*module.body, cst.parse_statement(f"mark = {self.text!r}\n")]), [seen]


def _mark_plan(plan: DiffPlan, params: dict[str, Any]) -> None:
    plan.edits.append(Mark(params.get("text", "first")))


@pytest.fixture
def with_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog plus a stand-in fix "mark_edit" that brings its own edit (no core file knows it)."""
    fixes = dict(catalog.get_fixes())
    fixes["mark_edit"] = Fix(id="mark_edit", safety=SAFE, description="mark", plan_diff=_mark_plan)
    monkeypatch.setattr(catalog, "get_fixes", lambda: fixes)


def test_a_fix_outside_the_core_brings_its_edit(with_mark: None) -> None:
    assert isinstance(Mark("x"), SourceEdit)
    new, manual = transform(SCRIPT, [Trial("mark_edit", "safe", params={"text": "hello"})])
    assert new.endswith("mark = 'hello'\n")
    # what the edit adds after the imports joins the generic pass's header statements
    assert "from torch.utils.data import DataLoader\ntorch.manual_seed(0)\nloader = " in new
    assert manual == ["loaders=['loader']"]


def test_edits_run_once_per_fix_in_catalog_order_before_the_generic_pass(with_mark: None) -> None:
    ids = ("mark_edit", "host_reads", "dataloader_workers")
    params = {"mark_edit": {"text": "combined"}, "host_reads": {}, "dataloader_workers": {"num_workers": 2}}
    kept = [
        Trial("mark_edit", "safe", params={"text": "alone"}),
        Trial(set_name(ids), "safe", fixes=ids, params=params),
    ]
    new, manual = transform(SCRIPT, kept)
    # one mark (the last planned), host_reads' edit and the generic DataLoader keyword all made
    assert new.count("mark = ") == 1 and "mark = 'combined'" in new
    assert "if advisor_step % 20 == 0:\n        print(loss.item())" in new
    assert "num_workers=2" in new
    # host_reads is in the catalog, the stand-in follows it: its note comes after host_reads' (none)
    assert manual == ["loaders=['loader']"]


def test_an_edit_that_finds_nothing_says_what_to_do_by_hand() -> None:
    src = "import torch\nx = 1\n"
    kept = [Trial(f, "safe") for f in ("fused_attention", "host_reads", "activation_checkpointing")]
    _, manual = transform(src, kept)
    # in catalog order, each from its own fix
    assert [m.split(":")[0] for m in manual] == ["fused_attention", "host_reads", "activation_checkpointing"]


def test_the_plan_keeps_no_single_fix_flag() -> None:
    names = {f.name for f in dataclasses.fields(DiffPlan)}
    assert not names & {"fused_attention", "checkpoint_loops", "read_every", "threads_for_workers"}


def test_catalog_modules_import_no_parser_at_module_level() -> None:
    """An edit imports its libcst transformation when it runs: the child, which installs fixes, never pays for it."""
    for path in sorted(CATALOG.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "libcst" or n.startswith(("libcst.", "advisor.fixes.edits")) for n in names), path.name


def test_a_module_not_listed_in_the_order_follows_the_listed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    assert catalog.module_names()[: len(catalog.MODULES)] == catalog.MODULES
    monkeypatch.setattr(catalog, "MODULES", (*catalog.MODULES, "no_such_fix"))
    with pytest.raises(ValueError, match="no_such_fix"):
        catalog.module_names()
