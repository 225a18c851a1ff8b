"""Trials as fields (schema 3): older reports upgrade on load, and peak memory is rendered."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from report_fixtures import make_report

from advisor.fixes.model import Trial
from advisor.report.model import REPORT_SCHEMA_VERSION, Report
from advisor.report.render import render


def test_a_schema_2_report_gets_fixes_and_reference_from_its_strings(tmp_path: Path) -> None:
    data = make_report().to_dict()
    data["schema_version"] = 2
    for t in [*data["trials"], data["combined"]]:
        del t["fixes"], t["reference"]
    data["combined"]["fix"] = "dataloader_workers+persistent_workers"
    (tmp_path / "report.json").write_text(json.dumps(data), encoding="utf-8")
    report = Report.load(tmp_path)
    assert report.schema_version == REPORT_SCHEMA_VERSION == 3
    by = {t.fix: t for t in report.trials}
    assert by["persistent_workers"].reference == "dataloader_workers@2"
    assert by["dataloader_workers"].reference is None
    assert by["dataloader_workers"].fixes == ("dataloader_workers",)
    assert report.combined is not None
    assert report.combined.fixes == ("dataloader_workers", "persistent_workers")


def test_peak_memory_shows_in_every_trials_table_only_when_measured() -> None:
    plain = make_report()
    for fmt in ("text", "markdown", "html"):
        assert "(−25%)" not in render(plain, fmt)
    assert "Peak mem" not in render(plain, "text") and "Peak memory" not in render(plain, "markdown")
    t = Trial(fix="pin_memory", safety="safe", speedup=1.2, verdict="improved",
              peak_memory_bytes=3 * 2**20, baseline_peak_memory_bytes=4 * 2**20, memory_kind="rss")
    report = dataclasses.replace(plain, trials=(*plain.trials, t))
    for fmt in ("text", "markdown", "html"):
        out = render(report, fmt)
        assert "Peak mem" in out, fmt
        assert "3.0 MiB" in out and "(−25%)" in out, fmt
    assert '<th class="n">Peak memory</th>' in render(report, "html")
