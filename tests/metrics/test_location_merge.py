"""Profiler stacks give base names, cProfile full paths: one line must appear once."""

from advisor.metrics.model import SourceLocation
from advisor.metrics.sources import merge_locations


def test_base_name_resolved_and_merged_with_pstats() -> None:
    locs = [
        SourceLocation("data_loading", "/w/ex/train.py", 39, "__getitem__", 32, 426.0, "pstats"),
        SourceLocation("data_loading", "train.py", 39, "__getitem__", 30, 400.0, "trace"),
        SourceLocation("sync", "train.py", 80, "main", 2, 1.0, "trace"),
    ]
    merged = {(m.kind, m.file, m.line): m for m in merge_locations(locs)}
    assert set(merged) == {("data_loading", "/w/ex/train.py", 39), ("sync", "/w/ex/train.py", 80)}
    one = merged[("data_loading", "/w/ex/train.py", 39)]
    assert one.count == 30 and one.time_ms == 426.0 and one.source == "trace+pstats"


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
