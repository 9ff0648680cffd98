"""Unit tests for navigator.execution.profiling, on a fake clock: every inference costs a known time."""

from __future__ import annotations

import types

import numpy as np
import pytest

from navigator.execution import profiling
from navigator.execution.profiling import ProfileSettings, batch_of, percentiles, sweep


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self.calls: list[int] = []

    def perf_counter(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(profiling, "time", types.SimpleNamespace(perf_counter=c.perf_counter))
    return c


def infer_with(clock, cost):
    """An infer function whose inference of a batch of b rows takes cost(b) fake seconds."""

    def infer(feeds):
        b = next(iter(feeds.values())).shape[0]
        clock.calls.append(b)
        clock.t += cost(b)
        return {}

    return infer


SAMPLE = {"x": np.arange(6, dtype=np.float32).reshape(3, 2)}


def test_batch_sizes_double_until_gain_below_5_percent(clock):
    # throughput b / (0.001 + 0.0005 b): gains 50%, 33%, 20%, 11%, 5.9%, then 3% at 64
    out = sweep(infer_with(clock, lambda b: 0.001 + 0.0005 * b), SAMPLE, 0, ProfileSettings(max_batch_size=256))
    assert [r["batch_size"] for r in out.results] == [1, 2, 4, 8, 16, 32, 64]
    assert out.stable is True and out.reason is None
    for r in out.results:
        b = r["batch_size"]
        assert r["throughput"] == pytest.approx(b / (0.001 + 0.0005 * b), rel=1e-3)
        assert r["latency_ms"]["p50"] == pytest.approx((0.001 + 0.0005 * b) * 1000, rel=1e-3)
    assert 128 not in clock.calls


def test_sweep_stops_at_max_batch_size(clock):
    out = sweep(infer_with(clock, lambda b: 0.001), SAMPLE, 0, ProfileSettings(max_batch_size=6))
    assert [r["batch_size"] for r in out.results] == [1, 2, 4]
    assert set(clock.calls) == {1, 2, 4}


def test_explicit_batch_sizes(clock):
    settings = ProfileSettings(max_batch_size=16, batch_sizes=[3, 32, 5])
    out = sweep(infer_with(clock, lambda b: 0.001), SAMPLE, 0, settings)
    assert [r["batch_size"] for r in out.results] == [3, 5]        # no gain stop, capped by max_batch_size


def test_windows_until_stable(clock):
    out = sweep(infer_with(clock, lambda b: 0.002), SAMPLE, None, ProfileSettings())
    # 9 warm-up inferences (the first, then 8 without a new low), then 3 windows of 50 inferences
    # (0.1 s each): stable at the minimum
    assert len(clock.calls) == 9 + 3 * 50
    assert out.stable is True


def test_budget_ends_the_sweep(clock):
    settings = ProfileSettings(max_batch_size=1024, budget_s=1.0)
    out = sweep(infer_with(clock, lambda b: 0.001 + 0.0005 * b), SAMPLE, 0, settings)
    assert out.stable is False
    assert out.reason.startswith("profile budget of 1 s ended the sweep before it measured batch size 16 (measured: 1")
    assert [r["batch_size"] for r in out.results] == [1, 2, 4, 8]


def test_budget_bounds_a_slow_model(clock):
    settings = ProfileSettings(budget_s=2.0)
    out = sweep(infer_with(clock, lambda b: 1.0), SAMPLE, None, settings)
    assert out.stable is False
    assert clock.t <= 4.0            # not 3 warm-ups + 10 inferences per window
    assert len(out.results) == 1 and out.results[0]["throughput"] == pytest.approx(1.0)


def test_no_batching_measures_once_at_batch_1(clock):
    out = sweep(infer_with(clock, lambda b: 0.004), SAMPLE, None, ProfileSettings(max_batch_size=64))
    assert len(out.results) == 1
    r = out.results[0]
    assert r["batch_size"] == 1 and r["throughput"] == pytest.approx(250.0)
    assert set(clock.calls) == {3}          # the sample as given, never re-batched


def test_unstable_throughput(clock):
    n = {"i": 0}

    def cost(b):
        n["i"] += 1
        window = (n["i"] - 4) // 10       # after 3 warm-ups, windows of exactly 10 inferences
        return 0.001 if window % 2 == 0 else 0.002

    settings = ProfileSettings(window_s=0.0, window_min_iters=10, warmup_max_s=0.0)   # exactly 3 warm-ups
    out = sweep(infer_with(clock, cost), SAMPLE, None, settings)
    assert out.stable is False
    assert out.reason == "throughput did not settle within 10 windows or the budget"
    assert n["i"] == 3 + 10 * 10


def test_percentiles():
    p = percentiles([i / 1000 for i in range(1, 101)])
    assert p == {"p50": 50.5, "p90": 90.1, "p95": 95.05, "p99": 99.01, "mean": 50.5}


def test_batch_of_tiles_and_cuts():
    up = batch_of(SAMPLE, 0, 5)
    assert up["x"].tolist() == [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3]]
    assert up["x"].flags["C_CONTIGUOUS"]
    assert batch_of(SAMPLE, 0, 2)["x"].tolist() == [[0, 1], [2, 3]]
    along1 = batch_of({"m": np.array([[1, 2, 3]])}, 1, 4)
    assert along1["m"].tolist() == [[1, 2, 3, 1]]


def test_screening_stops_doubling_when_the_gain_is_within_the_spread(clock):
    """stop_within_spread: batch 4 is 7% ahead of batch 2 (the 5% rule goes on) but within its
    windows' 9% spread (the second of every 3 windows is 9% slower), so screening stops there."""
    rate = {1: 1000.0, 2: 1333.0, 4: 1333.0 * 1.07, 8: 1333.0 * 1.07 * 1.02}

    def cost(b):
        slow = 1.09 if (len(clock.calls) - 1) % 30 // 10 == 1 else 1.0
        return b / rate[b] * slow

    settings = ProfileSettings(max_batch_size=8, window_s=0.0, window_min_iters=10, max_windows=3, warmup_iters=0)
    full = sweep(infer_with(clock, cost), SAMPLE, 0, settings)
    clock.calls.clear()
    settings.stop_within_spread = True
    short = sweep(infer_with(clock, cost), SAMPLE, 0, settings)
    assert [r["batch_size"] for r in full.results] == [1, 2, 4, 8]
    assert [r["batch_size"] for r in short.results] == [1, 2, 4]
    assert short.results[-1]["spread"] == pytest.approx(0.085, abs=0.003)


def test_max_windows_bounds_a_screening_measurement(clock):
    settings = ProfileSettings(max_windows=3, window_s=0.0, window_min_iters=5, warmup_iters=0)
    steps = iter([0.001, 0.002] * 100)
    out = sweep(infer_with(clock, lambda b: next(steps)), SAMPLE, None, settings)
    assert len(clock.calls) == 3 * 5 and out.stable is False


def test_warm_up_lasts_while_a_jit_is_still_specialising(clock):
    """TorchScript's profiling executor as measured on the CNN: ~10 slow inferences, each a little
    faster than the last, then 100x faster: the warm-up goes on while the latency reaches new lows,
    so no measured window sees the slow ones."""
    costs = iter([0.123, 0.071, 0.069, 0.071, 0.078, 0.072, 0.066, 0.052, 0.044, 0.036] + [0.001] * 10_000)
    out = sweep(infer_with(clock, lambda b: next(costs)), SAMPLE, None, ProfileSettings(warmup_iters=2))
    assert out.results[0]["throughput"] == pytest.approx(1000.0, rel=1e-6)
    assert len(clock.calls) == 10 + 9 + 3 * 100   # warm-up: the 10 slow, the first fast one, 8 without a low
    assert out.stable is True


def test_screening_goes_on_while_the_windows_are_too_noisy_to_tell(clock):
    """Windows 30% apart (the second of every 3 is 1.3x slower) at every size: a 3% gain at batch 2
    ends a full sweep (gain < 5%), but screening cannot tell it from noise and goes on while a size
    is ahead at all; batch 4 is behind, and it stops there."""
    rate = {1: 1000.0, 2: 1030.0, 4: 1020.0, 8: 2000.0}

    def cost(b):
        slow = 1.3 if (len(clock.calls) - 1) % 30 // 10 == 1 else 1.0
        return b / rate[b] * slow

    settings = ProfileSettings(max_batch_size=8, window_s=0.0, window_min_iters=10, max_windows=3, warmup_iters=0)
    assert [r["batch_size"] for r in sweep(infer_with(clock, cost), SAMPLE, 0, settings).results] == [1, 2]
    clock.calls.clear()
    settings.stop_within_spread = True
    assert [r["batch_size"] for r in sweep(infer_with(clock, cost), SAMPLE, 0, settings).results] == [1, 2, 4]


def test_a_window_of_a_microsecond_model_ends_after_enough_inferences(clock):
    """A 5 us inference: 1,000 of them end the window (5 ms), not the 0.1 s floor (20,000)."""
    infer = infer_with(clock, lambda b: 5e-6)
    lat, elapsed = profiling.window(infer, {"x": np.zeros((1, 2))}, ProfileSettings())
    assert len(lat) == 1000 and elapsed == pytest.approx(5e-3)
    slow = infer_with(clock, lambda b: 1e-3)   # 1 ms: the 0.1 s floor ends it first (100 inferences)
    lat, elapsed = profiling.window(slow, {"x": np.zeros((1, 2))}, ProfileSettings())
    assert len(lat) == 100 and elapsed == pytest.approx(0.1)


@pytest.mark.parametrize("rate, measured, peak", [
    # still gaining steeply at the largest size (the transformer block's torch runners, 16 -> 64 by
    # 30-60%): 4 sizes, not 7 -- 32 between them is not measured
    ({1: 1e3, 2: 1.6e3, 4: 2.5e3, 8: 3.8e3, 16: 4.6e3, 32: 6.4e3, 64: 7.1e3}, [1, 4, 16, 64], 64),
    # flattening at the top (16 -> 64 by 10%, the block's onnxruntime runners): 32 is measured, and
    # here it is the peak
    ({1: 1e3, 2: 1.6e3, 4: 2.5e3, 8: 3.8e3, 16: 6e3, 32: 6.9e3, 64: 6.6e3}, [1, 4, 16, 64, 32], 32),
    # a peak between the x4 steps (the CNN's onnxruntime runners, at 16 or 32): both neighbours
    ({1: 1e3, 2: 1.8e3, 4: 3e3, 8: 5e3, 16: 7e3, 32: 8e3, 64: 6e3}, [1, 4, 16, 64, 8, 32], 32),
    # past the peak already at 16 (not ahead of 4): stops there, then 2 and 8 round the peak
    ({1: 1e3, 2: 1.5e3, 4: 2e3, 8: 2.4e3, 16: 1.9e3, 32: 1.5e3, 64: 1e3}, [1, 4, 16, 2, 8], 8),
])
def test_a_coarse_sweep_steps_x4_then_measures_the_peaks_neighbours(clock, rate, measured, peak):
    def cost(b):
        return b / rate[b]

    settings = ProfileSettings(max_batch_size=64, window_s=0.0, window_min_iters=10, max_windows=3, warmup_iters=0,
                               stop_within_spread=True, coarse=True)
    out = sweep(infer_with(clock, cost), SAMPLE, 0, settings)
    assert list(dict.fromkeys(clock.calls)) == measured              # the order the sizes were measured in
    assert [r["batch_size"] for r in out.results] == sorted(measured)   # reported by batch size
    assert max(out.results, key=lambda r: r["throughput"])["batch_size"] == peak
    clock.calls.clear()
    settings.coarse = False   # the full doubling sweep of the same curve finds the same peak
    full = sweep(infer_with(clock, cost), SAMPLE, 0, settings)
    assert max(full.results, key=lambda r: r["throughput"])["batch_size"] == peak


@pytest.mark.parametrize("rate, measured, peak", [
    # still gaining at the largest size: 16 is behind 64, and 32 between them is not measured (2 sizes, not 4)
    ({1: 1e3, 2: 1.6e3, 4: 2.5e3, 8: 3.8e3, 16: 4.6e3, 32: 6.4e3, 64: 7.1e3}, [64, 16], 64),
    # flattening at the top: 16 behind 64, then 32 rounds the peak
    ({1: 1e3, 2: 1.6e3, 4: 2.5e3, 8: 3.8e3, 16: 6e3, 32: 6.9e3, 64: 6.6e3}, [64, 16, 32], 32),
    # a peak between the x4 steps: 16 ahead of 64, 4 behind; both of 16's neighbours
    ({1: 1e3, 2: 1.8e3, 4: 3e3, 8: 5e3, 16: 7e3, 32: 8e3, 64: 6e3}, [64, 16, 4, 8, 32], 32),
    # a peak at the small sizes is still found, at the cost of the sizes above it
    ({1: 1e3, 2: 1.5e3, 4: 2e3, 8: 2.4e3, 16: 1.9e3, 32: 1.5e3, 64: 1e3}, [64, 16, 4, 1, 2, 8], 8),
])
def test_a_loaded_screening_goes_from_the_largest_batch_down(clock, rate, measured, peak):
    """On a loaded machine (profiling.screen_settings) the coarse grid is measured from the largest size
    down, stopping when a smaller size is not ahead: a runner that stalls at every parallel region spends
    seconds on its small batches, and the peak is rarely there; the same curves' peaks are found."""
    def cost(b):
        return b / rate[b]

    over = profiling.screen_settings(1.0)
    assert over["descending"] and over["max_windows"] == profiling.MIN_WINDOWS and "descending" not in \
        profiling.screen_settings(None)
    settings = ProfileSettings(**(over | {"max_batch_size": 64, "window_s": 0.0, "warmup_iters": 0}))
    out = sweep(infer_with(clock, cost), SAMPLE, 0, settings)
    assert list(dict.fromkeys(clock.calls)) == measured
    assert [r["batch_size"] for r in out.results] == sorted(measured)
    assert max(out.results, key=lambda r: r["throughput"])["batch_size"] == peak


@pytest.mark.parametrize("max_batch, grid", [(1, [1]), (2, [1, 2]), (8, [1, 4, 8]), (32, [1, 4, 16, 32]),
                                             (100, [1, 4, 16, 64])])
def test_a_coarse_sweep_ends_at_the_largest_power_of_two_allowed(clock, max_batch, grid):
    settings = ProfileSettings(max_batch_size=max_batch, window_s=0.0, window_min_iters=10, max_windows=3,
                               warmup_iters=0, coarse=True)
    sweep(infer_with(clock, lambda b: 1e-3), SAMPLE, 0, settings)   # rising x per size: the largest wins
    assert list(dict.fromkeys(clock.calls))[:len(grid)] == grid


def test_compiling_for_a_new_batch_size_does_not_spend_the_budget(clock):
    """torch.compile recompiles, CUDA graphs record, at each new shape: a first inference 10 s slower
    than the rest. With a 3 s budget the sweep still measures every size (it measured batch 1
    alone on an H200, the budget spent by the compile at 256)."""
    seen: set[int] = set()

    def cost(b):
        first = b not in seen
        seen.add(b)
        return 0.001 * b + (10.0 if first else 0.0)

    out = sweep(infer_with(clock, cost), SAMPLE, 0, ProfileSettings(budget_s=3.0, batch_sizes=[1, 256],
                                                                   max_batch_size=256))
    assert [r["batch_size"] for r in out.results] == [1, 256], out.reason
    assert out.results[1]["throughput"] == pytest.approx(1000.0, rel=1e-3)
    # without the compile, the same sweep costs the same as before: nothing is added
    assert profiling.compile_time(infer_with(clock, lambda b: 0.5), {"x": np.zeros((2, 1))}) == 0.0
