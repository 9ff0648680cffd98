"""The configuration space and its search, written from Model Analyzer's documented
semantics (FACTS.md), not its code.

A :class:`Candidate` is one config.pbtxt variant: instance count x max batch size x
dynamic-batching queue delay (``None``: no dynamic batcher), and where searched the
preferred batch sizes and the response cache (``None``: as the base config has them).
Each candidate is
measured over a concurrency sweep by an ``evaluate`` callback; the search only sees
:class:`ConfigResult` records, so it runs on synthetic objectives in the unit tests.

- ``brute``: every instance count, delay, preferred sizes and cache setting, max batch
  size ascending; a sweep (of
  concurrency inside a candidate, of max batch size across candidates) stops when
  throughput gains < 5% for ``patience`` steps in a row (:class:`StopRule`). The max
  batch size sweeps advance in turn, so a short budget still sees every instance count;
  the sizes a stopped sweep passed over come last, while the budget lasts.
- ``quick``: hill-climbing from the smallest candidate over the index grid, moving to
  the best improving neighbour (±1 on one axis) until none improves.

Both stop at the time budget; what they did not measure for it is returned as
``skipped`` with the reason. The objective is ``throughput`` (higher is better) or
``p99_latency`` (lower); constraints ``max_p99_ms`` and ``min_throughput`` decide
which measurements count. Ranking puts candidates with a measurement that meets the
constraints first, by their best such measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from navigator.serving.measure import SATURATED, Measurement

OBJECTIVES = ("throughput", "p99_latency")
SEARCHES = ("brute", "quick")
MIN_GAIN = 0.05        # Model Analyzer: stop a sweep when throughput gains < 5% ...
PATIENCE = 2           # ... for this many steps (MA looks over 4 steps of its 1…1024 sweep; ours are 5-6 long)


@dataclass(frozen=True)
class Candidate:
    instances: int
    max_batch_size: int
    delay_us: int | None = 0                  # None: no dynamic batching
    preferred: tuple[int, ...] | None = None  # preferred batch sizes; None: as the base config has them
    cache: bool | None = None                 # response cache on/off; None: as the base config has it

    @property
    def name(self) -> str:
        tail = "nodb" if self.delay_us is None else f"d{self.delay_us}"
        name = f"i{self.instances}_b{self.max_batch_size}_{tail}"
        if self.preferred is not None:
            name += "_p" + ("-".join(map(str, self.preferred)) or "none")
        if self.cache is not None:
            name += "_cache" if self.cache else "_nocache"
        return name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instances": self.instances, "max_batch_size": self.max_batch_size,
                               "dynamic_batching": self.delay_us is not None, "max_queue_delay_us": self.delay_us}
        if self.preferred is not None:
            out["preferred_batch_sizes"] = list(self.preferred)
        if self.cache is not None:
            out["response_cache"] = self.cache
        return out


@dataclass(frozen=True)
class Space:
    """The axes of the search: instances, max batch sizes and delays ascending; preferred
    batch-size sets and cache settings in the order given (``(None,)``: not searched)."""

    instances: tuple[int, ...] = (1,)
    max_batch_sizes: tuple[int, ...] = (1,)
    delays_us: tuple[int | None, ...] = (0,)
    preferred: tuple[tuple[int, ...] | None, ...] = (None,)
    caches: tuple[bool | None, ...] = (None,)

    def __post_init__(self) -> None:
        for axis in (self.instances, self.max_batch_sizes, self.delays_us, self.preferred, self.caches):
            if not axis:
                raise ValueError("an empty search axis")

    def at(self, index: tuple[int, ...]) -> Candidate:
        i, b, d, p, c = tuple(index) + (0,) * (5 - len(index))
        return Candidate(self.instances[i], self.max_batch_sizes[b], self.delays_us[d], self.preferred[p],
                         self.caches[c])

    def shape(self) -> tuple[int, ...]:
        return (len(self.instances), len(self.max_batch_sizes), len(self.delays_us), len(self.preferred),
                len(self.caches))

    def sweeps(self) -> list[tuple[int, int | None, tuple[int, ...] | None, bool | None]]:
        """(instances, delay, preferred, cache) of each max-batch-size sweep, in search order."""
        return [(i, d, p, c) for i in self.instances for d in self.delays_us for p in self.preferred
                for c in self.caches]

    def all(self) -> list[Candidate]:
        return [Candidate(i, b, d, p, c) for i, d, p, c in self.sweeps() for b in self.max_batch_sizes]

    def size(self) -> int:
        return math.prod(self.shape())


@dataclass(frozen=True)
class Objective:
    kind: str = "throughput"                 # throughput | p99_latency
    max_p99_ms: float | None = None
    min_throughput: float | None = None

    def meets(self, m: Measurement) -> bool:
        if self.max_p99_ms is not None and not (m.p99_ms <= self.max_p99_ms):
            return False
        if self.min_throughput is not None and not (m.throughput >= self.min_throughput):
            return False
        return m.errors == 0 and m.throughput > 0

    def score(self, m: Measurement) -> float:
        """Higher is better."""
        return m.throughput if self.kind == "throughput" else -m.p99_ms

    def best(self, measurements: Iterable[Measurement]) -> tuple[Measurement | None, bool]:
        """The best measurement meeting the constraints, ``(m, True)``; when none does,
        the best unconstrained one, ``(m, False)``; ``(None, False)`` for none at all."""
        ms = [m for m in measurements if m.throughput > 0 and m.errors == 0]
        ok = [m for m in ms if self.meets(m)]
        if ok:
            return max(ok, key=self.score), True
        if ms:
            return max(ms, key=self.score), False
        return None, False

    def constraints_text(self) -> str:
        parts = []
        if self.max_p99_ms is not None:
            parts.append(f"p99 <= {self.max_p99_ms:g} ms")
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g}/s")
        return " and ".join(parts) or "error-free serving"

    def describe(self) -> str:
        parts = [f"objective {self.kind}"]
        if self.max_p99_ms is not None:
            parts.append(f"p99 <= {self.max_p99_ms:g} ms")
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g}/s")
        return ", ".join(parts)


@dataclass
class ConfigResult:
    candidate: Candidate
    status: str = "ok"                        # ok | failed | skipped
    reason: str | None = None
    measurements: list[Measurement] = field(default_factory=list)
    duration_s: float | None = None

    def key(self, objective: Objective) -> tuple[bool, float]:
        """Sort key, higher is better: (meets the constraints, score of its best)."""
        if self.status != "ok":
            return (False, -math.inf)
        best, ok = objective.best(self.measurements)
        return (ok, objective.score(best)) if best is not None else (False, -math.inf)

    def best_throughput(self) -> float:
        return max((m.throughput for m in self.measurements), default=0.0)


@dataclass
class StopRule:
    """Stop a sweep when the last ``patience`` values each stayed below the best value
    before them by more than ``min_gain`` (throughput gains < 5%)."""

    min_gain: float = MIN_GAIN
    patience: int = PATIENCE

    def should_stop(self, values: list[float]) -> bool:
        if len(values) <= self.patience:
            return False
        best_before = max(values[: -self.patience])
        return all(v < best_before * (1.0 + self.min_gain) for v in values[-self.patience:])


@dataclass
class SearchOutcome:
    results: list[ConfigResult] = field(default_factory=list)     # measured (ok or failed), in order
    skipped: list[ConfigResult] = field(default_factory=list)     # not measured, with the reason

    def ranked(self, objective: Objective) -> list[ConfigResult]:
        ok = [r for r in self.results if r.status == "ok" and r.measurements]
        return sorted(ok, key=lambda r: r.key(objective), reverse=True)

    def chosen(self, objective: Objective) -> ConfigResult | None:
        ranked = self.ranked(objective)
        return ranked[0] if ranked and ranked[0].key(objective)[0] else None


Evaluate = Callable[[Candidate], ConfigResult]
HasTime = Callable[[], bool]


def brute(space: Space, evaluate: Evaluate, has_time: HasTime, *, rule: StopRule | None = None) -> SearchOutcome:
    """Every instance count, delay, preferred sizes and cache setting, each a sweep of max
    batch size ascending that ends at the stop rule. The sweeps advance in turn, one max
    batch size each, so a budget that ends the search early has still seen every instance
    count (the budget is shared fairly). The sizes a sweep's stop rule passed over are
    measured after every sweep ended while the budget lasts (else skipped: budget): with
    time enough, brute measures the whole space."""
    rule = rule or StopRule()
    out = SearchOutcome()
    sizes = list(space.max_batch_sizes)
    sweeps = space.sweeps()
    step = {s: 0 for s in sweeps}
    gains: dict[tuple[Any, ...], list[float]] = {s: [] for s in sweeps}
    active = list(sweeps)
    passed: list[tuple[int, int, Candidate, str]] = []   # (size index, sweep index, candidate, why) passed over
    while active:
        for sweep in list(active):
            inst, delay, pref, cache = sweep
            n = step[sweep]
            cand = Candidate(inst, sizes[n], delay, pref, cache)
            step[sweep] = n + 1
            if step[sweep] >= len(sizes):
                active.remove(sweep)
            if not has_time():
                out.skipped.append(ConfigResult(cand, status="skipped", reason="budget"))
                continue
            res = evaluate(cand)
            out.results.append(res)
            gains[sweep].append(res.best_throughput() if res.status == "ok" else 0.0)
            if sweep in active and rule.should_stop(gains[sweep]):
                active.remove(sweep)
                why = (f"budget, after its max batch size sweep stopped at {sizes[n]} (throughput gains "
                       f"< {rule.min_gain:.0%} for {rule.patience} steps)")
                passed += [(m, sweeps.index(sweep), Candidate(inst, sizes[m], delay, pref, cache), why)
                           for m in range(n + 1, len(sizes))]
    # what the rule passed over comes last, smallest max batch size first: the rule ranks what a short
    # budget measures; with time left the space is measured whole, as a noisy step may have stopped a sweep
    for _m, _s, cand, why in sorted(passed, key=lambda p: p[:2]):
        if has_time():
            out.results.append(evaluate(cand))
        else:
            out.skipped.append(ConfigResult(cand, status="skipped", reason=why))
    return out


def hill_climb(space: Space, evaluate: Evaluate, has_time: HasTime, objective: Objective,
               start: tuple[int, ...] | None = None) -> SearchOutcome:
    """Quick search: from ``start``, evaluate the unvisited neighbours (±1 on each axis)
    and move to the best one while it beats the current candidate."""
    out = SearchOutcome()
    seen: dict[tuple[int, ...], ConfigResult] = {}
    shape = space.shape()
    first = tuple(start) + (0,) * (len(shape) - len(start)) if start is not None else (0,) * len(shape)

    def visit(index: tuple[int, ...]) -> ConfigResult | None:
        if index in seen:
            return seen[index]
        cand = space.at(index)
        if not has_time():
            res = ConfigResult(cand, status="skipped", reason="budget")
            out.skipped.append(res)
            seen[index] = res
            return None
        res = evaluate(cand)
        out.results.append(res)
        seen[index] = res
        return res

    current: tuple[int, ...] = first
    cur = visit(current)
    if cur is None:
        return out
    while True:
        neighbours: list[tuple[int, ...]] = []
        for axis in range(len(shape)):
            for step in (-1, 1):
                moved = list(current)
                moved[axis] += step
                if 0 <= moved[axis] < shape[axis]:
                    neighbours.append(tuple(moved))
        best_idx: tuple[int, ...] | None = None
        best_res: ConfigResult | None = None
        for idx in neighbours:
            if idx in seen:
                continue
            res = visit(idx)
            if res is None:
                continue
            if best_res is None or res.key(objective) > best_res.key(objective):
                best_idx, best_res = idx, res
        if best_res is None or best_idx is None or not best_res.key(objective) > cur.key(objective):
            break
        current, cur = best_idx, best_res
    return out


def sweep_levels(levels: list[Any], measure: Callable[[Any], Measurement], has_time: HasTime,
                 objective: Objective, *, rule: StopRule | None = None,
                 word: str = "concurrency") -> tuple[list[Measurement], str | None]:
    """Measure each load level (concurrency, or request rate) in order; stop when throughput
    gains < 5% for ``patience`` levels, when p99 is past ``max_p99_ms`` (more load only
    queues more), when an offered rate is served below 90% (saturated), or when time is
    up. Returns the measurements and why it stopped early."""
    rule = rule or StopRule()
    out: list[Measurement] = []
    for n, c in enumerate(levels):
        if out and not has_time():
            return out, f"budget: {word} {', '.join(f'{x:g}' for x in levels[n:])} not measured"
        m = measure(c)
        out.append(m)
        rest = levels[n + 1:]
        if not rest:
            break
        if objective.max_p99_ms is not None and m.p99_ms > objective.max_p99_ms:
            return out, f"p99 {m.p99_ms:.2f} ms > {objective.max_p99_ms:g} ms at {word} {c:g}"
        if m.request_rate is not None and m.throughput < SATURATED * m.request_rate * m.batch_size:
            return out, (f"saturated: {m.throughput:.1f} infer/s served of {m.request_rate * m.batch_size:g} "
                         f"offered at {word} {c:g}/s")
        if rule.should_stop([x.throughput for x in out]):
            return out, f"throughput gains < {rule.min_gain:.0%} for {rule.patience} steps"
    return out, None
