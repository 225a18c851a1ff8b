"""One view model: text, Markdown and HTML print the same headline numbers for the same report.

The report here is shaped like the runs of issue #20: the capture's rate (5.20 samples/s) is far
from the kept trial's own baseline (17.9 samples/s), and the compute bottleneck takes 97.7% of the
step while the rules estimate that 29.3% could be recovered.
"""

from __future__ import annotations

import dataclasses
import html
import re

import pytest
from report_fixtures import make_report

from advisor.engine.model import Primary
from advisor.fixes.model import Trial
from advisor.report.render import render
from advisor.report.view import build_view

FORMATS = ("text", "markdown", "html")


def issue_report():
    """A compute-bound run whose capture rate differs from the kept trial's baseline."""
    report = make_report()
    steps = tuple(
        {"rank": 0, "step": 10 + i, "step_time_ms": 100.0, "cpu_ops_ms": 97.7, "data_loading_ms": 1.3, "other_ms": 1.0}
        for i in range(5)
    )
    combined = Trial(
        "dataloader_workers+cpu_threads", "safe", 17.9, 208.0, 11.63, 11.1, 12.2, "improved",
        loss_max_rel_diff=0.0, fixes=("dataloader_workers", "cpu_threads"),
    )
    run = dataclasses.replace(report.run, samples_per_s=5.2, timed_step_times_ms=(6150.0,) * 20, timed_samples=(32,) * 20)
    return dataclasses.replace(
        report,
        run=run,
        steps=steps,
        primary=Primary("compute", 0.293, 1.414),
        breakdown={"compute": 0.977, "data_loading": 0.013, "other": 0.01},
        combined=combined,
        kept_fixes=("dataloader_workers", "cpu_threads"),
    )


def plain(text: str, fmt: str) -> str:
    """The rendered document as a reader sees it: no tags, no Markdown markup, one space between words."""
    if fmt == "html":
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    if fmt == "markdown":
        text = text.replace("**", "").replace("\\", "").replace("`", "")
    return " ".join(text.replace("│", " ").split())


def test_the_view_keeps_measured_and_modelled_apart() -> None:
    h = build_view(issue_report()).headline
    assert h.bottleneck is not None
    assert h.bottleneck.step_frac == pytest.approx(0.977)  # measured: the breakdown's CPU ops
    assert h.bottleneck.recoverable_frac == pytest.approx(0.293)  # modelled: the rules' estimate
    assert h.rate == pytest.approx(5.2)  # the capture
    assert h.speedup is not None
    # before, after and ratio all from the one trial, never the capture's rate
    assert (h.speedup.before, h.speedup.after, h.speedup.speedup) == (17.9, 208.0, 11.63)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_prints_the_same_headline(fmt: str) -> None:
    out = plain(render(issue_report(), fmt), fmt)
    expected = [
        "Primary bottleneck",
        "97.7% of step time (measured)",
        "up to 29.3%",
        "1.41× (estimate, Amdahl bound)",
        "5.20",  # the capture's rate
        "capture: 20 timed steps, no profiler",
        "11.63×",
        "[11.10–12.20]",
        "17.9 → 208 samples/s in the trial's interleaved repeats",
        "6,150 ms median of 20 timed steps (no profiler; p10–p90",
    ]
    missing = [e for e in expected if e not in out]
    assert missing == [], f"{fmt} lacks {missing}"
    # Never the capture's rate next to the trial's figures, never the estimate as the step's share.
    assert "5.20 →" not in out
    assert "29.3% of step time" not in out.replace("up to 29.3% of step time", "")


def test_the_formats_agree_number_for_number() -> None:
    """The headline block's numbers, in order, are the same list in every format."""
    report = issue_report()
    numbers = {}
    for fmt in FORMATS:
        out = plain(render(report, fmt), fmt)
        start = out.index("Primary bottleneck")
        end = out.index("Findings", start)
        block = out[start:end]
        numbers[fmt] = sorted(re.findall(r"\d[\d,]*(?:\.\d+)?", block))
    assert numbers["text"] == numbers["markdown"] == numbers["html"], numbers


def test_runs_listing_shows_the_measured_share_and_the_estimate_apart(tmp_path) -> None:
    from advisor.report.runs import list_runs
    from advisor.report.runs_render import render_runs_text

    issue_report().save(tmp_path / "run")
    (row,) = list_runs(tmp_path)
    assert row.primary_category == "compute"
    assert row.primary_share == pytest.approx(0.977) and row.primary_recoverable == pytest.approx(0.293)
    assert "compute 98% (est. 29% recoverable)" in " ".join(render_runs_text([row], tmp_path).split())


def overhead_report():
    """An overhead-bound CPU run: small_kernels has no breakdown part; its time is CPU ops + other."""
    report = issue_report()
    steps = tuple(
        {"rank": 0, "step": 10 + i, "step_time_ms": 100.0, "cpu_ops_ms": 28.0, "other_ms": 71.5, "data_loading_ms": 0.5}
        for i in range(5)
    )
    return dataclasses.replace(
        report, steps=steps, primary=Primary("small_kernels", 0.4, 1.67),
        breakdown={"compute": 0.28, "other": 0.715, "data_loading": 0.005},
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_category_without_a_breakdown_part_names_the_measured_parts_it_lies_in(fmt: str) -> None:
    b = build_view(overhead_report()).headline.bottleneck
    assert b is not None and b.step_frac is None
    assert [label for label, _ in b.host_parts] == ["Other", "CPU ops"]  # largest first; 0.5% loading is not host time
    out = plain(render(overhead_report(), fmt), fmt)
    assert "its time lies in Other 71.5% + CPU ops 28.0% of step time (measured)" in out
    assert "not measured for this category" not in out


def test_per_op_overhead_in_the_optimizer_step_is_named_with_its_part() -> None:
    # SK009: torch.optim's for-loop update is per-op overhead whose time the breakdown files
    # under the optimizer, not CPU ops
    steps = tuple(
        {"rank": 0, "step": 10 + i, "step_time_ms": 100.0, "optimizer_ms": 44.0, "cpu_ops_ms": 27.0, "other_ms": 29.0}
        for i in range(5)
    )
    report = dataclasses.replace(overhead_report(), steps=steps)
    b = build_view(report).headline.bottleneck
    assert b is not None and [label for label, _ in b.host_parts] == ["Optimizer", "Other", "CPU ops"]


def test_the_kept_fixes_read_as_a_case_study_of_measured_trials_in_every_format():
    """Each kept fix with what its own trial measured (alone, or on top of the fix it needs), then together."""
    workers = Trial("dataloader_workers", "safe", 100.0, 180.0, 1.8, 1.6, 2.0, "improved", loss_max_rel_diff=0.0,
                    params={"num_workers": 2}, peak_memory_bytes=120, baseline_peak_memory_bytes=100)
    persistent = Trial("persistent_workers", "safe", 180.0, 189.0, 1.05, 1.02, 1.08, "improved",
                       reference="dataloader_workers@2")
    saver = Trial("activation_checkpointing", "safe", 100.0, 85.0, 0.85, 0.8, 0.9, "improved",
                  peak_memory_bytes=60, baseline_peak_memory_bytes=100)
    combined = Trial("dataloader_workers+persistent_workers", "safe", 100.0, 192.0, 1.92, 1.8, 2.01, "improved",
                     fixes=("dataloader_workers", "persistent_workers"))
    report = dataclasses.replace(
        make_report(), trials=(workers, persistent, saver), combined=combined,
        kept_fixes=("dataloader_workers", "persistent_workers", "activation_checkpointing"),
    )
    text = build_view(report).case_study
    assert text == (
        "baseline 100 samples/s → +dataloader_workers 1.80× (alone, memory +20%, loss Δ 0.00%) → "
        "+persistent_workers 1.05× more (on top of dataloader_workers@2) → together 1.92× [1.80–2.01] "
        "(measured together against the baseline); kept apart (not in the combined run): "
        "+activation_checkpointing 0.85× (alone, memory −40%)"
    )
    for fmt in FORMATS:
        out = render(report, fmt)
        assert "1.05× more (on top of dataloader_workers@2)" in html.unescape(out).replace("\\_", "_"), fmt
    single = dataclasses.replace(report, trials=(workers,), combined=workers, kept_fixes=("dataloader_workers",))
    assert build_view(single).case_study == ""


def test_the_text_trials_table_fits_its_width_with_memory_and_long_verdicts() -> None:
    """Seven unwrappable columns were 101 wide: rich cropped Peak mem to '275.3 Mi' in every demo report."""
    report = issue_report()
    mem = {"peak_memory_bytes": 288_700_000, "baseline_peak_memory_bytes": 291_000_000, "memory_kind": "rss"}
    trials = (
        Trial("dataloader_workers", "safe", 312.0, 377.0, 1.18, 1.03, 1.30, "improved", loss_max_rel_diff=0.0, **mem),
        Trial("persistent_workers", "safe", 338.0, 374.0, 1.08, 0.96, 1.18, "no_effect", loss_max_rel_diff=0.0, **mem),
        Trial("prefetch_factor", "safe", 338.0, 338.0, 0.86, 0.50, 1.95, "undecided", loss_max_rel_diff=0.0, **mem),
    )
    out = render(dataclasses.replace(report, trials=trials), "text")
    table = out[out.index("Fix trials"):]
    assert "Peak mem" in table and table.count("275.3 MiB") == 3  # no cell cropped
    assert all(len(line) <= 100 for line in out.splitlines())


@pytest.mark.parametrize(("fmt", "marker"), [("text", "Fix trials (steps/s;"), ("markdown", "Before (steps/s)"),
                                             ("html", "steps/s (median; whisker")])
def test_trials_without_counted_samples_are_in_steps_per_second(fmt: str, marker: str) -> None:
    report = issue_report()
    report = dataclasses.replace(report, run=dataclasses.replace(report.run, timed_samples=(), samples_per_s=None))
    assert build_view(report).headline.rate_unit == "steps/s"
    out = render(report, fmt)
    assert marker in out and "samples/s" not in out.replace("samples/s in the trial", "")


def lever_report(co004_impact: float = 0.0):
    """An inference loop: the primary (the largest estimated lever) is an 8.6% data-loading share,
    while CPU ops take 77.5% of the step and CO004's recoverable share is not estimated."""
    from advisor.engine.model import Finding, FixRef

    report = make_report()
    steps = tuple(
        {"rank": 0, "step": 10 + i, "step_time_ms": 10.0, "data_loading_ms": 0.86, "cpu_ops_ms": 7.75, "other_ms": 1.39}
        for i in range(5)
    )
    co004 = Finding(
        code="CO004", name="inference-records-autograd", category="compute", severity="info",
        message="32 operators per step record autograd graph nodes, but no step runs a backward pass.",
        evidence={}, locations=(), fixes=(FixRef("inference_mode", "safe"),), impact_frac=co004_impact,
    )
    dl001 = dataclasses.replace(report.findings[0], impact_frac=0.086)
    return dataclasses.replace(
        report, steps=steps, findings=(dl001, co004), primary=Primary("data_loading", 0.086, 1.094),
        breakdown={"data_loading": 0.086, "compute": 0.775, "other": 0.139},
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_most_of_the_step_is_named_beside_a_smaller_primary(fmt: str) -> None:
    m = build_view(lever_report()).headline.most_of_step
    assert m is not None
    assert (m.category, m.codes, m.estimated) == ("compute", ("CO004",), False)
    assert m.step_frac == pytest.approx(0.775)
    out = plain(render(lever_report(), fmt), fmt)
    assert "8.6% of step time (measured)" in out  # the primary stays the lever
    assert re.search(r"Most of the step\W+Compute\W", out), out
    assert "77.5% of step time (measured); finding CO004: recoverable share not estimated" in out


def test_most_of_the_step_says_when_its_findings_estimate_less() -> None:
    m = build_view(lever_report(co004_impact=0.05)).headline.most_of_step
    assert m is not None and m.estimated
    assert m.text.endswith("finding CO004, with less to recover than the primary")


def test_most_of_the_step_says_when_no_rule_explains_it() -> None:
    report = lever_report()
    report = dataclasses.replace(report, findings=report.findings[:1])
    m = build_view(report).headline.most_of_step
    assert m is not None and m.codes == ()
    assert m.text.endswith("no rule found a cause to fix in it")


def test_most_of_the_step_in_no_category_reads_as_its_part() -> None:
    report = lever_report()
    steps = tuple({**r, "cpu_ops_ms": 1.39, "other_ms": 7.75} for r in report.steps)
    m = build_view(dataclasses.replace(report, steps=steps)).headline.most_of_step
    assert m is not None and (m.category, m.label, m.codes) == ("other", "Other", ())


def test_no_second_line_when_the_primary_holds_most_of_the_step_or_lies_in_it() -> None:
    assert build_view(issue_report()).headline.most_of_step is None  # the primary is compute itself
    assert build_view(overhead_report()).headline.most_of_step is None  # per-op overhead lies in the CPU ops
    assert build_view(make_report()).headline.most_of_step is None  # data loading 42%: nothing holds half the step
    for fmt in FORMATS:
        assert "Most of the step" not in plain(render(issue_report(), fmt), fmt)


def test_tables_from_the_stragglers_trace_say_so_in_their_titles() -> None:
    op = {"operator": "aten::addmm", "calls": 1.0, "self_ms": 1.0, "total_ms": 1.0, "self_frac": 1.0}
    coll = {"collective": "all_reduce", "calls": 3.0, "bytes": 1024.0, "skew_ms": 0.2, "transfer_ms": 0.1,
            "busbw_gbps": 10.0, "late_rank": 37}
    report = dataclasses.replace(make_report(), tables={"operators": (op,), "collectives": (coll,)}, focus_rank=37)
    text = plain(render(report, "text"), "text")
    assert "Where in the code (rank 37, the straggler)" in text
    assert "Time per operator (host, per step) (rank 37, the straggler)" in text
    assert "Collectives across ranks (rank" not in text  # matched across every rank
    html_out = plain(render(report, "html"), "html")
    assert "Where in the code (rank 37, the straggler)" in html_out
    plain_report = dataclasses.replace(report, focus_rank=None)
    assert "the straggler" not in plain(render(plain_report, "text"), "text")
