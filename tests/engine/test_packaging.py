"""The rules ship inside the wheel (STYLE.md anti-pattern 5), and pyproject lists every package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def _packages() -> list[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data["tool"]["setuptools"]["packages"]


def test_every_advisor_package_is_listed_in_pyproject():
    """pyproject lists packages explicitly (to map rules/ in); a new subpackage must be added."""
    listed = set(_packages())
    on_disk = {
        ".".join(path.parent.relative_to(REPO).parts)
        for path in (REPO / "advisor").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    missing = sorted(on_disk - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert "advisor._rules" in listed
    # each rules/<category>/ folder is a package of data: unlisted, every install warns (issue #32)
    categories = {f"advisor._rules.{p.parent.name}" for p in (REPO / "rules").glob("*/*.yaml")}
    missing = sorted(categories - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages (and package-data) in pyproject.toml"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the sources (the working tree stays untouched)."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    for name in ("advisor", "rules"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        # NOTE: not -q: the backend's warnings are what test_the_build_prints_no_warning reads
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (out / "build.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    wheels = list(out.glob("advisor-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


@pytest.mark.e2e
def test_wheel_contains_every_rule_file(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        expected = {f"advisor/_rules/{p.relative_to(REPO / 'rules').as_posix()}" for p in (REPO / "rules").rglob("*.yaml")}
        assert expected, "no rule files in the repository"
        assert expected <= names, sorted(expected - names)
        assert zf.read("advisor/_rules/data_loading/DL001.yaml") == (REPO / "rules/data_loading/DL001.yaml").read_bytes()
        assert "advisor/engine/rules.py" in names
        # the trace scanner is compiled where a C compiler is (optional: skipped without one)
        if shutil.which("cc") or shutil.which("gcc"):
            assert any(n.startswith("advisor/trace/_scan.") and n.endswith((".so", ".pyd")) for n in names), sorted(names)[:5]


@pytest.mark.e2e
def test_rules_load_from_the_unpacked_wheel(wheel, tmp_path):
    """Installed (not a checkout): the loader finds advisor/_rules and loads every rule."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    code = (
        "from advisor.engine.rules import rules_root, checkout_rules_dir, load_rules;"
        "assert checkout_rules_dir() is None, checkout_rules_dir();"
        "root = rules_root(); rs = load_rules();"
        "print(len(rs), str(root).replace(chr(92), '/'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, root = proc.stdout.split()
    assert int(count) == len(list((REPO / "rules").rglob("*.yaml")))
    assert root.endswith("site/advisor/_rules")


@pytest.mark.e2e
def test_the_build_prints_no_warning_from_our_configuration(wheel):
    # issue #32: ~80 lines of setuptools warnings on `pip install -e .` (a TOML-table license,
    # the rules' category folders absent from the packages list)
    log = (wheel.parent / "build.log").read_text(encoding="utf-8")
    warnings = [line.strip() for line in log.splitlines() if "Warning" in line or "deprecated" in line]
    assert warnings == [], warnings
