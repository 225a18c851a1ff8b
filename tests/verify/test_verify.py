"""advisor verify: the diff applied in memory, the pairs' ratio and its interval, the claim beside it."""

from __future__ import annotations

import difflib
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.capture.model import RunCapture
from advisor.cli.main import cli
from advisor.errors import InputError, ScriptFailed
from advisor.fixes.model import Trial
from advisor.metrics.whole import KeptWholeRun, WholeScope
from advisor.report.model import Report
from advisor.verify.model import Agreement, Claim, ClaimScope, Pair, Verification
from advisor.verify.patch import apply_diff, diff_targets
from advisor.verify.run import claim_of, prepare, verify_run

ORIGINAL = textwrap.dedent("""\
    import sys
    import time
    from pathlib import Path

    DELAY = 0.6
    time.sleep(DELAY)
    Path(sys.argv[1]).write_text(f"{__name__} {Path(__file__).name} {sys.argv[0] == __file__} {DELAY}")
""")
FIXED = ORIGINAL.replace("DELAY = 0.6", "DELAY = 0.2  # advisor: the fix")


def _diff(before: str, after: str, name: str = "train.py") -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{name}", f"b/{name}"))


def test_the_diff_applies_to_the_source_it_was_made_from() -> None:
    diff = "# advisor: a remark before the diff\n" + _diff(ORIGINAL, FIXED)
    assert apply_diff(ORIGINAL, diff) == FIXED
    assert diff_targets(diff) == ["train.py"]
    longer = ORIGINAL + "".join(f"x{i} = {i}\n" for i in range(30))
    edited = longer.replace("import sys\n", "import sys\nimport os\n").replace("x29 = 29", "x29 = 0")
    assert apply_diff(longer, _diff(longer, edited)) == edited  # two hunks


def test_a_script_edited_since_its_diagnose_is_refused() -> None:
    with pytest.raises(InputError, match="changed since its diagnose"):
        apply_diff(ORIGINAL.replace("import time", "import time, os"), _diff(ORIGINAL, FIXED))
    with pytest.raises(InputError, match="no change"):
        apply_diff(ORIGINAL, "# advisor: only remarks\n")


def _verification(ratios: list[float], claim: Claim | None) -> Verification:
    pairs = tuple(Pair(r * 2.0, 2.0, 0.5, i % 2 == 1) for i, r in enumerate(ratios))
    return Verification("run", "train.py", (), ".", ("dataloader_workers",), claim, pairs)


def test_the_pairs_give_a_geometric_mean_and_a_t_interval() -> None:
    ratio, low, high = _verification([1.2, 1.5, 1.35], None).estimate
    assert ratio == pytest.approx((1.2 * 1.5 * 1.35) ** (1 / 3))
    logs = [math.log(x) for x in (1.2, 1.5, 1.35)]
    half = 4.303 * (sum((x - sum(logs) / 3) ** 2 for x in logs) / 2) ** 0.5 / 3 ** 0.5
    assert low == pytest.approx(ratio * math.exp(-half), rel=1e-3) and high == pytest.approx(ratio * math.exp(half), rel=1e-3)
    assert _verification([1.3], None).estimate[1:] == (None, None)  # one pair: no interval


def test_the_plain_timing_reads_against_the_claim() -> None:
    claim = Claim(1.45, 1.35, 1.56, ClaimScope.RUN)
    assert _verification([1.40, 1.42, 1.44], claim).agreement == Agreement.AGREES
    assert _verification([1.10, 1.12, 1.11], claim).agreement == Agreement.BELOW
    assert _verification([1.90, 1.92, 1.91], claim).agreement == Agreement.ABOVE
    assert _verification([1.40], claim).agreement == Agreement.UNDECIDED
    steps = Claim(1.8, 1.5, 2.1, ClaimScope.STEPS)  # a whole run gains less than its steps: below is no contradiction
    assert _verification([1.10, 1.12, 1.11], steps).agreement == Agreement.AGREES
    assert _verification([2.50, 2.52, 2.51], steps).agreement == Agreement.ABOVE


def _run_dir(tmp_path: Path, kept: tuple[str, ...] = ("cpu_threads",), diff: str | None = None) -> Path:
    script = tmp_path / "proj" / "train.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(ORIGINAL)
    run = tmp_path / "run"
    run.mkdir()
    RunCapture(script=str(script), args=(str(tmp_path / "out.txt"),)).save(run)
    trial = Trial(fix="cpu_threads", safety="safe", fixes=("cpu_threads",), speedup=2.5, ci_low=2.0, ci_high=3.0)
    whole = KeptWholeRun(WholeScope.RUN, 0.9, 0.4, low=1.8, high=2.6)
    Report(kept_fixes=kept, trials=(trial,) if kept else (), diff=_diff(ORIGINAL, FIXED) if diff is None else diff,
           kept_whole=whole if kept else None).save(run)
    return run


def test_the_claim_is_the_whole_run_where_projected_else_the_steps(tmp_path: Path) -> None:
    report = Report.load(_run_dir(tmp_path))
    assert claim_of(report) == Claim(0.9 / 0.4, 1.8, 2.6, ClaimScope.RUN)
    import dataclasses

    assert claim_of(dataclasses.replace(report, kept_whole=None)) == Claim(2.5, 2.0, 3.0, ClaimScope.STEPS)


@pytest.mark.parametrize(("kept", "diff", "message"), [
    ((), None, "kept no fix"),
    (("cpu_threads",), "", "no source change"),
    (("cpu_threads",), _diff("a\n", "b\n", "other.py"), "not the script alone"),
])
def test_a_run_that_cannot_be_verified_says_why(tmp_path: Path, kept, diff, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=message):
        prepare(_run_dir(tmp_path, kept, diff), tmp_path)
    assert not (tmp_path / "run" / "verify.json").exists()


@pytest.mark.e2e
def test_verify_times_the_script_and_its_patched_source_as_the_script_itself(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    out = CliRunner().invoke(cli, ["verify", str(run), "--pairs", "2", "--cwd", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "Plainly:  " in out.output and "Claimed:  2.25× [1.80–2.60] on the whole run" in out.output
    # the patched source ran as the script: __main__, its own __file__ and argv[0]
    assert (tmp_path / "out.txt").read_text() in ("__main__ train.py True 0.2", "__main__ train.py True 0.6")
    saved = json.loads((run / "verify.json").read_text())
    assert saved["complete"] and len(saved["pairs"]) == 2
    assert [p["fixed_first"] for p in saved["pairs"]] == [False, True]  # the order flips
    for p in saved["pairs"]:
        assert p["original_s"] > p["fixed_s"] + 0.25  # 0.6 s against 0.2 s of sleep, whatever the load
    assert (tmp_path / "proj" / "train.py").read_text() == ORIGINAL  # the user's script untouched


@pytest.mark.e2e
def test_a_script_that_fails_is_one_clear_error_and_no_pair(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    (tmp_path / "proj" / "train.py").write_text(ORIGINAL.replace("time.sleep(DELAY)", "raise SystemExit(3)"))
    bad = _diff(ORIGINAL.replace("time.sleep(DELAY)", "raise SystemExit(3)"),
                FIXED.replace("time.sleep(DELAY)", "raise SystemExit(3)"))
    Report(kept_fixes=("cpu_threads",), diff=bad).save(run)
    with pytest.raises(ScriptFailed, match="exited with code 3"):
        verify_run(run, 2, tmp_path)
    assert json.loads((run / "verify.json").read_text())["pairs"] == []
    assert sys.executable  # the runs used this interpreter
