"""Per-distinct-value helpers of advisor.metrics.events: the same answers as the per-row loops they replace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.metrics.events import (
    broadcast,
    distinct,
    joint_codes,
    map_categorical,
    map_rows,
    name_mask,
    plain_strings,
    take,
)
from advisor.metrics.intervals import Windows, clip_to_steps


def _column(values: list[str | None]) -> pd.Series:
    return pd.Series(pd.Categorical(values))


def test_map_rows_matches_a_per_row_call_and_calls_once_per_value() -> None:
    col = _column(["a", None, "bb", "a", "ccc", None, "bb"])
    rows = np.array([6, 0, 1, 3, 5, 2])
    seen: list[str | None] = []

    def fn(v: str | None) -> object:
        seen.append(v)
        return (len(v), v) if v is not None else None

    got = map_rows(col, rows, fn)
    assert sorted(map(str, seen)) == ["None", "a", "bb"]  # once per distinct value, missing included
    assert got == [fn(v) for v in take(col, rows)]


def test_map_categorical_holds_the_per_row_values_with_distinct_categories() -> None:
    col = _column(["a", None, "bb", "A", "ccc", None, "bb", "dd"])
    rows = np.array([6, 0, 1, 3, 5, 2, 7, 4])

    def fn(v: str | None) -> str | None:  # two names map to one value, one value to missing
        return None if v is None or v == "ccc" else v.lower()

    got = map_categorical(col, rows, fn)
    assert [None if pd.isna(v) else v for v in got] == [fn(v) for v in take(col, rows)]
    assert sorted(got.categories) == ["a", "bb", "dd"]
    assert len(map_categorical(col, rows[:0], fn)) == 0


def test_grouping_by_map_categorical_gives_the_string_column_s_groups_in_the_same_order() -> None:
    col = _column(["x", "y", None, "z", "y", "x"])
    rows = np.array([5, 4, 3, 2, 1, 0, 4])
    values = [v.upper() if isinstance(v, str) else None for v in take(col, rows)]
    as_strings = pd.DataFrame({"k": values, "n": np.arange(len(rows))})
    as_codes = pd.DataFrame({"k": map_categorical(col, rows, lambda v: v.upper() if v else None), "n": np.arange(len(rows))})
    want = as_strings.groupby("k", sort=False).agg(n=("n", "sum")).reset_index()
    got = plain_strings(as_codes.groupby("k", sort=False, observed=True).agg(n=("n", "sum")).reset_index(), ("k",))
    pd.testing.assert_frame_equal(got, want)


def test_joint_codes_groups_rows_by_their_combination() -> None:
    rng = np.random.default_rng(0)
    a, b, c = rng.integers(-1, 3, 200), rng.integers(-1, 4, 200), rng.integers(0, 2, 200)
    first, group = joint_codes(a, b, c)
    combos = list(zip(a.tolist(), b.tolist(), c.tolist(), strict=True))
    assert len(first) == len(set(combos))
    for i, g in enumerate(group):
        assert combos[first[g]] == combos[i]  # the representative shares the row's combination
    assert len({combos[f] for f in first}) == len(first)  # one representative per combination


def test_distinct_matches_np_unique_on_narrow_wide_and_edge_ranges() -> None:
    rng = np.random.default_rng(0)
    for dtype in (np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64):
        info = np.iinfo(dtype)
        for n in (1, 7, 500):
            # counted (range within the array's length) and sorted (wider), at both ends of the dtype
            for low, high in ((0, 0), (-1, 3), (-1, n), (info.min, info.min + n), (info.max - 3, info.max), (0, 4 * n),
                              (info.min, info.max)):
                codes = rng.integers(max(low, info.min), min(high, info.max), n, endpoint=True, dtype=dtype)
                uniq, inverse = distinct(codes)
                want_uniq, want_inverse = np.unique(codes, return_inverse=True)
                assert uniq.dtype == want_uniq.dtype
                assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse.reshape(-1))
    uniq, inverse = distinct(np.zeros(0, dtype=np.int64))
    assert len(uniq) == len(inverse) == 0


def test_broadcast_keeps_tuples_whole() -> None:
    assert broadcast([(1.0, 2.0), None], np.array([1, 0, 0])) == [None, (1.0, 2.0), (1.0, 2.0)]
    assert broadcast([], np.zeros(0, dtype=np.int64)) == []


def test_name_mask_is_false_for_missing_names() -> None:
    col = _column(["x", None, "y", "x"])
    assert name_mask(col, lambda n: n != "y").tolist() == [True, False, False, True]
    codes = col.cat.codes.to_numpy().astype(np.intp)
    assert name_mask(col, lambda n: n == "y", codes).tolist() == [False, False, True, False]


def test_clip_to_steps_same_pieces_with_and_without_edge_crossings() -> None:
    win = Windows(np.array([0, 1]), np.array([0.0, 10.0]), np.array([10.0, 20.0]))
    inside = clip_to_steps(np.array([1.0, 12.0, 30.0]), np.array([2.0, 15.0, 31.0]), win)
    assert inside.window.tolist() == [0, 1] and inside.src.tolist() == [0, 1]
    crossing = clip_to_steps(np.array([1.0, 5.0, 30.0]), np.array([2.0, 15.0, 31.0]), win)
    assert crossing.window.tolist() == [0, 0, 1] and crossing.src.tolist() == [0, 1, 1]
    assert crossing.start.tolist() == [1.0, 5.0, 10.0] and crossing.end.tolist() == [2.0, 10.0, 15.0]
