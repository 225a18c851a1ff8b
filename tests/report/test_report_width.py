"""The HTML page reads at any width: headless Chromium lays it out at 900 and 1920 px, and a small
script measures every table against its box (issue #20: a no-wrap ``combined: a+b`` cell once
squeezed the note column to one character and pushed the loss and note columns off the page).

The page is the demo's shape: a combined trial of two fixes, long notes, the peak-memory column,
plus the GPU tables of an analysed trace. The probe is injected into a copy of the page (the
page's CSP allows inline scripts) and writes what it measured onto ``<body data-overflow>``,
which ``--dump-dom`` returns.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from report_fixtures import demo_like_report, make_report

from advisor.report.render import render

# NOTE: kept in ES5 and free of "</" so it can sit in an inline <script> as it is.
PROBE = r"""
window.addEventListener('load', function () {
  var problems = [];
  var main = document.querySelector('main').getBoundingClientRect();
  if (document.documentElement.scrollWidth > window.innerWidth + 1) {
    problems.push('page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
  }
  var tables = document.querySelectorAll('table');
  for (var i = 0; i < tables.length; i++) {
    var t = tables[i], box = t.parentElement, tr = t.getBoundingClientRect(), br = box.getBoundingClientRect();
    var name = 'table ' + i + ' (' + (t.rows[0] ? t.rows[0].textContent.slice(0, 40) : '') + ')';
    if (tr.right > br.right + 1 || tr.right > main.right + 1) {
      problems.push(name + ' is wider than its box: ' + Math.round(tr.width) + ' > ' + Math.round(br.width));
    }
    if (box.scrollWidth > box.clientWidth + 1) {
      problems.push(name + ' overflows its box (scrolls): ' + box.scrollWidth + ' > ' + box.clientWidth);
    }
    var cells = t.querySelectorAll('td, th');
    for (var j = 0; j < cells.length; j++) {
      var c = cells[j], cs = getComputedStyle(c);
      var inner = c.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      var text = c.textContent.trim();
      if (c.scrollWidth > c.clientWidth + 1) {
        problems.push(name + ' clips a cell: ' + text.slice(0, 40));
      }
      if (text.length > 6 && inner < 48) {
        problems.push(name + ' collapses a column to ' + Math.round(inner) + ' px: ' + text.slice(0, 40));
      }
    }
    for (var k = 0; k < t.rows.length; k++) {
      var h = t.rows[k].getBoundingClientRect().height;
      if (h > 220) {
        problems.push(name + ' row ' + k + ' is ' + Math.round(h) + ' px tall');
      }
    }
  }
  document.body.setAttribute('data-overflow', JSON.stringify(problems));
});
"""
WIDTHS = (900, 1400, 1920)


def overflow_problems(chromium, html: str, tmp_path: Path, width: int) -> list[str]:
    """Lay ``html`` out at ``width`` px in headless Chromium; return what the probe found wrong."""
    page = tmp_path / f"page-{width}.html"
    page.write_text(html.replace("</body>", f"<script>{PROBE}</script>\n</body>", 1), encoding="utf-8")
    dom = chromium(f"--window-size={width},2000", "--virtual-time-budget=3000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<body[^>]*\sdata-overflow="([^"]*)"', dom.stdout)
    assert found is not None, "the probe did not run: " + dom.stdout[:500]
    return json.loads(unescape(found.group(1)))


def test_the_width_fixture_has_what_broke_the_page() -> None:
    html = render(demo_like_report(), "html")
    assert "dataloader_workers + cpu_threads" in html  # the long combined name
    assert "Peak memory" in html and "<table" in html


@pytest.mark.e2e
@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_overflows_its_box(chromium, tmp_path: Path, width: int) -> None:
    problems = overflow_problems(chromium, render(demo_like_report(), "html"), tmp_path, width)
    assert problems == [], f"at {width} px: " + "; ".join(problems)


@pytest.mark.e2e
def test_the_probe_catches_an_overflowing_table(chromium, tmp_path: Path) -> None:
    # A no-wrap cell as the old page had: the probe must see the table leave its box.
    html = render(demo_like_report(), "html").replace(
        '<td class="fixname">', '<td class="fixname" style="white-space:nowrap;min-width:1400px">', 1
    )
    problems = overflow_problems(chromium, html, tmp_path, 900)
    assert any("wider than its box" in p or "overflows its box" in p for p in problems), problems


@pytest.mark.e2e
def test_comparison_page_fits_at_900_px(chromium, tmp_path: Path) -> None:
    from report_fixtures import make_after_report

    from advisor.report.compare import compare_reports
    from advisor.report.compare_render import render_comparison

    html = render_comparison(compare_reports(make_report(hostile=True), make_after_report()), "html")
    assert overflow_problems(chromium, html, tmp_path, 900) == []
