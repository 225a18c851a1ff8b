"""Every fix in the catalog is whole: install, diff plan or manual note, docs, a rule, a test.

Adding a fix means its own module under ``advisor/fixes/catalog/``, its test, and the rule that
suggests it; this walks the catalog and fails for a fix that lacks any of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.fixes import catalog
from advisor.fixes.docs import fixes_markdown, sample_diff, suggested_by
from advisor.fixes.fix import Fix, Safety

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "fixes.md"
FIXES = list(catalog.get_fixes().values())
TESTS = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests" / "fixes").glob("test_*.py"))

# NOTE: these fixes predate the one-object catalog and no rule suggests them yet (they run with
# `--fix ID`); a new fix may not join this list.
NO_RULE_YET = frozenset({"channels_last", "cudnn_benchmark", "fused_optimizer"})


@pytest.mark.parametrize("fix", FIXES, ids=[f.id for f in FIXES])
def test_every_fix_is_whole(fix: Fix) -> None:
    assert isinstance(fix.safety, Safety)
    assert fix.install is not None or fix.advice, f"{fix.id}: no run-time install (nor advice saying why)"
    assert fix.plan_diff is not None or fix.manual, f"{fix.id}: neither a diff plan nor a manual note"
    for field in ("description", "applies_when", "measured"):
        assert getattr(fix, field).strip(), f"{fix.id}: no {field}"
    assert (REPO / "advisor" / "fixes" / "catalog" / f"{fix.id}.py").is_file()
    assert f"## {fix.id}\n" in DOCS.read_text(encoding="utf-8"), f"{fix.id}: not in docs/fixes.md"
    assert f'"{fix.id}"' in TESTS, f"{fix.id}: no test under tests/fixes names it"
    if fix.id not in NO_RULE_YET:
        assert suggested_by(fix.id), f"{fix.id}: no rule suggests it"
    # A diff plan either changes the sample script or says what to change by hand.
    assert sample_diff(fix).strip(), f"{fix.id}: its diff plan says nothing on the sample script"


@pytest.mark.e2e
def test_the_catalog_imports_no_torch() -> None:
    code = (
        "import sys; from advisor.fixes import catalog; from advisor.engine.rules import default_rules; "
        "catalog.get_fixes(); default_rules(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_docs_fixes_md_is_up_to_date() -> None:
    actual = DOCS.read_text(encoding="utf-8") if DOCS.is_file() else ""
    if actual != fixes_markdown():
        pytest.fail("docs/fixes.md is out of date with advisor/fixes/catalog/: run `make docs`", pytrace=False)


def test_fix_and_fixes_commands(capsys) -> None:
    from advisor.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("fixes", "--format", "json")
    assert code == 0 and [d["id"] for d in json.loads(out)] == [f.id for f in FIXES]
    code, out, _ = run("fix", "larger_batch")
    assert code == 0 and "## How it is measured" in out and "batch_size=32" in out
    code, out, _ = run("fix", "--all", "--format", "json")
    assert code == 0 and {d["id"] for d in json.loads(out)} == {f.id for f in FIXES}
    code, out, err = run("fix", "pin_memry")
    assert code == 2 and out == "" and "did you mean 'pin_memory'" in err
    code, _, err = run("fix")
    assert code == 2 and "give one fix id" in err


def test_a_duplicate_or_dangling_fix_is_refused() -> None:
    pin = catalog.get("pin_memory")
    with pytest.raises(ValueError, match="already registered"):
        catalog.collect([pin, pin])
    with pytest.raises(ValueError, match="names unknown fix 'nope'"):
        catalog.collect([Fix("x", "safe", "x", requires="nope")])
    with pytest.raises(ValueError, match="safety must be"):
        Fix("x", "maybe", "x")


def test_a_fix_measured_on_top_of_another_shows_its_diff_with_it():
    # `advisor fix cpu_threads` said "no mechanical change" although diagnose writes one: alone on
    # the sample script it had no workers to give cores to. persistent_workers alone wrote a
    # DataLoader that torch refuses (persistent workers need num_workers > 0).
    assert "torch.set_num_threads(" in sample_diff(catalog.get("cpu_threads"))
    for fix_id in ("persistent_workers", "prefetch_factor", "cpu_threads"):
        assert "num_workers=1" in sample_diff(catalog.get(fix_id)), fix_id
