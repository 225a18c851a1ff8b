"""The prepared GPU check (benchmarks/gpu_check.py): its dry run and its judgement of a report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_check", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)


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
