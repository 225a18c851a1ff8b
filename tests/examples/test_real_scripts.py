"""Real code as a standing check (issue 15): every script in ``../shared/real`` through
``advisor diagnose``, as ``benchmarks/real.py`` runs them, each meeting what the README expects:
exit 0 with the expected step source and a primary bottleneck, or exit 3 with a one-line reason
naming the script's own failure. Diagnosis only (``--no-fixes``) to keep it bounded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "real.py"


def _real():
    spec = importlib.util.spec_from_file_location("advisor_bench_real", BENCH)
    module = importlib.util.module_from_spec(spec)
    # NOTE: registered before it runs: its dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


real = _real()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not real.REAL.is_dir(), reason=f"{real.REAL} is absent (real scripts live next to the repo)"),
]


@pytest.mark.parametrize("case", real.CASES, ids=[c.name for c in real.CASES])
def test_real_script_meets_its_expectation(case):
    row = real.run_case(case, fixes=False, timeout=400)
    assert row.ok, real.table([row])
    if row.exit_code == 3:
        assert row.reason and "\n" not in row.reason
        assert "no training step" not in row.reason
