"""Profiler stacks give base names, cProfile full paths: one line must appear once."""

import pytest

from advisor.metrics.model import SourceLocation
from advisor.metrics.sources import merge_locations, resolve_names, tidy_locations


def test_base_name_resolved_and_merged_with_pstats() -> None:
    locs = [
        SourceLocation("data_loading", "/w/ex/train.py", 39, "__getitem__", 32, 426.0, "pstats"),
        SourceLocation("data_loading", "train.py", 39, "__getitem__", 30, 400.0, "trace"),
        SourceLocation("sync", "train.py", 80, "main", 2, 1.0, "trace"),
    ]
    merged = {(m.kind, m.file, m.line): m for m in merge_locations(locs)}
    assert set(merged) == {("data_loading", "/w/ex/train.py", 39), ("sync", "/w/ex/train.py", 80)}
    one = merged[("data_loading", "/w/ex/train.py", 39)]
    # the trace's time, as its count: the breakdown's window, not cProfile's (slower per Python call)
    assert one.count == 30 and one.time_ms == 400.0 and one.source == "trace+pstats"


def test_pstats_times_go_on_the_profiled_windows_scale(tmp_path) -> None:
    """A __getitem__ read 32.6 ms per step from cProfile under a 19.1 ms data-loading part (one report)."""
    import cProfile

    from advisor.capture.model import RunCapture
    from advisor.metrics.sources import _window_factor, finish_locations

    capture = RunCapture(profiled_steps=10, cprofiled_steps=10, phases_s={"profiled": 6.3, "cprofile": 3.15})
    assert _window_factor(capture) == 2.0
    assert _window_factor(RunCapture(profiled_steps=10)) == 1.0 and _window_factor(None) == 1.0
    import importlib.util

    user = tmp_path / "ds.py"
    user.write_text("import time\ndef __getitem__(i):\n    time.sleep(0.002)\n")
    library = tmp_path / "torch" / "utils" / "data" / "fetch.py"  # the caller cProfile must see
    library.parent.mkdir(parents=True)
    library.write_text("def fetch(get):\n    return [get(i) for i in range(5)]\n")
    loaded = []
    for name, path in (("ds_user", user), ("fake_fetch", library)):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded.append(module)
    prof = cProfile.Profile()
    prof.enable()
    loaded[1].fetch(loaded[0].__getitem__)
    prof.disable()
    prof.dump_stats(tmp_path / "p.pstats")
    (plain,) = [x for x in finish_locations(None, 1, tmp_path / "p.pstats", None)[0] if x.function == "__getitem__"]
    (scaled,) = [x for x in finish_locations(None, 1, tmp_path / "p.pstats", capture)[0] if x.function == "__getitem__"]
    assert plain.function == "__getitem__" and plain.time_ms >= 10.0
    # per cProfile step (10 of them, where the capture-less call counted one), then doubled
    assert scaled.time_ms == pytest.approx(2.0 * plain.time_ms / 10) and scaled.source == "pstats"


def test_ambiguous_base_name_left_alone() -> None:
    locs = [
        SourceLocation("hot", "/a/train.py", 1, source="pstats"),
        SourceLocation("hot", "/b/train.py", 2, source="pstats"),
        SourceLocation("sync", "train.py", 3, source="trace"),
    ]
    files = {m.file for m in merge_locations(locs)}
    assert "train.py" in files


def test_script_path_resolves_trace_names() -> None:
    (loc,) = merge_locations([SourceLocation("item", "train.py", 5)], script="/x/y/train.py")
    assert loc.file == "/x/y/train.py"


def test_every_kind_of_location_gets_the_full_path_another_one_has() -> None:
    # The H200's chargpt: the peak-memory lines came from profiler stacks (``attention_lm.py``),
    # the syncs from advisor's hooks (``/repo/examples/attention_lm.py``); one message held both.
    full = "/repo/examples/attention_lm.py"
    locs = [SourceLocation("sync", full, 134, "main"), SourceLocation("memory", "attention_lm.py", 84, "forward"),
            SourceLocation("memory", "train.py", 5), SourceLocation("memory", "utils.py", 9),
            SourceLocation("hot", "/a/utils.py", 1), SourceLocation("hot", "/b/utils.py", 2)]
    out = resolve_names(locs, script="/repo/train.py")
    assert [loc.file for loc in out] == [full, full, "/repo/train.py", "utils.py", "/a/utils.py", "/b/utils.py"]
    assert [(loc.kind, loc.line, loc.function) for loc in out] == [(loc.kind, loc.line, loc.function) for loc in locs]


def test_a_line_less_frame_beside_a_located_one_of_its_function_is_dropped() -> None:
    # The H200's ME002: "examples/attention_lm.py:134 (main), examples/attention_lm.py (main)".
    full = "/repo/examples/attention_lm.py"
    locs = [SourceLocation("memory", full, 134, "main"), SourceLocation("memory", "attention_lm.py", 0, "main"),
            SourceLocation("memory", "attention_lm.py", 0, "forward"), SourceLocation("sync", full, 0, "main")]
    out = [(loc.kind, loc.file, loc.line, loc.function) for loc in tidy_locations(locs)]
    assert out == [("memory", full, 134, "main"), ("memory", full, 0, "forward"), ("sync", full, 0, "main")]
