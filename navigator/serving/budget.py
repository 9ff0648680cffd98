"""How a serving profile spends ``--budget-s``: the shortest a point can take, the budget below
which not every instance count is seen, each point's window (adaptive: its fair share) and how
many windows it may take."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from navigator.serving.measure import DEFAULT_WINDOW_MS, LAST, MAX_WINDOWS, MIN_WINDOW_MS

if TYPE_CHECKING:  # pragma: no cover
    from navigator.serving.profile import ServingRun
    from navigator.serving.search import Space

WARMUP_S = 0.2
PA_START_S = 1.0          # perf_analyzer's start-up and connection, roughly
FINISH_RESERVE_S = 4.0     # seconds of the budget kept for stopping the server and writing the outputs


def min_point_s(r: ServingRun, window_s: float | None = None) -> float:
    """The shortest a point can take: 3 windows; with perf_analyzer 3 more (its re-run when
    it gives up on stability) and its start-up."""
    window_s = r.window_s if window_s is None else window_s
    if r.tool == "perf_analyzer":
        return 2 * LAST * window_s + PA_START_S
    return LAST * window_s + WARMUP_S + 0.3


def min_useful_budget(r: ServingRun, space: Space) -> float:
    """What measuring every instance count and delay once (each sweep's first max batch size, as
    the brute search's first round does) takes at the shortest windows, plus the finish."""
    shortest = (r.opts.measurement_ms or MIN_WINDOW_MS) / 1000.0
    per_config = len(r.levels) * len(r.opts.batch_sizes) * min_point_s(r, shortest)
    first_round = len(space.instances) * len(space.delays_us) if r.opts.search == "brute" else 1
    return first_round * per_config + FINISH_RESERVE_S


def window_ms(r: ServingRun) -> int:
    """This point's window: --measurement-ms when given; else the point's fair share of its
    configuration's share of the budget over 3 windows (6 with perf_analyzer's re-run), between
    MIN_WINDOW_MS and DEFAULT_WINDOW_MS, so a short budget still sees every configuration."""
    if r.opts.measurement_ms is not None:
        return r.opts.measurement_ms
    share = (r.config_deadline - time.monotonic()) / max(1, r.points_left)
    if r.tool == "perf_analyzer":
        per = (share - PA_START_S) / (2 * LAST)
    else:
        per = (share - WARMUP_S - 0.3) / LAST
    return int(min(DEFAULT_WINDOW_MS, max(MIN_WINDOW_MS, per * 1000.0)))


def window_cap(r: ServingRun) -> int:
    """Windows this point may take: Perf Analyzer's 10, fewer (3 at least) when the
    configuration's fair share of the remaining budget (remaining / configurations not
    yet measured) spread over its remaining points is shorter, so one noisy configuration
    cannot eat the search; a point cut this way that was not stable says ``stable: false``."""
    now = time.monotonic()
    share = (r.config_deadline - now) / max(1, r.points_left) - WARMUP_S
    room = (r.deadline - now - min_point_s(r)) / r.window_s + LAST   # what still fits in the whole budget
    return max(LAST, min(MAX_WINDOWS, int(share / r.window_s), int(room)))
