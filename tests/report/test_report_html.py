"""The HTML page: self-contained, escaped, and rendered with its plots by a real headless Chromium."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixtures import HOSTILE, make_after_report, make_gpu_trace_report, make_report

from advisor.report.compare import compare_reports
from advisor.report.compare_render import render_comparison
from advisor.report.html import json_island
from advisor.report.render import render


class _Elements(HTMLParser):
    """Collect start tags and attributes, and the text of script elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _parse(html: str) -> _Elements:
    p = _Elements()
    p.feed(html)
    p.close()
    return p


def test_html_is_self_contained() -> None:
    html = render(make_report(), "html")
    p = _parse(html)
    for tag, attrs in p.tags:
        for key in ("src", "href"):
            value = attrs.get(key)
            assert value is None or not re.match(r"^(https?:)?//", value), (tag, attrs)
        assert tag not in ("link", "iframe", "img", "object", "embed")
    assert "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html  # CSP: nothing can be fetched even by mistake
    assert html.count("<svg") >= 4  # share bar, per-step bars, trials, timeline


def test_hostile_names_are_escaped_everywhere() -> None:
    html = render(make_report(hostile=True), "html")
    p = _parse(html)
    assert not [t for t, _ in p.tags if t == "img"]
    assert all(not any(k.startswith("on") for k in attrs) for _, attrs in p.tags)
    assert len([t for t, _ in p.tags if t == "script"]) == 2  # the data island and ours, no third
    island = json.loads(p.scripts[0])
    assert island["findings"][1]["message"].endswith(HOSTILE)
    assert "</script><img" not in html
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html


def test_json_island_neutralises_closing_tags() -> None:
    text = json_island({"a": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def _check_in_browser(chromium, html_path: Path, png: Path) -> str:
    url = html_path.as_uri()
    dom = chromium("--virtual-time-budget=3000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = chromium("--window-size=1000,2400", f"--screenshot={png}", url)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.is_file() and png.stat().st_size > 20_000  # a blank page is a few KB
    return dom.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
def test_report_renders_in_headless_chromium(chromium, tmp_path: Path, hostile: bool) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(make_report(hostile=hostile), "html"), encoding="utf-8")
    dom = _check_in_browser(chromium, page, tmp_path / "report.png")
    root = re.search(r"<html[^>]*>", dom)
    assert root is not None
    assert 'data-ready="1"' in root.group(0), root.group(0)  # our script ran to its end
    assert "data-js-error" not in root.group(0)
    p = _parse(dom)
    tags = [t for t, _ in p.tags]
    assert tags.count("svg") >= 4
    assert tags.count("rect") > 30  # bars and timeline blocks were laid out
    assert "img" not in tags  # the hostile name stayed text after the script ran
    download = next(a for t, a in p.tags if t == "a" and a.get("id") == "download-json")
    assert (download.get("href") or "").startswith("blob:")  # the embedded JSON parsed


@pytest.mark.e2e
def test_comparison_renders_in_headless_chromium(chromium, tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    cmp = compare_reports(make_gpu_trace_report(), make_after_report())
    page.write_text(render_comparison(cmp, "html"), encoding="utf-8")
    dom = _check_in_browser(chromium, page, tmp_path / "compare.png")
    assert 'data-ready="1"' in re.search(r"<html[^>]*>", dom).group(0)
    assert "Not comparable" in dom and "devices differ" in dom
    assert dom.count("<svg") >= 1


def _row_labels(svg_text: str) -> list[str]:
    """Row labels of the trials chart, top to bottom (right-aligned text left of the bars)."""
    return [html_unescape(m) for m in re.findall(r'<text x="200" y="[\d.]+" font-size="12" text-anchor="end"[^>]*>([^<]*)</text>', svg_text)]


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def _vline_x(svg_text: str, cls: str) -> list[float]:
    return [float(x) for x in re.findall(rf'<line x1="([\d.]+)" x2="[\d.]+" y1="[\d.]+" y2="[\d.]+" class="{cls}"/>', svg_text)]


def test_trials_chart_draws_the_reference_of_on_top_trials() -> None:
    from advisor.fixes.model import Trial
    from advisor.report.svg import trials_plot

    ref = "dataloader_workers@4" + HOSTILE
    trials = [
        Trial("dataloader_workers", "safe", 100.0, 300.0, 3.0, 2.9, 3.1, "improved", reason="num_workers 0 -> 4"),
        Trial("pin_memory", "safe", 102.0, 104.0, 1.02, 0.99, 1.05, "no_effect"),
        Trial("persistent_workers", "safe", 310.0, 341.0, 1.10, 1.06, 1.14, "improved", reason=f"on top of {ref}; kept workers alive",
              reference=ref),
        Trial("bf16_autocast", "unsafe", verdict="skipped", reason="unsafe: pass --unsafe-fixes"),
    ]
    combined = Trial("dataloader_workers+persistent_workers", "safe", 98.0, 330.0, 3.37, 3.2, 3.5, "improved",
                     fixes=("dataloader_workers", "persistent_workers"))
    plot = trials_plot(trials, combined)
    labels = _row_labels(plot)
    # Plain trials against the baseline, then the reference row with the trials measured on top of it.
    # Their baselines differ (100, 102, 98): no pooled "baseline" row, each trial has its own mark.
    assert labels[:3] == ["dataloader_workers", "pin_memory", "bf16_autocast"]
    assert labels[3].startswith("dataloader_workers@4")  # the reference row (name truncated to fit)
    assert labels[4] == "+ persistent_workers"
    assert labels[5].startswith("combined: ") and len(labels) == 6
    assert "<title>baseline: " not in plot
    assert "baseline in the same repeats: 100 samples/s" in plot and "baseline in the same repeats: 98.0 samples/s" in plot
    assert "310 samples/s, measured in the same interleaved repeats" in html_unescape(plot)
    # Each measured trial has its own baseline mark (no pooled line): 100, 102, 310 (on top), 98 (combined).
    base_xs = _vline_x(plot, "baseline")
    assert len(base_xs) == 4
    (ref_x,) = _vline_x(plot, "refline")
    assert (ref_x - 210) / (base_xs[0] - 210) == pytest.approx(310 / 100, rel=0.01)
    assert base_xs[2] == pytest.approx(ref_x)  # the on-top trial's own baseline is its reference
    assert [(x - 210) / (base_xs[0] - 210) for x in base_xs] == pytest.approx([1.0, 1.02, 3.1, 0.98], rel=0.01)
    # The on-top trial's whisker is drawn around its own reference (310 x [1.06, 1.14]), in samples/s.
    assert "vs dataloader_workers@4" in html_unescape(plot)
    assert "reference for the fix below" in plot
    # Escaped: the hostile reference name is text, never markup.
    assert "<img" not in plot and "&lt;/script&gt;&lt;img" in plot


def test_trials_chart_without_on_top_trials_has_no_reference_row() -> None:
    from advisor.fixes.model import Trial
    from advisor.report.svg import trials_plot

    plot = trials_plot([Trial("pin_memory", "safe", 102.0, 104.0, 1.02, 0.99, 1.05, "no_effect")], None)
    assert _row_labels(plot) == ["baseline", "pin_memory"]
    assert _vline_x(plot, "refline") == []
    assert "reference for" not in plot


def test_report_page_explains_on_top_trials() -> None:
    page = render(make_report(), "html")
    assert "+ persistent_workers" in page
    assert "compared with that fix's run (<code>dataloader_workers@2</code>)" in page
    assert '<ul class="warnings"><li>unknown rule code &#x27;DL01&#x27; in ignore' in page


def test_trials_chart_draws_each_trial_against_its_own_baseline() -> None:
    from advisor.fixes.model import Trial
    from advisor.report.svg import trials_plot

    # Baselines measured at different times differ: a 1.04x fix whose own baseline was 90 sits
    # left of the other trials' 100; its mark must be at 90, not at a pooled 100.
    trials = [
        Trial("pin_memory", "safe", 90.0, 93.6, 1.04, 1.01, 1.07, "improved"),
        Trial("cpu_threads", "safe", 100.0, 101.0, 1.01, 0.98, 1.03, "no_effect"),
        Trial("channels_last", "unsafe", 110.0, 111.0, 1.01, 0.99, 1.02, "no_effect"),
    ]
    plot = trials_plot(trials, None)
    marks = _vline_x(plot, "baseline")
    assert len(marks) == 3  # one per trial, none spanning the chart
    assert (marks[0] - 210) / (marks[1] - 210) == pytest.approx(0.9, rel=0.01)
    assert (marks[2] - 210) / (marks[1] - 210) == pytest.approx(1.1, rel=0.01)
    bar_ends = [210 + float(w) for w in re.findall(r'<rect x="210" y="[\d.]+" width="([\d.]+)" height="18" rx="2" fill="#', plot)]
    # No pooled baseline row: the first bar is pin_memory's (93.6), which ends right of its own
    # mark (90) even though it is left of the next trial's baseline (100).
    assert _row_labels(plot) == ["pin_memory", "cpu_threads", "channels_last"]
    assert bar_ends[0] > marks[0] and bar_ends[0] < marks[1]
    assert "pin_memory in the same repeats" not in plot and "baseline in the same repeats: 90.0 samples/s" in plot
