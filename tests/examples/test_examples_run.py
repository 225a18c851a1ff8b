"""Every example and its hand-fixed twin runs plainly with tiny arguments and reports its rate."""

from __future__ import annotations

import re

import pytest
from zoo_support import EXAMPLES, load_manifest, run_script

MANIFEST = load_manifest()
DONE = re.compile(r"^done: (\d+) steps, ([0-9.]+) samples/s", re.M)


DEMO = "data_loading"
"""The example ``make demo`` diagnoses: its hand-fixed twin also runs in ``make test``."""


def _cases():
    # NOTE: the other hand-fixed twins run in `make test-all`: each smoke run is a process that
    # imports torch (5-10 s on 2 cores), and `make test` must stay under 5 minutes.
    for name, entry in sorted(MANIFEST.items()):
        for variant in ("plain", "fixed"):
            slow = entry.get("slow_smoke") or (variant == "fixed" and name != DEMO)
            yield pytest.param(name, variant, id=f"{name}-{variant}", marks=[pytest.mark.slow] if slow else [])


def test_manifest_names_every_example_and_twin():
    scripts = {p.stem for p in EXAMPLES.glob("*.py")}
    twins = {p.stem for p in (EXAMPLES / "fixed").glob("*.py")}
    assert set(MANIFEST) <= scripts, "examples/expected.json names a missing example"
    assert set(MANIFEST) <= twins, "every example needs a twin in examples/fixed/"
    assert twins <= scripts, "a twin in examples/fixed/ has no original"
    for name, entry in MANIFEST.items():
        assert set(entry["expected"]) == {"cpu", "gpu"}, name
        assert entry["expected"]["gpu"], f"{name}: every example shows something on a GPU"


def test_each_example_names_its_bottleneck_and_fix():
    for name in MANIFEST:
        doc = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")[:3000]
        assert "Fix" in doc and ("Bottleneck" in doc or "What it shows" in doc), name
        assert "import advisor" not in doc and "from advisor" not in doc, name


@pytest.mark.e2e
@pytest.mark.parametrize(("name", "variant"), list(_cases()))
def test_example_runs(name, variant):
    path = EXAMPLES / (f"{name}.py" if variant == "plain" else f"fixed/{name}.py")
    proc = run_script(path, MANIFEST[name]["smoke_args"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "--mode" in MANIFEST[name]["smoke_args"] and "sweep" in MANIFEST[name]["smoke_args"]:
        assert "done: sweep" in proc.stdout, proc.stdout
        assert re.search(r"^\s+1\s+16\^3\s+[0-9.]+", proc.stdout, re.M), proc.stdout
        return
    m = DONE.search(proc.stdout)
    assert m, proc.stdout[-1000:]
    steps = int(MANIFEST[name]["smoke_args"][MANIFEST[name]["smoke_args"].index("--steps") + 1])
    assert int(m.group(1)) == steps
    assert float(m.group(2)) > 0
