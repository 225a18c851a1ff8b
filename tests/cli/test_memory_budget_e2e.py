"""End to end: a script that runs out of memory under ``diagnose --memory-budget`` is named so, and the memory fixes make it fit.

examples/memory_bound.py peaks near 1 GiB of resident memory on CPU (activations of 40 MiB
tensors, which glibc hands back to the system, so the peak follows the live activations);
checkpointing its blocks or splitting its batch brings it to about 0.6-0.85 GiB. Under an
800 MiB budget the baseline is stopped by the watchdog, and the fix loop tries both fixes alone.
NOTE: a warm-started trial run (forked from the warm-start server) reads about 100 MiB less
resident memory than a cold one (873 vs 975 MiB here): 900 MiB stopped the cold diagnose run but
not the warm trial baseline, so the budget sits below both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "memory_bound.py"


@pytest.mark.slow
def test_an_out_of_memory_baseline_is_reported_and_a_memory_fix_makes_it_fit(capsys, tmp_path):
    report_file = tmp_path / "report.json"
    code, _, err = invoke(
        capsys, "diagnose", "--out", str(tmp_path / "run"), "--memory-budget", "800MB", "--unsafe-fixes",
        "--warmup", "1", "--steps", "3", "--profile-steps", "1", "--repeats", "1",
        "--format", "json", "-o", str(report_file), str(EXAMPLE),
    )
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert code == 3, err  # the script as it is does not fit: a failed script, with its report
    assert report["run"]["status"] == "crashed"
    assert "over the memory budget of 800 MiB" in json.dumps(report["run"])
    trials = {t["fix"]: t for t in report["trials"]}
    assert set(trials) >= {"activation_checkpointing", "fit_accumulation"}
    fits = [t for t in trials.values() if t["verdict"] == "improved"]
    assert fits, trials
    assert all("the baseline ran out of memory, fits: peak" in t["reason"] for t in fits)
    assert all(t["peak_memory_bytes"] <= 800 * 2**20 for t in fits)
    assert report["kept_fixes"] and report["kept_fixes"][0] in trials
    assert any("the baseline ran out of memory" in n for n in report["notes"])
