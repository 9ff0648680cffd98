"""In-process throughput and latency measurement, inside the format's worker.

Windows run until the last 3 agree within 10% on throughput (minimum 3,
maximum 10 windows, Perf Analyzer's rule scaled down); batch sizes double
from 1 until throughput gains < 5% or ``max_batch_size``; a time budget per
format bounds it all and marks the result ``stable: false`` when it ends the
measurement early. A screening sweep (``coarse``) steps x4 instead and then
measures the peak's two doubling neighbours (:func:`sweep`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from navigator.config import DEFAULT_MAX_BATCH_SIZE, DEFAULT_PROFILE_BUDGET_S
from navigator.execution.racing import separated, unstable

# Screening (navigator.execution.race_job): 3 to 5 windows of >= 30 ms, still until the last 3 agree (a
# JIT stalls again after each new shape), batch sizes x4 apart then the peak's neighbours; whoever it
# cannot separate from the leader is raced with full windows (benchmarks/results/speed_cpu.md, "Screening windows").
SCREEN = {"window_s": 0.03, "window_min_iters": 10, "warmup_iters": 3, "max_windows": 5, "stop_within_spread": True,
          "coarse": True}
SCREEN_BUDGET_S = 10.0    # stages.run_profile screens a run's only (format, runner) with the same
STABILITY = 1.10          # max/min over the last 3 windows
MIN_WINDOWS, MAX_WINDOWS, LAST = 3, 10, 3
MIN_GAIN = 0.05           # stop the batch sweep below this throughput gain
WARMUP_QUIET = 8          # warm-up ends after this many inferences without a new low
# a screening whose peak is the largest batch size, this much above the grid's size before it (x4
# smaller), skips the size between them: one size less per runner; a curve peaking between them is
# reported at the top with its measured figure (speed_cpu.md, "Race settings")
TOP_RISE = 1.25


# other processes keeping at least this share of the cores busy make the machine "loaded" (a measuring
# runner's threads then share the cores with them: ten busy loops on two cores kept only 1.0-1.2 busy
# beside a screening, an idle machine's others 0.03): the race worker's screenings then stop at
# MIN_WINDOWS windows a batch size (their windows would not settle; the race measures the contenders
# again, interleaved), and the winner is not tuned (options measured then would fit that load, not the
# server's). NAVIGATOR_IGNORE_LOAD=1 measures as on a quiet machine.
LOADED_SHARE = 0.25
LOAD_SAMPLE_S = 0.25   # the shortest span the machine's load is read over


def screen_settings(busy: float | None) -> dict:
    """The screening's settings (:data:`SCREEN`); on a loaded machine (``busy`` not None) at
    :data:`MIN_WINDOWS` windows a batch size of 3 inferences or more, after at most 0.5 s of warm-up,
    batch sizes from the largest down: a torch runner whose threads share the cores with other
    processes stalls in its parallel regions, up to ~90 ms an inference whatever its batch size (21/s at
    batch 1, 171/s at 16 beside two busy loops; 7,700/s at 64 when it ran), so windows of 10 inferences
    at every size took most of the race worker's time, and the peak is rarely at the small sizes."""
    loaded = {"max_windows": MIN_WINDOWS, "descending": True, "window_min_iters": 3, "warmup_max_s": 0.5}
    return SCREEN | (loaded if busy is not None else {})


def busy_cores(since, now=None) -> float | None:
    """Cores other processes (outside the tree of ``since.root``: the run's calling process) kept
    busy since ``since`` (a :class:`navigator.machine.CpuUse`) when that counts as loaded
    (:data:`LOADED_SHARE`), else None (quiet, too short a span to tell, unknown, or ignored)."""
    import os

    from navigator.machine import CpuUse, affinity_cores

    if os.environ.get("NAVIGATOR_IGNORE_LOAD") == "1":
        return None
    now = now or CpuUse.now(since.root)
    if now.wall - since.wall < LOAD_SAMPLE_S:
        return None
    busy = now.others_since(since)
    return busy if busy is not None and busy >= LOADED_SHARE * affinity_cores() else None


@dataclass
class ProfileSettings:
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    budget_s: float = DEFAULT_PROFILE_BUDGET_S
    window_s: float = 0.1          # a window is at least this long ...
    window_min_iters: int = 10     # ... and at least this many inferences ...
    window_enough_iters: int = 1000   # ... unless this many were run first (a model of microseconds)
    warmup_iters: int = 3
    warmup_max_s: float = 2.0      # ... more while a JIT is still specialising (warm_up)
    batch_sizes: list[int] | None = None   # explicit sweep instead of doubling
    max_windows: int = MAX_WINDOWS
    # stop doubling also when the larger batch is not ahead of the best so far by more than
    # both figures' window spread (navigator.execution.racing.separated): the screening's rule
    stop_within_spread: bool = False
    # screening: batch sizes x4 apart (1, 4, 16, 64, and the largest power of two <= max_batch_size),
    # then the peak's doubling neighbours not measured yet (peak / 2, peak * 2), so the peak is still
    # located to a power of two in 5-6 sizes instead of 7 (max 64) -- the same sizes where it is interior
    coarse: bool = False
    # the sweep's sizes from the largest down, stopping when a smaller one is not ahead (screen_settings)
    descending: bool = False


@dataclass
class ProfileOutcome:
    results: list[dict] = field(default_factory=list)
    stable: bool = True
    reason: str | None = None


def batch_of(sample: dict, batch_dim: int, size: int) -> dict:
    """``sample`` tiled or cut along the batch dim to ``size`` rows."""
    import numpy as np

    out = {}
    for name, arr in sample.items():
        n = arr.shape[batch_dim]
        idx = np.arange(size) % n
        out[name] = np.ascontiguousarray(np.take(arr, idx, axis=batch_dim))
    return out


def percentiles(latencies_s: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(latencies_s) * 1000.0
    return {f"p{q}": round(float(np.percentile(a, q)), 4) for q in (50, 90, 95, 99)} | {
        "mean": round(float(a.mean()), 4)}


def warm_up(infer, feeds: dict, settings: ProfileSettings, deadline: float) -> int:
    """At least ``warmup_iters`` inferences, then more while the latency still reaches new lows: a
    JIT (TorchScript's profiling executor) runs ~10 slow inferences per new shape before its
    optimised graph, each barely faster than the last, then drops 100x. Ends after
    :data:`WARMUP_QUIET` inferences without a low 10% under the last one, ``warmup_max_s``, or the
    deadline. Returns the inferences run."""
    if settings.warmup_iters <= 0:
        return 0
    settle_by = min(deadline, time.perf_counter() + settings.warmup_max_s)
    low, since, n = float("inf"), 0, 0
    while n < settings.warmup_iters or since < WARMUP_QUIET:
        if n and time.perf_counter() > (deadline if n < settings.warmup_iters else settle_by):
            break
        t0 = time.perf_counter()
        infer(feeds)
        took = time.perf_counter() - t0
        n += 1
        if took < 0.9 * low:
            low, since = took, 0
        else:
            since += 1
            low = min(low, took)
    return n


def window(infer, feeds: dict, settings: ProfileSettings, deadline: float = float("inf")) -> tuple[list[float], float]:
    """One window: at least ``window_min_iters`` inferences and ``window_s`` seconds, or
    ``window_enough_iters`` inferences when they take less (a mean over 1,000 inferences is as
    close as over more; what disturbs a short window, another process taking the core, shows in
    the spread of the repeated windows, which then go on up to ``max_windows``); the deadline cuts
    it after one inference. Returns each latency and the window's wall time (s)."""
    lat: list[float] = []
    start = time.perf_counter()
    while len(lat) < settings.window_min_iters or (time.perf_counter() - start < settings.window_s
                                                   and len(lat) < settings.window_enough_iters):
        if lat and time.perf_counter() > deadline:
            break   # the budget bounds a window too: a slow model must not run 10 more inferences
        t0 = time.perf_counter()
        infer(feeds)
        lat.append(time.perf_counter() - t0)
    return lat, time.perf_counter() - start


def measure(infer, feeds: dict, batch_size: int, settings: ProfileSettings, deadline: float) -> tuple[dict, bool]:
    """Windows at one batch size; returns the result and whether it was stable."""
    warm_up(infer, feeds, settings, deadline)
    windows: list[tuple[float, float, list[float]]] = []   # (throughput, mean latency, latencies)
    stable = False
    while len(windows) < settings.max_windows:
        lat, elapsed = window(infer, feeds, settings, deadline)
        windows.append((len(lat) * batch_size / elapsed, sum(lat) / len(lat), lat))
        if len(windows) >= min(MIN_WINDOWS, settings.max_windows):
            last = windows[-LAST:]
            thr = [w[0] for w in last]
            mean = [w[1] for w in last]
            if max(thr) / min(thr) <= STABILITY and max(mean) / min(mean) <= STABILITY:
                stable = True
                break
        if time.perf_counter() > deadline:
            break
    last = windows[-LAST:]
    all_lat = [x for w in last for x in w[2]]
    throughput = len(all_lat) * batch_size / sum(all_lat)
    thr = [w[0] for w in last]
    spread = (max(thr) - min(thr)) / (sum(thr) / len(thr))   # relative spread of the repeated windows
    return {"batch_size": batch_size, "throughput": round(throughput, 3), "latency_ms": percentiles(all_lat),
            "spread": round(spread, 4)}, stable


def compile_time(infer, feeds: dict) -> float:
    """Two inferences at a batch size the runner may not have seen: the first one's time beyond the
    second's, which is what compiling for the new shape took (torch.compile recompiles, CUDA graphs
    record, a JIT specialises). The budget is for measuring, so it is extended by that much; a
    runner without compilation gets ~0."""
    t0 = time.perf_counter()
    infer(feeds)
    t1 = time.perf_counter()
    infer(feeds)
    return max(0.0, (t1 - t0) - (time.perf_counter() - t1))


def sweep(infer, sample: dict, batch_dim: int | None, settings: ProfileSettings) -> ProfileOutcome:
    """Profile ``infer`` over batch sizes; ``infer(feeds)`` runs one inference."""
    outcome = ProfileOutcome()
    deadline = time.perf_counter() + settings.budget_s
    if batch_dim is None:
        result, stable = measure(infer, sample, 1, settings, deadline)
        outcome.results.append(result)
        outcome.stable = stable
        if not stable:
            outcome.reason = "throughput did not settle within 10 windows or the budget"
        return outcome
    doubling, b = [], 1
    while b <= settings.max_batch_size:
        doubling.append(b)
        b *= 2
    if settings.batch_sizes:
        sizes = [b for b in settings.batch_sizes if b <= settings.max_batch_size] or [1]
    elif settings.coarse:
        sizes = doubling[::2] + ([doubling[-1]] if len(doubling) % 2 == 0 else [])
    else:
        sizes = doubling
    if settings.descending and not settings.batch_sizes:
        sizes = sizes[::-1]

    def at(size: int) -> bool:
        """Measure ``size``; False once the budget has ended (nothing measured)."""
        nonlocal deadline
        if time.perf_counter() > deadline:
            outcome.stable = False
            done = ", ".join(str(r["batch_size"]) for r in outcome.results) or "none"
            outcome.reason = (f"profile budget of {settings.budget_s:g} s ended the sweep before it measured batch "
                              f"size {size} (measured: {done})")
            return False
        feeds = batch_of(sample, batch_dim, size)
        if settings.warmup_iters > 0:   # the first two warm-up inferences, timed for what compiling took
            deadline += compile_time(infer, feeds)
        result, stable = measure(infer, feeds, size, settings, deadline)
        outcome.results.append(result)
        if not stable:
            outcome.stable = False
            outcome.reason = outcome.reason or f"batch size {size}: throughput did not settle"
        return True

    best, lead = 0.0, None
    for size in sizes:
        if not at(size):
            return outcome
        result = outcome.results[-1]
        gain = result["throughput"] / best - 1.0 if best else float("inf")
        stop = gain < MIN_GAIN
        if settings.stop_within_spread and lead is not None:
            noisy = unstable(result["spread"]) or unstable(lead["spread"])
            if noisy:   # too noisy to tell a gain within the spread: go on while this size is ahead at all
                stop = result["throughput"] <= lead["throughput"]
            else:       # a gain within the windows' spread is no gain
                stop = stop or not separated(result["throughput"], result["spread"], lead["throughput"],
                                             lead["spread"])
        if lead is None or result["throughput"] > lead["throughput"]:
            lead = result
        best = max(best, result["throughput"])
        if not settings.batch_sizes and stop:
            break
    if settings.coarse and not settings.batch_sizes:
        done = {r["batch_size"] for r in outcome.results}
        peak = lead["batch_size"]
        below = max((r for r in outcome.results if r["batch_size"] < peak), key=lambda r: r["batch_size"], default=None)
        for size in (peak // 2, peak * 2):
            if size == peak // 2 and peak == doubling[-1] and below is not None \
                    and lead["throughput"] >= TOP_RISE * below["throughput"]:
                continue   # still rising steeply at the largest size: the peak is there
            if size in doubling and size not in done and not at(size):
                break
        outcome.results.sort(key=lambda r: r["batch_size"])
    return outcome


# unmeasured running before each race window: a runner right after another runs slowly at first,
# while the other's idle threads spin (torch's ~10 ms; onnxruntime's capped at 1 ms in the workers)
# (benchmarks/results/speed_cpu.md, "Race settings"); the longest any runner needs (Runner.rewarm_s)
REWARM_S = 0.02
# a race window, half a full sweep's: rounds pair the contenders moments apart, so drift cancels in
# their ratio and short windows cost few extra rounds (same section)
RACE_WINDOW_S = 0.05


def rewarm_for(runner_names) -> float:
    """The re-warm of windows that alternate between these runners' (names; None: a live module's,
    measured by the calling process): the longest any of them needs."""
    from navigator import runners

    return max((REWARM_S if n is None else runners.runner_class(n).rewarm_s for n in runner_names), default=REWARM_S)


def race_window(infer, feed: dict, settings, rewarm_s: float = REWARM_S) -> list[float]:
    """One race window's latencies, after ``rewarm_s`` of unmeasured running (back to speed
    after the others ran). The calling process measures a peer's windows with it too."""
    start, n = time.perf_counter(), 0
    while n < 2 or time.perf_counter() - start < rewarm_s:
        infer(feed)
        n += 1
    lat, _ = window(infer, feed, settings)
    return lat
