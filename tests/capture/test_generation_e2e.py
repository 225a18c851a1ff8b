"""Issue 29 item 3 with real torch hooks: sampling every N steps without a KV cache is named, with its line.

One tiny character transformer (tests/scripts/char_generate.py) trained and, every 10 of 2,000
projected steps, sampling 200 tokens without a cache (HB003), the same sampling with a KV cache,
a fixed-length evaluation, or a loss over single windows (HB004). The capture stops after its
phases, so each run costs about the import of torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.capture.generation import CallPattern
from advisor.engine.evaluate import diagnose
from advisor.metrics.compute import analyze_path

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parents[1] / "scripts" / "char_generate.py"
ARGS = ("2000", "10", "200")  # max_iters, sample_interval, max_new_tokens


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.endswith(f"# {marker}"))


def _diagnose(run_script, mode):
    cap, _ = run_script("char_generate.py", mode, *ARGS)
    assert cap.step_source == "optimizer", cap.step_source_reason
    metrics = analyze_path(cap.run_dir)
    return cap, metrics, {f.code: f for f in diagnose(metrics).findings}


def test_sampling_without_a_kv_cache_is_named_with_its_line_tokens_and_share(run_script):
    cap, metrics, findings = _diagnose(run_script, "nocache")
    sites = [w.site for w in cap.between_steps]
    assert sites and all(s.pattern == CallPattern.GENERATION_NO_CACHE for s in sites)
    assert {(s.function, s.line, s.calls, s.tokens) for s in sites} == {("generate", _line("nocache-call"), 200, 200)}
    s = metrics.summary
    assert (s["generation_tokens_count"], s["generation_period_steps"], s["generation_occurrences_count"]) == (200, 10, 200)
    # the prefix grows from 1 to block_size (16) and is cropped there: (1 + ... + 16 + 184 x 16) / 200
    assert s["generation_positions_count"] == pytest.approx((136 + 184 * 16) / 200, abs=0.01)
    # 200 calls every 10 steps against 10 training steps: far above HB003's 10% on any load
    assert s["generation_frac"] >= 0.1, s
    message = findings["HB003"].message
    assert f"char_generate.py:{_line('nocache-call')} (generate)" in message and "200 tokens" in message
    assert "KV cache" in message and "HB004" not in findings


@pytest.mark.slow  # NOTE: classify()'s unit tests (test_generation.py) hold these patterns in make test
@pytest.mark.parametrize("mode", ["cache", "eval"])
def test_cached_sampling_and_fixed_length_evaluation_are_not_called_generation_without_a_cache(run_script, mode):
    cap, metrics, findings = _diagnose(run_script, mode)
    expected = CallPattern.GENERATION_CACHED if mode == "cache" else CallPattern.OTHER
    assert cap.between_steps and {w.site.pattern for w in cap.between_steps} == {expected}
    if mode == "cache":
        assert {w.site.line for w in cap.between_steps} == {_line("cache-call")}
    assert metrics.summary["generation_frac"] is None and metrics.summary["one_sample_frac"] is None
    assert "HB003" not in findings and "HB004" not in findings
    assert not [loc for loc in metrics.locations if loc.kind in ("generation", "one_sample")]


@pytest.mark.slow  # NOTE: as above; the capture path itself is the first test's
def test_inference_one_window_at_a_time_is_named(run_script):
    cap, metrics, findings = _diagnose(run_script, "one_sample")
    assert {(w.site.pattern, w.site.function, w.site.line, w.site.calls) for w in cap.between_steps} == {
        (CallPattern.ONE_SAMPLE, "per_window_loss", _line("one_sample-call"), 200)}
    assert metrics.summary["one_sample_frac"] >= 0.1, metrics.summary
    assert f"char_generate.py:{_line('one_sample-call')} (per_window_loss)" in findings["HB004"].message
    assert "HB003" not in findings
