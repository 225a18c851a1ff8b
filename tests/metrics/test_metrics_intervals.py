"""Interval helpers on hand-made windows (the breakdown's building blocks)."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.metrics.intervals import (
    Windows,
    clip_to_steps,
    max_gap_per_step,
    merge,
    point_step,
    union_per_step,
)

W = Windows(np.array([1, 2, 3]), np.array([0.0, 10.0, 30.0]), np.array([10.0, 20.0, 40.0]))


def test_point_step_uses_half_open_windows():
    ts = np.array([-1.0, 0.0, 9.99, 10.0, 25.0, 35.0, 40.0])
    assert point_step(ts, W).tolist() == [-1, 0, 0, 1, -1, 2, -1]


def test_clip_splits_intervals_across_windows_and_drops_gaps():
    p = clip_to_steps(np.array([5.0, 18.0, 21.0]), np.array([12.0, 35.0, 29.0]), W)
    got = sorted(zip(p.window.tolist(), p.start.tolist(), p.end.tolist(), p.src.tolist(), strict=True))
    assert got == [(0, 5.0, 10.0, 0), (1, 10.0, 12.0, 0), (1, 18.0, 20.0, 1), (2, 30.0, 35.0, 1)]


def test_union_handles_nesting_overlap_and_touching():
    p = clip_to_steps(np.array([1.0, 2.0, 3.0, 6.0, 8.0]), np.array([5.0, 3.0, 7.0, 7.0, 9.0]), W)
    assert union_per_step(p, len(W)).tolist() == [7.0, 0.0, 0.0]
    assert len(merge(p).start) == 2


def test_max_gap_counts_edges_and_empty_windows():
    p = clip_to_steps(np.array([2.0, 5.0, 12.0]), np.array([3.0, 6.0, 19.0]), W)
    assert max_gap_per_step(p, W).tolist() == pytest.approx([4.0, 2.0, 10.0])
