"""Perf Analyzer's stability rule, percentiles, window pooling and the concurrency
sweep syntax (navigator.serving.measure): pure functions, synthetic windows."""

from __future__ import annotations

import math

import pytest

from navigator.errors import UserInputError
from navigator.serving.measure import (
    MAX_WINDOWS,
    Window,
    concurrency_range,
    done,
    is_stable,
    latency_summary_ms,
    percentile,
    split_windows,
    summarize,
)


def w(requests: int, latency_s: float, duration_s: float = 1.0) -> Window:
    return Window(duration_s=duration_s, latencies_s=[latency_s] * requests)


def test_three_windows_within_ten_percent_are_stable():
    assert is_stable([w(100, 0.010), w(105, 0.0102), w(109, 0.0105)])
    assert done([w(100, 0.010), w(105, 0.0102), w(109, 0.0105)])


def test_fewer_than_three_windows_are_never_stable():
    assert not is_stable([w(100, 0.01), w(100, 0.01)])


@pytest.mark.parametrize("windows", [
    [w(100, 0.010), w(100, 0.010), w(111, 0.010)],      # throughput max/min 1.11
    [w(100, 0.010), w(100, 0.0111), w(100, 0.010)],     # average latency max/min 1.11
    [w(100, 0.010), w(0, 0.010), w(100, 0.010)],        # a window without a completed request
])
def test_more_than_ten_percent_apart_is_unstable(windows):
    assert not is_stable(windows)
    assert not done(windows)


def test_only_the_last_three_windows_count():
    windows = [w(10, 0.5), w(500, 0.001), w(100, 0.010), w(101, 0.010), w(102, 0.010)]
    assert is_stable(windows)


def test_gives_up_after_ten_windows():
    alternating = [w(100 if i % 2 else 200, 0.01) for i in range(MAX_WINDOWS)]
    assert not is_stable(alternating)
    assert not done(alternating[:-1])
    assert done(alternating)
    m = summarize(alternating, concurrency=2, batch_size=1)
    assert m.stable is False and m.windows == MAX_WINDOWS


def test_summary_pools_the_last_three_windows():
    windows = [w(1, 9.0), Window(1.0, [0.001] * 98 + [0.010, 0.020]), Window(1.0, [0.001] * 100),
               Window(1.0, [0.001] * 100)]
    m = summarize(windows, concurrency=4, batch_size=8)
    assert m.requests == 300
    assert m.throughput == pytest.approx(300 * 8 / 3.0)        # inferences/s: requests x batch size
    assert m.latency_ms["p50"] == pytest.approx(1.0)
    assert m.latency_ms["p99"] == pytest.approx(1.0)             # 2 slow of 300 are above the 99th percentile
    assert m.latency_ms["avg"] == pytest.approx((298 * 1 + 10 + 20) / 300, rel=1e-3)
    assert m.stable is False                                     # window 2 holds slow requests: avg off by > 10%
    assert m.to_dict()["concurrency"] == 4


def test_nearest_rank_percentile():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))
    lat = latency_summary_ms([0.001 * i for i in range(1, 101)])
    assert lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"]


def test_split_windows_by_completion_time():
    completions = [(0.0, 0.5), (0.2, 1.4), (1.0, 1.9), (2.0, 2.5), (2.9, 3.5)]
    ws = split_windows(completions, start=0.0, window_s=1.0, count=3)
    assert [x.requests for x in ws] == [1, 2, 1]       # the last one ends after the 3rd window
    assert ws[1].latencies_s == pytest.approx([1.2, 0.9])


@pytest.mark.parametrize("text, expected", [
    ("1:16", [1, 2, 4, 8, 16]),
    ("1:12", [1, 2, 4, 8, 12]),
    ("2:2", [2]),
    ("1:10:3", [1, 4, 7, 10]),
    ("4", [4]),
    ("8,1,2", [1, 2, 8]),
])
def test_concurrency_range(text, expected):
    assert concurrency_range(text) == expected


@pytest.mark.parametrize("text", ["0:4", "4:1", "a:b", "1:2:0", "1:2:3:4", "0", "", "1,x"])
def test_bad_concurrency_is_a_user_error(text):
    with pytest.raises(UserInputError, match="--concurrency"):
        concurrency_range(text)
