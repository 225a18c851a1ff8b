"""benchmarks/kept_whole.py: what a report claimed for the kept fixes, and the one file its diff patches."""

from __future__ import annotations

import pytest
from bench_helpers import benchmark


@pytest.fixture(scope="module")
def bench():
    with benchmark("kept_whole") as module:
        yield module


def test_the_claim_is_the_kept_sets_trial_and_its_whole_run(bench) -> None:
    report = {
        "kept_fixes": ["dataloader_workers", "cpu_threads"],
        "combined": {"fix": "dataloader_workers+cpu_threads", "fixes": ["dataloader_workers", "cpu_threads"],
                     "speedup": 1.75},
        "kept_whole": {"scope": "run", "before_s": 12.7, "after_s": 8.7, "low": 1.27, "high": 1.67},
    }
    claim = bench.claim_of(report)
    assert (claim.kept, claim.step, claim.scope, claim.low, claim.high) == (
        ("dataloader_workers", "cpu_threads"), 1.75, "run", 1.27, 1.67)
    assert claim.whole == pytest.approx(12.7 / 8.7)
    assert claim.text() == "dataloader_workers+cpu_threads: steps 1.75x, whole run 1.46x [1.27-1.67]"
    # the combination lost to one fix kept alone: that fix's own trial; nothing kept: nothing claimed
    alone = {**report, "kept_fixes": ["dataloader_workers"], "kept_whole": None,
             "trials": [{"fix": "cpu_threads", "speedup": 1.1}, {"fix": "dataloader_workers", "speedup": 1.68}]}
    assert bench.claim_of(alone).step == 1.68 and bench.claim_of(alone).whole is None
    assert bench.claim_of({}).text() == "nothing: steps —, whole — —"


def test_the_diff_must_patch_one_file(bench) -> None:
    one = "--- a/examples/data_loading.py\n+++ b/examples/data_loading.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert bench.diff_target(one) == "examples/data_loading.py"
    two = one + "--- a/util.py\n+++ b/util.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert bench.diff_target(two) is None and bench.diff_target("") is None
