"""The prepared GPU check (benchmarks/gpu_check.py): its dry run and its judgement of a report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench_helpers import benchmark

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def check():
    with benchmark("gpu_check") as module:
        yield module


def test_the_dry_run_checks_the_plumbing_and_skips_every_cuda_case(check, tmp_path: Path):
    assert check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "gpu-check.json").read_text())
    assert data["dry_run"] and data["problems"] == []
    manifest = json.loads(check.MANIFEST.read_text())["examples"]
    assert [c["name"] for c in data["cases"]] == list(manifest)
    assert all(c["status"] == "skipped" and c["reason"] == "dry run" for c in data["cases"])
    assert {"python", "torch", "cuda_available", "nvml", "import_advisor"} <= set(data["environment"])
    assert data["environment"]["import_advisor"] != "failed"
    assert "| pageable_copies | host_to_device |" in (tmp_path / "gpu-check.md").read_text()


def _report(primary="host_to_device", gpu=0.4, trials=()):
    return {"primary": {"category": primary}, "summary": {"gpu_compute_frac": gpu, "gpu_util_frac": 0.7},
            "kept_fixes": ["pinned_memory"], "combined": {"speedup": 1.8}, "trials": list(trials),
            "run": {"status": "stopped"}}


def test_a_report_is_judged_on_its_primary_gpu_time_and_trials(check):
    ok = check.Case("pageable_copies", "host_to_device")
    check.read_report(ok, _report())
    assert (ok.status, ok.kept, ok.speedup, ok.nvml_sampled) == ("ok", ["pinned_memory"], 1.8, True)
    wrong = check.Case("pageable_copies", "host_to_device")
    check.read_report(wrong, _report(primary="compute"))
    assert wrong.status == "mismatch" and "expected host_to_device" in wrong.reason
    blind = check.Case("pageable_copies", "host_to_device")
    check.read_report(blind, _report(gpu=0.0))
    assert blind.status == "failed" and "CUPTI" in blind.reason
    trials = [{"fix": "bf16_autocast", "verdict": "failed", "reason": "loss moved 40% (loss parity)"},
              {"fix": "pinned_memory", "verdict": "improved", "reason": ""}]
    lossy = check.Case("compute_bound", "compute")
    check.read_report(lossy, _report(primary="compute", trials=trials))
    assert lossy.status == "ok" and lossy.trial_problems == ["bf16_autocast: loss parity: loss moved 40% (loss parity)"]


def test_a_kept_diff_is_applied_to_a_copy_and_timed_in_turn(check, tmp_path: Path, monkeypatch):
    import difflib

    script = check.EXAMPLES / "pageable_copies.py"
    source = script.read_text()
    fixed = source.replace('p.add_argument("--batch-size", type=int, default=128)',
                           'p.add_argument("--batch-size", type=int, default=64)')
    assert fixed != source
    diff = "".join(difflib.unified_diff(source.splitlines(True), fixed.splitlines(True),
                                        "a/pageable_copies.py", "b/pageable_copies.py"))
    run_dir = tmp_path / "runs" / "pageable_copies"
    run_dir.mkdir(parents=True)
    (run_dir / "fix.diff").write_text(diff)
    (run_dir / "report.json").write_text("{}")
    (run_dir / "traces").mkdir()
    (run_dir / "traces" / "step.pt.trace.json").write_text("{}")
    assert check.has_source_diff(run_dir)
    timed: list[tuple[str, str]] = []
    rates: dict[str, int] = {}

    def fake_rate(path: Path, args, timeout):
        variant = "fixed" if "default=64" in path.read_text() else "original"
        timed.append((variant, str(path)))
        rates[variant] = rates.get(variant, 0) + 1
        return {"fixed": [150.0, 180.0], "original": [100.0, 100.0]}[variant][rates[variant] - 1]

    monkeypatch.setattr(check, "plain_rate", fake_rate)
    case = check.Case("pageable_copies", "host_to_device")
    check.reproduce(case, {"args": []}, tmp_path, deadline=__import__("time").monotonic() + 60)
    assert [v for v, _ in timed] == ["original", "fixed", "fixed", "original"]  # in turn, order swapped
    assert all(str(tmp_path) in p for v, p in timed if v == "fixed")  # the copy, never the example
    assert script.read_text() == source
    # two rounds: the mean of their ratios (1.5 and 1.8), not the larger one
    assert case.plain_speedup == 1.65 and case.plain_rates == {"original": [100.0, 100.0], "advisor": [150.0, 180.0]}
    out = tmp_path / "out"
    out.mkdir()
    check.pack_runs(tmp_path, out)
    import tarfile

    with tarfile.open(out / "runs.tar.gz") as tar:
        assert tar.getnames() == ["runs/pageable_copies/fix.diff", "runs/pageable_copies/report.json"]


def test_the_twin_is_timed_beside_advisors_kept_diff_in_the_same_rounds(check, tmp_path: Path, monkeypatch):
    import difflib

    # chargpt.py is a launcher: advisor's diff changes attention_lm.py, which holds its training code
    source = (check.EXAMPLES / "attention_lm.py").read_text()
    fixed = source.replace("import torch\n", "import torch  # advisor\n", 1)
    assert fixed != source
    diff = "".join(difflib.unified_diff(source.splitlines(True), fixed.splitlines(True),
                                        "a/attention_lm.py", "b/attention_lm.py"))
    (tmp_path / "runs" / "chargpt").mkdir(parents=True)
    (tmp_path / "runs" / "chargpt" / "fix.diff").write_text(diff)
    order: list[str] = []

    def fake_rate(path: Path, args, timeout):
        lm = (path.parent / "attention_lm.py").read_text()
        name = "twin" if path.parent.name == "fixed" else "advisor" if "# advisor" in lm else "original"
        order.append(name)
        return {"original": 100.0, "twin": 200.0, "advisor": 150.0}[name]

    monkeypatch.setattr(check, "plain_rate", fake_rate)
    case = check.Case("chargpt", "small_kernels")
    check.time_twin(case, {"args": []}, tmp_path, deadline=__import__("time").monotonic() + 60)
    assert order == ["original", "twin", "advisor", "advisor", "twin", "original"]
    assert case.twin_speedup == 2.0 and case.plain_speedup == 1.5
    assert (check.EXAMPLES / "attention_lm.py").read_text() == source


def test_without_a_kept_diff_only_the_twin_is_timed(check, tmp_path: Path, monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(check, "plain_rate", lambda path, args, timeout: order.append(path.parent.name) or 100.0)
    case = check.Case("chargpt", "small_kernels")
    check.time_twin(case, {"args": []}, tmp_path, deadline=__import__("time").monotonic() + 60)
    assert order == ["examples", "fixed", "fixed", "examples"] and case.plain_speedup is None


def test_no_time_is_kept_back_where_nothing_is_timed_plainly(check, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    ran: list[str] = []

    def fake_case(case, spec, work, share_s, timeout_s):
        ran.append(case.name)
        case.status, case.found = "ok", case.expected

    monkeypatch.setattr(check, "run_case", fake_case)
    monkeypatch.setattr(check, "time_twin", lambda *a: None)
    # 30 s: an example needs 25 to start; a quarter of the budget is kept for a twin's plain timing
    args = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--trials", "none", "--budget", "30"]
    assert check.main([*args, "tiny_model"]) == 0
    check.main([*args, "chargpt"])
    assert ran == ["tiny_model"]


def test_a_run_diff_with_only_notes_is_not_reproduced(check, tmp_path: Path):
    (tmp_path / "fix.diff").write_text("# advisor: run with CUDA_LAUNCH_BLOCKING unset\n")
    assert not check.has_source_diff(tmp_path)
    assert not check.has_source_diff(tmp_path / "missing")


def test_the_summary_is_written_after_every_example(check, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    seen: list[bool] = []

    def fake_case(case, spec, work, budget_s, timeout_s):
        seen.append((tmp_path / "out" / "gpu-check.json").is_file())
        case.status, case.found = "ok", case.expected

    monkeypatch.setattr(check, "run_case", fake_case)
    rc = check.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--budget", "4000",
                     "data_loading", "tiny_model"])
    assert rc == 0 and seen == [False, True]
    data = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert [c["status"] for c in data["cases"]] == ["ok", "ok"]


def test_examples_run_in_the_order_given_and_an_unknown_one_is_a_problem(check, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    ran: list[str] = []

    def fake_case(case, *args):
        ran.append(case.name)
        case.status, case.found = "ok", case.expected

    monkeypatch.setattr(check, "run_case", fake_case)
    args = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--budget", "4000", "--trials", "none"]
    assert check.main([*args, "tiny_model", "data_loading"]) == 0 and ran == ["tiny_model", "data_loading"]
    assert check.main([*args, "tiny_modle"]) == 1
    assert "tiny_modle is not an example" in (tmp_path / "out" / "gpu-check.json").read_text()


def test_every_example_is_diagnosed_first_and_the_fix_loops_share_what_is_left(check, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    runs: list[tuple[str, float | None]] = []

    def fake_case(case, spec, work, share_s, timeout_s):
        runs.append((case.name, share_s))
        case.status, case.found = "ok", case.expected

    monkeypatch.setattr(check, "run_case", fake_case)
    monkeypatch.setattr(check, "has_source_diff", lambda run_dir: False)
    rc = check.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--budget", "400",
                     "--trials", "pageable_copies", "pageable_copies", "data_loading", "tiny_model"])
    assert rc == 0
    assert [name for name, _ in runs] == ["data_loading", "tiny_model", "pageable_copies"]
    assert runs[0][1] is None and runs[1][1] is None  # --no-fixes
    # the budget less the plain timings' reserve (90 s) and the scanner comparison's (15 s)
    assert runs[2][1] == pytest.approx(400 - check.PLAIN_RESERVE_S - check.SCANNER_RESERVE_S, abs=3)


@pytest.mark.e2e
def test_run_as_make_runs_it_the_check_imports_advisor_from_the_source_tree(tmp_path: Path):
    import os
    import subprocess

    # NOTE: -S: no site-packages, where this venv's editable install of advisor would hide a
    # missing path; the GPU machine has no install of advisor (its first run failed so).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-S", "-P", str(PATH), "--dry-run", "--out", str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    environment = json.loads((tmp_path / "gpu-check.json").read_text())["environment"]
    assert not str(environment["import_advisor"]).startswith("failed"), environment["import_advisor"]


def test_the_trial_runs_starts_are_reported_and_warm_gpu_reaches_the_diagnoses(check, tmp_path: Path, monkeypatch):
    case = check.Case("pageable_copies", "host_to_device")
    check.read_report(case, {**_report(), "timing": {"starts": {"cold": 2, "warm": 6}}})
    assert case.starts == {"cold": 2, "warm": 6} and check._starts(case.starts) == "2 cold, 6 warm"
    monkeypatch.delenv("ADVISOR_WARM_GPU", raising=False)
    assert check.main(["--dry-run", "--warm-gpu", "--out", str(tmp_path)]) == 0
    import os

    assert os.environ.get("ADVISOR_WARM_GPU") == "1"  # what run_case's diagnoses inherit
    monkeypatch.delenv("ADVISOR_WARM_GPU")


def test_traces_come_back_smallest_first_under_the_limit(check, tmp_path: Path):
    import tarfile

    for name, size in (("a", 300), ("b", 100), ("c", 200)):
        folder = tmp_path / "runs" / name / "traces"
        folder.mkdir(parents=True)
        (folder / "host.pt.trace.json.gz").write_bytes(b"x" * size)
        (tmp_path / "runs" / name / "report.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    left = check.pack_runs(tmp_path, out, trace_limit=350)
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert [n for n in names if n.endswith(".gz")] == ["runs/b/traces/host.pt.trace.json.gz",
                                                       "runs/c/traces/host.pt.trace.json.gz"]
    assert "runs/a/report.json" in names and left == ["runs/a/traces/host.pt.trace.json.gz"]


def test_trials_none_diagnoses_every_example_without_a_fix_loop(check, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    shares: list[float | None] = []
    monkeypatch.setattr(check, "run_case", lambda case, spec, work, share_s, timeout_s: shares.append(share_s))
    check.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--trials", "none",
                "pageable_copies", "tiny_model"])
    assert shares == [None, None]


@pytest.mark.e2e
def test_a_diagnose_past_its_time_gets_a_ctrl_c_to_save_then_its_group_is_killed(check, tmp_path: Path):
    import subprocess

    script = tmp_path / "slow.py"
    script.write_text(
        "import sys, time\nprint('started', file=sys.stderr, flush=True)\n"
        "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('saved what it measured', file=sys.stderr)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        check.run_group([sys.executable, str(script)], 2.0, cwd=tmp_path, interrupt_grace=10.0)
    assert "saved what it measured" in timed_out.value.stderr
    # without a grace the group is killed at once: nothing saved
    with pytest.raises(subprocess.TimeoutExpired) as killed:
        check.run_group([sys.executable, str(script)], 2.0, cwd=tmp_path)
    assert "saved" not in (killed.value.stderr or "")


def test_the_trace_scanner_is_held_against_msgspec_on_the_checks_own_traces(check, tmp_path: Path, monkeypatch):
    from advisor.trace import native

    if native.Scanner is None:
        pytest.skip("advisor.trace._scan was not compiled here")
    recorded = Path(__file__).resolve().parent / "data" / "gpu_small" / "worker0.pt.trace.json.gz"
    for name in ("a", "b"):
        folder = tmp_path / "runs" / name / "traces"
        folder.mkdir(parents=True)
        (folder / "host.pt.trace.json.gz").write_bytes(recorded.read_bytes())
    monkeypatch.delenv("ADVISOR_NATIVE_SCAN", raising=False)
    got = check.scanner_check(tmp_path / "runs", 60.0)
    assert got["built"] and got["traces"] == got["same"] == 2 and not got["differ"]
    assert got["scanned"] and not got["refused"]
    assert "ADVISOR_NATIVE_SCAN" not in __import__("os").environ  # the diagnoses after it are not touched
    # a difference is named, with the trace it was found in
    monkeypatch.setattr(native._ScanFields, "floats", lambda self, attr, default: self._floats[0] + 1.0)
    got = check.scanner_check(tmp_path / "runs", 60.0)
    assert got["same"] == 0 and [d.split(":")[0] for d in got["differ"]] == ["a/traces/host.pt.trace.json.gz",
                                                                               "b/traces/host.pt.trace.json.gz"]
