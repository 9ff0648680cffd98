"""Measurement windows and Perf Analyzer's stability rule, and the one result record
that both tools (the real ``perf_analyzer`` and our load generator) write.

The rule (FACTS.md, "Perf Analyzer / Model Analyzer measurement method"): windows
of ``measurement_ms`` each; a measurement is stable when, over the last 3 windows,
max/min <= 1.10 for throughput and for the average latency; it gives up after 10
windows and is then recorded with ``stable: false``. The reported figures pool the
requests of those last 3 windows (as Perf Analyzer reports the stable windows).

Pure Python: no numpy, no tritonclient.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

STABILITY = 1.10        # max/min over the last windows, for throughput and average latency
LAST = 3                # windows compared
MAX_WINDOWS = 10        # give up after this many
PERCENTILES = (50, 90, 95, 99)


@dataclass
class Window:
    """Requests that completed inside one window of ``duration_s``."""

    duration_s: float
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    def throughput(self, batch_size: int = 1) -> float:
        """Inferences per second (requests x rows per request)."""
        return self.requests * batch_size / self.duration_s if self.duration_s > 0 else 0.0

    def avg_latency_s(self) -> float:
        return sum(self.latencies_s) / len(self.latencies_s) if self.latencies_s else math.inf


def is_stable(windows: list[Window], *, last: int = LAST, ratio: float = STABILITY) -> bool:
    """Perf Analyzer's rule: the last ``last`` windows within ``ratio`` (max/min) for
    throughput and average latency. A window without a completed request never counts
    as stable."""
    if len(windows) < last:
        return False
    tail = windows[-last:]
    thr = [w.throughput() for w in tail]
    lat = [w.avg_latency_s() for w in tail]
    if min(thr) <= 0 or any(math.isinf(x) for x in lat) or min(lat) <= 0:
        return False
    return max(thr) / min(thr) <= ratio and max(lat) / min(lat) <= ratio


def done(windows: list[Window], *, max_windows: int = MAX_WINDOWS) -> bool:
    """Stop measuring: stable, or ``max_windows`` reached."""
    return is_stable(windows) or len(windows) >= max_windows


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary_ms(latencies_s: list[float]) -> dict[str, float]:
    values = sorted(latencies_s)
    out = {"avg": round(1000.0 * sum(values) / len(values), 4) if values else math.nan}
    for q in PERCENTILES:
        out[f"p{q}"] = round(1000.0 * percentile(values, q), 4)
    return out


# adaptive windows (no --measurement-ms): each point's fair share of the budget, within these bounds
MIN_WINDOW_MS = 250
DEFAULT_WINDOW_MS = 2000


@dataclass
class Measurement:
    """One (configuration, concurrency, request batch size) point; the same record from
    either tool. ``throughput`` in inferences/s, latencies in ms."""

    concurrency: int
    batch_size: int
    throughput: float
    latency_ms: dict[str, float]
    windows: int
    stable: bool
    requests: int | None = None
    errors: int = 0
    window_ms: int | None = None    # each window's length (adaptive windows shorten it for a short budget)
    request_rate: float | None = None   # open loop: the offered requests/s (concurrency is then 0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"concurrency": self.concurrency, "batch_size": self.batch_size,
               "throughput": round(self.throughput, 3), "latency_ms": dict(self.latency_ms),
               "windows": self.windows, "stable": self.stable, "requests": self.requests, "errors": self.errors}
        if self.window_ms is not None:
            out["window_ms"] = self.window_ms
        if self.request_rate is not None:
            out["request_rate"] = self.request_rate
        return out

    @property
    def level(self) -> str:
        """The load this point ran under, as the tables print it."""
        return f"{self.request_rate:g}/s" if self.request_rate is not None else str(self.concurrency)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(concurrency=int(d["concurrency"]), batch_size=int(d.get("batch_size", 1)),
                   throughput=float(d["throughput"]), latency_ms=dict(d.get("latency_ms") or {}),
                   windows=int(d.get("windows", 0)), stable=bool(d.get("stable", False)),
                   requests=d.get("requests"), errors=int(d.get("errors", 0) or 0),
                   window_ms=int(d["window_ms"]) if d.get("window_ms") is not None else None,
                   request_rate=float(d["request_rate"]) if d.get("request_rate") is not None else None)

    @property
    def p99_ms(self) -> float:
        return float(self.latency_ms.get("p99", math.inf))


def summarize(windows: list[Window], *, concurrency: int, batch_size: int, last: int = LAST) -> Measurement:
    """The record of a finished measurement: the last ``last`` windows pooled."""
    if not windows:
        raise ValueError("no measurement window")
    stable = is_stable(windows, last=last)
    tail = windows[-last:]
    latencies = [x for w in tail for x in w.latencies_s]
    duration = sum(w.duration_s for w in tail)
    throughput = len(latencies) * batch_size / duration if duration > 0 else 0.0
    return Measurement(concurrency=concurrency, batch_size=batch_size, throughput=throughput,
                       latency_ms=latency_summary_ms(latencies), windows=len(windows), stable=stable,
                       requests=len(latencies), errors=sum(w.errors for w in windows))


def split_windows(completions: list[tuple[float, float]], start: float, window_s: float, count: int) -> list[Window]:
    """Cut ``(start_time, end_time)`` request records into ``count`` windows of
    ``window_s`` from ``start``; a request belongs to the window it completed in."""
    windows = [Window(duration_s=window_s) for _ in range(count)]
    for t0, t1 in completions:
        i = int((t1 - start) // window_s)
        if 0 <= i < count:
            windows[i].latencies_s.append(t1 - t0)
    return windows


LOAD_MODES = ("concurrency", "request_rate", "request_intervals")
SHARED_MEMORY = ("none", "system")
SATURATED = 0.9      # open loop: a rate served below 90% of what was offered saturates the server


@dataclass(frozen=True)
class Load:
    """How the points of a sweep load the server (Perf Analyzer's modes): closed loop at each
    concurrency level, open loop at each request rate (constant intervals), or open loop at
    the intervals of a file (one level: the file's mean rate); inputs over the network or
    through system shared memory."""

    mode: str = "concurrency"
    levels: tuple[float, ...] = (1,)        # concurrency levels, or requests/s
    intervals_us: tuple[int, ...] = ()      # request_intervals: the gaps between sends, cycled
    intervals_file: str | None = None
    shared_memory: str = "none"

    @property
    def open_loop(self) -> bool:
        return self.mode != "concurrency"

    def word(self) -> str:
        return "concurrency" if self.mode == "concurrency" else "request rate"

    def describe(self) -> str:
        if self.mode == "request_intervals":
            text = f"request intervals of {self.intervals_file} (mean {self.levels[0]:g}/s)"
        elif self.mode == "request_rate":
            text = "request rate " + ", ".join(f"{x:g}" for x in self.levels) + "/s"
        else:
            text = "concurrency " + ", ".join(map(str, self.levels))
        return text + ("; inputs in system shared memory" if self.shared_memory == "system" else "")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "shared_memory": self.shared_memory}
        if self.mode == "request_intervals":
            out["intervals_file"] = self.intervals_file
            out["intervals"] = len(self.intervals_us)
        return out


def _levels(text: str, cast: Callable[[str], Any]) -> list[Any]:
    """The syntax both sweeps share: ``a,b,…`` (sorted, unique), ``lo:hi`` (doubling, ``hi``
    always included), ``lo:hi:step`` (linear, Perf Analyzer's), ``x``. ValueError when malformed,
    not positive, not finite or longer than 64 levels."""
    if "," in text:
        values = sorted({cast(v) for v in text.split(",") if v.strip()})
    elif ":" in text:
        parts = [cast(v) for v in text.split(":")]
        if len(parts) not in (2, 3) or not all(0 < x < math.inf for x in parts) or parts[1] < parts[0]:
            raise ValueError(text)
        lo, hi = parts[0], parts[1]
        if len(parts) == 3:
            n = int((hi - lo) / parts[2] + 1e-9)
            if n >= 64:
                raise ValueError(text)
            values = [type(lo)(round(lo + k * parts[2], 6)) for k in range(n + 1)]
        else:
            values, v = [], lo
            while v < hi and len(values) < 64:
                values.append(v)
                v *= 2
            values.append(hi)
    else:
        values = [cast(text)]
    if not values or len(values) > 64 or not all(0 < x < math.inf for x in values):
        raise ValueError(text)
    return values


def rate_range(text: str) -> list[float]:
    """``--request-rate``: ``10:80`` -> 10, 20, 40, 80 (doubling); ``10:40:10`` -> 10, 20, 30,
    40 (Perf Analyzer's start:end:step); ``25`` or ``5,50,500``; requests/s, > 0."""
    from navigator.errors import UserInputError

    text = str(text).strip()
    try:
        return [float(x) for x in _levels(text, float)]
    except ValueError:
        raise UserInputError(f"--request-rate {text!r}: expected R, START:END (doubling), START:END:STEP or "
                             "R,S,… (requests/s > 0, ascending, at most 64)") from None


def read_intervals(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """``--request-intervals FILE``: Perf Analyzer's format, one gap in microseconds per line
    (blank lines skipped); 1 to 100,000 positive integers, read as text only."""
    from navigator.errors import UserInputError
    from navigator.workspace.atomic import read_regular

    what = f"--request-intervals {path}"
    try:
        text = read_regular(path, 4 << 20, what).decode("utf-8", "replace")
    except (FileNotFoundError, IsADirectoryError):
        raise UserInputError(f"{what}: no such file") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if not line.isdigit() or int(line) <= 0:
            raise UserInputError(f"{what}: line {n} is {line[:40]!r}, not a positive whole "
                                 "number of microseconds")
        out.append(int(line))
        if len(out) > 100_000:
            raise UserInputError(f"{what}: more than 100,000 intervals")
    if not out:
        raise UserInputError(f"{what}: no interval in it")
    return tuple(out)


def concurrency_range(text: str) -> list[int]:
    """``1:16`` -> 1, 2, 4, 8, 16 (doubling, the end always included); ``1:16:4`` ->
    1, 5, 9, 13 (a linear step, Perf Analyzer's start:end:step); ``4`` -> 4; ``1,3,5``."""
    from navigator.errors import UserInputError

    text = str(text).strip()
    try:
        values = [int(x) for x in _levels(text, int)]
    except ValueError:
        raise UserInputError(f"--concurrency {text!r}: expected N, START:END (doubling), START:END:STEP or "
                             "N,M,…") from None
    if not values or min(values) < 1 or values != sorted(values) or values[0] > values[-1]:
        raise UserInputError(f"--concurrency {text!r}: concurrency values must be >= 1 and ascending")
    return values
