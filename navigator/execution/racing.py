"""Racing the (format, runner) pairs: which figures can be told apart, and the driver that
spends the profile budget on the contenders only.

A throughput figure is only as good as the spread of the windows it came from: a
profile whose windows varied by 26% cannot tell 1.1x apart. Two figures are
**separated** when their window ranges do not overlap -- the slower one at the top of
its range is still below the faster one at the bottom of its range::

    T_fast * (1 - s_fast / 2)  >  T_slow * (1 + s_slow / 2)

with ``s`` the relative spread ``(max - min) / mean`` of each one's windows
(:func:`navigator.execution.profiling.measure` records it). A figure whose spread
exceeds :data:`UNSTABLE_SPREAD` is **unstable**: it is kept, and said so.

The race (:func:`race`): every candidate was *screened* (a short sweep); those not
separated from the leader are the contenders; their windows are then measured in
turn (one window of each, round after round, so drift of the machine hits all of
them alike; the order alternates round by round) until the leader is separated from
every other contender -- each dropped as soon as it is, or as soon as it lost each of the
last rounds to the leader (:func:`paired_lead`) or is shown slower over all of them
(:func:`paired_bound`) -- or those left are within
:data:`RACE_TIE` of each other (a tie), or the leader is shown to be at most :data:`RACE_NEAR`
behind each of those left (:func:`near_bound`), or the budget ends, which the result says. The driver
takes the window function and the clock as arguments: the worker passes real ones,
the unit tests deterministic ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

UNSTABLE_SPREAD = 0.10      # the profiler's stability bound (last 3 windows within 10%)
# the least spread a figure counts with: back-to-back windows agree more closely than the machine
# holds still, so two figures closer than 2% are never called separated (benchmarks/results/
# speed_cpu.md, "Race settings")
SPREAD_FLOOR = 0.02
# against a figure screened in the other process (a live module's), moments apart: separated only
# beyond about 1.1x, closer both are raced window by window (same section)
CROSS_FLOOR = 0.10
RACE_MIN_WINDOWS = 3        # race windows a contender gets before it can be dropped or declared the winner
RACE_LAST = 5               # the spread of a contender's race figure: over its last windows, at most this many
# contenders this close (and stable) after RACE_TIE_ROUNDS rounds end the race as a tie: more windows
# would not separate them, and either is as fast for any deployment decision; or, paired over the last
# RACE_PAIRED rounds, within RACE_TIE on the mean ratio (paired_tie)
RACE_TIE = 0.02
RACE_TIE_ROUNDS = 6
# the paired rule: slower than the leader in each of the last RACE_PAIRED rounds, by RACE_TIE or more in
# the median round and on the mean, is out (two equal runners: one wins all 5 rounds 1 time in 16; the
# order alternates, and drift cancels in each round's ratio). Why and what it saved: speed_cpu.md. From
# RACE_PAIRED rounds on, so is a contender the paired t bound over every round shows RACE_TIE slower or more
# (~97.5%): windows that swing with the load lose some rounds either way, yet their mean ratio still tells
RACE_PAIRED = 5
# the near rule: after RACE_NEAR_ROUNDS rounds, a leader that is at most RACE_NEAR behind each other
# contender at ~97.5% one-sided confidence (the paired rounds' log ratios: mean less t standard errors)
# ends the race: more rounds could only swap picks within the 95%-of-the-best that a pick must reach
RACE_NEAR = 0.05
RACE_NEAR_ROUNDS = 10
OUT = "out of the race: "   # a profile's reason for a contender the race dropped (best reads it)


def dropped(reason: str | None) -> bool:
    """A profile's ``reason`` says the race dropped it (:data:`OUT`): it ranks below the pairs the
    race kept whatever its figure (:func:`ranking`)."""
    return (reason or "").startswith(OUT)


def standing(raced: bool, reason: str | None) -> str:
    """Where a pair's profile left it in the race, for :func:`ranking`: "dropped" (the race
    dropped it), "kept" (raced to the end) or "" (not raced: a screening figure, a sweep of its own)."""
    if dropped(reason):
        return "dropped"
    return "kept" if raced else ""


def placed(profile) -> tuple:
    """A runner's profile step (:class:`navigator.workspace.status.ProfileStep`) as best ranks it:
    ``(peak, standing)``, the peak None unless the profile ended ok."""
    peak = profile.peak() if profile.status == "ok" else None
    return peak, standing(bool(peak and peak.raced), profile.reason)


def ranking(figures: list[tuple[float, str]]) -> list[tuple[float, int, float]]:
    """Sort keys (higher ranks first) for eligible pairs' (throughput, :func:`standing`): a
    contender the race dropped ranks below every eligible pair the race kept, its figure capped at
    the lowest of theirs (its figure froze when it left, theirs went on with the machine's load);
    with no eligible kept pair its figure ranks as it reads. Ties at the cap go by the figures.
    (A pair no race measured is not capped: a resumed run's new format, a peer left out of the
    race, were never compared with the raced ones.)"""
    cap = min((thr for thr, where in figures if where == "kept"), default=None)
    return [(min(thr, cap) if where == "dropped" and cap is not None else thr, 0 if where == "dropped" else 1, thr)
            for thr, where in figures]


def half_spread(spread: float | None, floor: float = SPREAD_FLOOR) -> float:
    """Half the relative window range, at least half of ``floor`` (:data:`SPREAD_FLOOR`, or
    :data:`CROSS_FLOOR` between the two processes' screenings); a figure recorded without a
    spread (an older workspace) counts as the stability bound, never as exact."""
    return max(floor, UNSTABLE_SPREAD if spread is None else spread) / 2.0


def separated(fast: float, fast_spread: float | None, slow: float, slow_spread: float | None,
              floor: float = SPREAD_FLOOR) -> bool:
    """``fast`` is ahead of ``slow`` by more than their measured spread (module docstring)."""
    return fast * (1.0 - half_spread(fast_spread, floor)) > slow * (1.0 + half_spread(slow_spread, floor))


def needed_margin(fast_spread: float | None, slow_spread: float | None, floor: float = SPREAD_FLOOR) -> float:
    """The throughput ratio fast / slow above which two figures are separated."""
    return (1.0 + half_spread(slow_spread, floor)) / max(1e-9, 1.0 - half_spread(fast_spread, floor))


def unstable(spread: float | None) -> bool:
    return spread is not None and spread > UNSTABLE_SPREAD


# --------------------------------------------------------------------------- the race
@dataclass
class Window:
    """One measured window: inferences run, their summed time, each latency (s)."""

    batch_size: int
    latencies: list[float]

    @property
    def throughput(self) -> float:
        total = sum(self.latencies)
        return len(self.latencies) * self.batch_size / total if total > 0 else 0.0


@dataclass
class Entrant:
    """One candidate in the race: its name, the batch size it races at (its screening
    peak), the screening figure, and the race windows measured so far."""

    name: str
    batch_size: int
    screen_throughput: float
    screen_spread: float | None
    windows: list[Window] = field(default_factory=list)
    out: str | None = None          # why it left the race (None: still in, or the winner)
    caller: bool = False            # screened by the calling process (a live module's runner), not the worker

    def figure(self) -> tuple[float, float | None]:
        """(throughput, spread): from the race windows once there are enough, else the screening's."""
        if len(self.windows) < RACE_MIN_WINDOWS:
            return self.screen_throughput, self.screen_spread
        last = self.windows[-RACE_LAST:]
        lat = [x for w in last for x in w.latencies]
        thr = [w.throughput for w in last]
        mean = sum(thr) / len(thr)
        throughput = len(lat) * self.batch_size / sum(lat)
        return throughput, (max(thr) - min(thr)) / mean if mean else None


@dataclass
class RaceResult:
    leader: str | None
    settled: bool                   # the leader is separated from every other contender
    rounds: int
    reason: str | None = None       # why not settled (the budget ended, ...)
    capped: bool = False            # max_rounds ended it
    stopped: bool = False           # ``stop`` ended it (its reason is the race's)
    entrants: dict[str, Entrant] = field(default_factory=dict)


def paired_ratios(lead: Entrant, other: Entrant) -> list[float] | None:
    """``lead``'s window throughput over ``other``'s in each of the last :data:`RACE_PAIRED`
    rounds, sorted; None before there are that many. Both raced every round so far (entrants
    only leave), so their windows pair up by round."""
    n = RACE_PAIRED
    if len(lead.windows) < n or len(other.windows) != len(lead.windows):
        return None
    ratios = sorted(a.throughput / b.throughput for a, b in zip(lead.windows[-n:], other.windows[-n:])
                    if b.throughput > 0)
    return ratios if len(ratios) == n else None


def paired_lead(lead: Entrant, other: Entrant) -> float | None:
    """The median of :func:`paired_ratios` when ``lead`` was faster in each of those rounds
    and by at least :data:`RACE_TIE` in the median one and on the mean (never a
    :func:`paired_tie`); else None."""
    ratios = paired_ratios(lead, other)
    if ratios is None or ratios[0] <= 1.0 or ratios[len(ratios) // 2] < 1.0 + RACE_TIE \
            or sum(ratios) / len(ratios) <= 1.0 + RACE_TIE:
        return None
    return ratios[len(ratios) // 2]


def paired_tie(lead: Entrant, other: Entrant) -> bool:
    """``lead`` and ``other`` within :data:`RACE_TIE` of each other on the mean of the last
    rounds' ratios: a tie that the machine's drift cannot hide (it cancels in each round's
    ratio, while it keeps the window ranges too wide for the figures' tie rule)."""
    ratios = paired_ratios(lead, other)
    if ratios is None:
        return False
    mean = sum(ratios) / len(ratios)
    return 1.0 / (1.0 + RACE_TIE) <= mean <= 1.0 + RACE_TIE


def paired_gain(a: Entrant, b: Entrant) -> float | None:
    """``a``'s throughput over ``b``'s over the rounds both raced (entrants only leave, so their
    first windows pair up by round): items over time pooled over those windows; None without one."""
    n = min(len(a.windows), len(b.windows))
    if n == 0:
        return None

    def rate(windows: list[Window]) -> float:
        seconds = sum(sum(w.latencies) for w in windows)
        return sum(len(w.latencies) * w.batch_size for w in windows) / seconds if seconds > 0 else 0.0

    slow = rate(b.windows[:n])
    return rate(a.windows[:n]) / slow if slow > 0 else None


# Student's t at 97.5% (one-sided) for 1..9 degrees of freedom; from 10 on the approximation in _t975
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def _t975(df: int) -> float:
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.96 + 2.37 / df + 2.82 / df ** 2   # within 0.005 of the exact value from df 9


def paired_bound(lead: Entrant, other: Entrant, min_rounds: int) -> float | None:
    """A lower bound (~97.5%, one-sided) on ``lead``'s throughput over ``other``'s, from every
    round both raced (a paired t bound on the windows' log ratios; drift cancels in each round);
    None before ``min_rounds`` such rounds."""
    import math

    n = min(len(lead.windows), len(other.windows))
    if n < max(2, min_rounds) or len(lead.windows) != len(other.windows):
        return None
    logs = [math.log(a.throughput / b.throughput) for a, b in zip(lead.windows, other.windows)
            if a.throughput > 0 and b.throughput > 0]
    if len(logs) < max(2, min_rounds):
        return None
    k = len(logs)
    mean = sum(logs) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (k - 1))
    return math.exp(mean - _t975(k - 1) * sd / math.sqrt(k))


def near_bound(lead: Entrant, other: Entrant) -> float | None:
    """:func:`paired_bound` from :data:`RACE_NEAR_ROUNDS` rounds on (the near rule)."""
    return paired_bound(lead, other, RACE_NEAR_ROUNDS)


def contenders(screened: list[Entrant]) -> list[Entrant]:
    """The leader by screening throughput and every entrant not separated from it (by
    :data:`CROSS_FLOOR` at least when one was screened by the calling process and the other by
    the worker), or whose screening figure is unstable: windows that varied by more than 10%
    were disturbed, and their level may be too (a TorchScript transformer block screened at 9.6k/s, spread 0.21,
    then ran at 40k/s), so such a figure cannot rule its runner out; the race measures it."""
    if not screened:
        return []
    ranked = sorted(screened, key=lambda e: e.screen_throughput, reverse=True)
    lead = ranked[0]
    return [lead] + [e for e in ranked[1:] if unstable(e.screen_spread) or not separated(
        lead.screen_throughput, lead.screen_spread, e.screen_throughput, e.screen_spread,
        CROSS_FLOOR if e.caller != lead.caller else SPREAD_FLOOR)]


def race(entrants: list[Entrant], window: Callable[[Entrant], Window], budget_s: float,
         clock: Callable[[], float] = time.perf_counter, max_rounds: int = 200, near: bool = True,
         stop: Callable[[], str | None] | None = None) -> RaceResult:
    """Round-robin windows over ``entrants`` until one is separated from all others still
    in, or ``budget_s`` (measured with ``clock``: no round starts that would end past it, were it
    as long as the last) or ``max_rounds`` ends it. ``window(e)``
    measures one window of ``e`` at ``e.batch_size``. ``near``: the near rule may end it (not
    where an unsettled race keeps the first entrant, as the tuning's defaults: a candidate shown
    faster would then be dropped with them). ``stop()``, asked after each round, ends it unsettled
    when it returns a reason (the tuning's: other processes loaded the machine)."""
    live = list(entrants)
    result = RaceResult(leader=None, settled=False, rounds=0, entrants={e.name: e for e in entrants})
    if len(live) <= 1:
        result.leader = live[0].name if live else None
        result.settled = bool(live)
        return result
    before = clock()
    deadline = before + budget_s
    while True:
        # alternate the order: what being measured first (or right after the other process) does
        # to a window falls on each contender in turn, not on the same one every round
        for e in (live if result.rounds % 2 == 0 else live[::-1]):
            e.windows.append(window(e))
        result.rounds += 1
        if stop is not None and (why := stop()):
            result.reason, result.stopped, result.settled = why, True, False
            break
        if all(len(e.windows) >= RACE_MIN_WINDOWS for e in live):
            figures = {e.name: e.figure() for e in live}
            lead = max(live, key=lambda e: figures[e.name][0])
            lt, ls = figures[lead.name]
            for e in [e for e in live if e is not lead]:
                t, s = figures[e.name]
                if separated(lt, ls, t, s):
                    e.out = f"separated from {lead.name} after {len(e.windows)} race windows"
                elif (ratio := paired_lead(lead, e)) is not None:
                    e.out = (f"behind {lead.name} in each of the last {RACE_PAIRED} interleaved rounds "
                             f"({ratio:.2f}x in the median one) after {len(e.windows)} race windows")
                elif (bound := paired_bound(lead, e, RACE_PAIRED)) is not None and bound > 1.0 + RACE_TIE:
                    e.out = (f"slower than {lead.name} over {len(e.windows)} interleaved rounds (~97.5% "
                             f"confidence, paired: {lead.name} at least {bound:.2f}x ahead)")
                if e.out:
                    live.remove(e)
            result.leader = lead.name
            if len(live) == 1:
                result.settled = True
                return result
            if result.rounds >= RACE_TIE_ROUNDS and (
                    all(lt <= figures[e.name][0] * (1.0 + RACE_TIE) and not unstable(figures[e.name][1]) for e in live)
                    or all(paired_tie(lead, e) for e in live if e is not lead)):
                result.reason = (f"{', '.join(e.name for e in live)} within {RACE_TIE:.0%} of each other after "
                                 f"{result.rounds} interleaved rounds: a tie, more windows would not separate them")
                return result
            rest = [e for e in live if e is not lead]
            if near and all((b := near_bound(lead, e)) is not None and b >= 1.0 / (1.0 + RACE_NEAR) for e in rest):
                result.reason = (f"{lead.name} at most {RACE_NEAR:.0%} behind {', '.join(e.name for e in rest)} "
                                 f"(paired over {result.rounds} interleaved rounds, ~97.5% confidence): "
                                 "more rounds could only swap picks within 5% of each other")
                return result
        now = clock()
        if now + (now - before) > deadline:   # another round like the last would end past the budget
            result.reason = (f"the profile budget of {budget_s:g} s ended the race with "
                             f"{', '.join(e.name for e in live)} not separated")
            break
        before = now
        if result.rounds >= max_rounds:
            result.reason = f"{max_rounds} rounds left {', '.join(e.name for e in live)} not separated"
            result.capped = True
            break
    if result.leader is None:   # too few rounds for race figures: the screening's order
        result.leader = max(live, key=lambda e: e.figure()[0]).name
    return result
