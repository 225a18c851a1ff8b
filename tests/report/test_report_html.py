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


def test_comparison_renders_in_headless_chromium(chromium, tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    cmp = compare_reports(make_gpu_trace_report(), make_after_report())
    page.write_text(render_comparison(cmp, "html"), encoding="utf-8")
    dom = _check_in_browser(chromium, page, tmp_path / "compare.png")
    assert 'data-ready="1"' in re.search(r"<html[^>]*>", dom).group(0)
    assert "Not comparable" in dom and "devices differ" in dom
    assert dom.count("<svg") >= 1
