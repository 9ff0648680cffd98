"""Runtime options as profile candidates: once the race has a winner, its runner is measured
with each of its runner class's tuning candidates (:meth:`navigator.runners.base.Runner.tuning_candidates`:
thread counts, execution modes, performance hints), interleaved with the defaults at the winner's
batch size (:func:`navigator.execution.racing.race`).

A candidate replaces the defaults only when the race separates it from them (a tie keeps the
defaults: no change without evidence), and only once the options pass verification on the run's
samples at the format's rules (:func:`navigator.execution.stages.run_verify`, outputs not stored):
a thread count can change the order of a reduction. The winner's profile then says which options
it was measured with (``profile.options``) and what the tuning measured (``profile.tuning``); the
Triton config, ``reproduce.sh`` and ``runner()`` read them from there."""

from __future__ import annotations

import logging
import time

from navigator.execution import racing
from navigator.execution.jobs import RunnerTask
from navigator.workspace.status import peak_of
from navigator.machine import affinity_cores as cpus   # the cores a thread count means (this process's affinity)

log = logging.getLogger("navigator.worker")

DEFAULTS = "defaults"
TUNE_MAX_ROUNDS = 20
# a candidate below this share of the defaults in a first window is out at once: no spread a window
# shows hides a 2x gap (onnxruntime's parallel mode ran 50-600x slower on chain-like graphs)
FAR_BEHIND = 0.5
# the tuning's windows, shorter than the race's: its entrants are one artifact under other settings,
# whose gaps run 1.2-2.8x (benchmarks/results/options_oracle_cpu.md); 10 inferences at least, as any
# window; each after its runner's re-warm (Runner.rewarm_s)
TUNE_WINDOW_S = 0.02
# options that give each call fewer threads than the defaults (a stream per request: THROUGHPUT), so
# larger batches, not smaller, are where kept ones can move the best batch size (:func:`climb`)
FEWER_THREADS = {"intra_op_num_threads", "inference_num_threads", "num_threads", "performance_hint"}


def candidates(spec: RunnerTask) -> list[dict]:
    """The runner's tuning candidates, less any that would change an option the run set itself."""
    from navigator import runners

    own = {k for k, v in spec.options.items() if v is not None}
    found = runners.runner_class(spec.runner).tuning_candidates(spec.device, spec.provider, cpus())
    return [c for c in found if not set(c) & own]


def tunable(task, spec: RunnerTask, record: dict) -> bool:
    """Whether a profile ``record`` of ``spec`` on ``task`` is one the tuning measures: figures, a
    verify spec (kept options are verified), not a stateful model, candidates."""
    return bool(task.verify is not None and not task.verify.sequence and record.get("results") and candidates(spec))


def not_tuned_under_load(busy: float, rounds: int = 0) -> dict:
    """The tuning record of a runner not tuned because other processes kept ``busy`` cores busy
    (``rounds``: the tuning's rounds before that load arrived and stopped it)."""
    when = f"as its tuning ran (stopped after round {rounds})" if rounds else "while it was measured"
    return {"candidates": [], "rounds": rounds,
            "reason": f"not tuned: other processes kept {busy:.1f} of the {cpus()} cores busy {when}; options "
                      "measured under that load would fit it, not the server's (NAVIGATOR_IGNORE_LOAD=1 tunes anyway)"}


class LoadWatch:
    """Asked between a tuning's rounds (``racing.race``'s ``stop``): a reason to stop once other
    processes than the run's (``root``'s tree) loaded the machine over two spans in a row of
    :data:`~navigator.execution.profiling.LOAD_SAMPLE_S` or more (one short process is not a load);
    ``busy``, their cores over the second, stays set once it is (every later call stops too). A load
    that arrives after the tuning began stops it as one before it would have skipped it, and a tuning
    raced on loaded cores ran 9-17 rounds where a quiet one ran 3-6."""

    def __init__(self, root: int | None = None):
        from navigator.machine import CpuUse

        self.root, self.last, self.busy, self.loaded_spans = root, CpuUse.now(root), None, 0

    def __call__(self) -> str | None:
        from navigator.execution.profiling import LOAD_SAMPLE_S, busy_cores
        from navigator.machine import CpuUse

        if self.busy is None and time.monotonic() - self.last.wall >= LOAD_SAMPLE_S:
            now = CpuUse.now(self.root)
            busy, self.last = busy_cores(self.last, now), now
            self.loaded_spans = self.loaded_spans + 1 if busy is not None else 0
            if self.loaded_spans >= 2:
                self.busy = busy
        return None if self.busy is None else f"other processes kept {self.busy:.1f} cores busy"


def label(options: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items())) or DEFAULTS


def tune(ws, task, spec: RunnerTask, infer, feed_at, batch_size: int, figure: tuple[float, float | None],
         budget_s: float, window, load, io_names: dict | None = None, max_batch: int | None = None,
         watch: LoadWatch | None = None) -> dict | None:
    """Race the runner's candidates against its defaults (``infer``, already loaded and warm) on
    ``feed_at(batch_size)``: ``window(infer, feeds)`` measures one window's latencies, ``load(spec)``
    returns ``(runner, infer)`` for a candidate's options. Options kept move the batch size too
    (:func:`climb`, up to ``max_batch``; None: a fixed batch). ``watch``: a load that arrives stops
    it, the defaults kept. Returns the tuning record, or None when the runner has no candidates."""
    from navigator.execution.stages import run_verify

    feed = feed_at(batch_size)
    options = candidates(spec)
    if not options:
        return None
    start = time.perf_counter()
    loaded: dict[str, tuple] = {}
    entrants = [racing.Entrant(name=DEFAULTS, batch_size=batch_size, screen_throughput=figure[0],
                               screen_spread=figure[1])]
    record: dict = {"candidates": [], "rounds": 0}
    try:
        for cand in options:
            name = label(cand)
            try:
                runner, cand_infer = load(RunnerTask(runner=spec.runner, device=spec.device, provider=spec.provider,
                                                     options=spec.options | cand, rules=spec.rules))
                for _ in range(2):
                    cand_infer(feed)
            except Exception as e:   # noqa: BLE001 - a candidate the runtime refuses is out, not a failure
                log.warning("tuning %s: %s cannot run: %s", spec.key, name, e)
                record["candidates"].append({"options": cand, "out": f"cannot run: {' '.join(str(e).split())[:200]}"})
                continue
            loaded[name] = (cand, runner, cand_infer)
            entrants.append(racing.Entrant(name=name, batch_size=batch_size, screen_throughput=0.0,
                                           screen_spread=None))
        infers = {DEFAULTS: infer} | {n: v[2] for n, v in loaded.items()}

        def measure(ent: racing.Entrant) -> racing.Window:
            return racing.Window(batch_size=batch_size, latencies=window(infers[ent.name], feed))

        for ent in entrants:          # a first window each: it counts as the race's first round
            ent.windows.append(measure(ent))
        first = entrants[0].windows[0].throughput
        for ent in entrants[1:]:
            share = ent.windows[0].throughput / first if first > 0 else 1.0
            if share < FAR_BEHIND:
                ent.out = f"{share:.2f}x the defaults in a first window"
        racing_now = [e for e in entrants if not e.out]
        result = racing.race(racing_now, measure, budget_s, max_rounds=TUNE_MAX_ROUNDS, near=False, stop=watch)
        result.rounds += 1
        result.entrants = {e.name: e for e in entrants}
        lifted = None
        if max_batch is not None and not result.settled and not result.stopped and not entrants[0].out:
            lifted = _lift_tied(entrants, {n: v[0] for n, v in loaded.items()}, infers, feed_at, max_batch,
                                max(1.0, budget_s - (time.perf_counter() - start)), window, watch)
    finally:
        for _, runner, _ in loaded.values():
            runner.deactivate()
    if stopped := _stopped(watch, result.rounds, start):
        return stopped
    record["rounds"] = result.rounds
    for ent in entrants:
        thr, spread = ent.figure()
        if ent.windows and len(ent.windows) < racing.RACE_MIN_WINDOWS:   # out early: its own windows, not 0
            lat = [x for w in ent.windows for x in w.latencies]
            thr, spread = len(lat) * batch_size / sum(lat), None
        row = {"throughput": round(thr, 3), "spread": round(spread, 4) if spread is not None else None,
               **({"out": ent.out} if ent.out else {})}
        if ent.name == DEFAULTS:
            record["defaults"] = row
        else:
            record["candidates"].append({"options": loaded[ent.name][0], **row})
    # unsettled, a leader still wins once the defaults are out: it was shown ahead of them, not of the
    # candidates it tied with
    winner = result.leader if result.settled or entrants[0].out else None
    gain = racing.paired_gain(result.entrants[winner], entrants[0]) if winner not in (None, DEFAULTS) else None
    if lifted is not None:
        winner, won, why, gain = lifted
    if winner in (None, DEFAULTS) or gain is None or gain <= 1.0:
        record["reason"] = (f"the defaults {'won' if winner == DEFAULTS else 'were not beaten'}: "
                            + (result.reason or 'separated from every candidate' if gain is None else
                               f"{winner} led the last windows but not the rounds both ran ({gain:.2f}x)"))
        record["duration_s"] = round(time.perf_counter() - start, 4)
        return record
    cand = loaded[winner][0]
    tuned = RunnerTask(runner=spec.runner, device=spec.device, provider=spec.provider,
                       options=spec.options | cand, rules=spec.rules)
    verdict, runner = run_verify(ws, task, tuned, task.io_names if io_names is None else io_names, store=False)
    try:
        record["verify"] = verdict.get("status")
        if verdict.get("status") != "ok":
            faster = f"faster at batch {won.batch_size}" if lifted is not None else "faster"
            record["reason"] = (f"{winner} was {faster} but did not pass verification ({verdict.get('status')}: "
                                f"{verdict.get('reason')}); the defaults stay")
        else:
            record["options"] = cand
            if lifted is not None:
                record["reason"] = why
            elif result.settled:
                record["reason"] = f"{winner} separated from the defaults after {result.rounds} interleaved rounds"
            else:   # another candidate may have been the one that put the defaults out
                record["reason"] = (f"the defaults were out ({entrants[0].out}); {winner} led the candidates left "
                                    f"({gain:.2f}x the defaults over the rounds both ran), then {result.reason}")
            if lifted is None:
                won = result.entrants[winner]
                if max_batch is not None:
                    won, why, moved = climb(runner.profiling_infer()[0], won, feed_at, max_batch,
                                            max(1.0, budget_s - (time.perf_counter() - start)), window,
                                            up_only=set(cand) <= FEWER_THREADS, stop=watch)
                    gain *= moved
                    if why:
                        record["reason"] += f"; {why}"
            record["figure"] = _figure(won)
            record["gain"] = round(gain, 4)
    finally:
        runner.deactivate()
    if stopped := _stopped(watch, result.rounds, start):   # arrived during the climb: its moves measured that load
        return stopped
    record["duration_s"] = round(time.perf_counter() - start, 4)
    return record


def _stopped(watch: LoadWatch | None, rounds: int, start: float) -> dict | None:
    """The tuning's record once ``watch`` fired (a load arrived: the defaults stay), else None."""
    if watch is None or watch.busy is None:
        return None
    return not_tuned_under_load(watch.busy, rounds) | {"duration_s": round(time.perf_counter() - start, 4)}


def _lift_tied(entrants: list[racing.Entrant], options: dict[str, dict], infers: dict, feed_at, max_batch: int,
               budget_s: float, window, watch) -> tuple | None:
    """A candidate that gives each call fewer threads (:data:`FEWER_THREADS`) and the race left level
    with the defaults at their peak's batch size may be ahead at a larger one: the defaults' peak
    was found with the defaults' threads, whose parallel regions can slow at the larger sizes (two
    threads on two cores of a shared host read 2x apart from one moment to the next), where one
    thread a call does not. The leading such candidate climbs (:func:`climb`, larger sizes only); where
    it moved, it races the defaults at their peak and at its new size, and must be separated from
    both, more than :data:`~navigator.execution.racing.RACE_TIE` ahead of the first. Returns ``(name,
    entrant at the size found, reason, gain over the defaults at their peak)``, else None."""
    defaults = entrants[0]
    tied = [e for e in entrants[1:] if not e.out and set(options[e.name]) <= FEWER_THREADS]
    ent = max(tied, key=lambda e: e.figure()[0], default=None)
    level = racing.paired_gain(ent, defaults) if ent is not None else None
    if ent is None or level is None or level < 1.0 / (1.0 + racing.RACE_TIE):
        return None
    deadline = time.perf_counter() + budget_s
    won, why, _ = climb(infers[ent.name], ent, feed_at, max_batch, budget_s, window, up_only=True, stop=watch)
    if why is None or (watch is not None and watch.busy is not None):   # no gain, or the load stopped it
        return None
    size = won.batch_size
    there = racing.Entrant(name=f"{ent.name} at batch {size}", batch_size=size, screen_throughput=0.0,
                           screen_spread=None)
    at_peak = racing.Entrant(name=DEFAULTS, batch_size=defaults.batch_size, screen_throughput=0.0, screen_spread=None)
    at_size = racing.Entrant(name=f"defaults at batch {size}", batch_size=size, screen_throughput=0.0,
                             screen_spread=None)
    feeds = {defaults.batch_size: feed_at(defaults.batch_size), size: feed_at(size)}
    for _ in range(2):
        infers[DEFAULTS](feeds[size])     # a new size for the defaults: its first calls are not measured
    runs = {there.name: infers[ent.name], at_peak.name: infers[DEFAULTS], at_size.name: infers[DEFAULTS]}
    result = racing.race([there, at_peak, at_size], lambda e: racing.Window(
        batch_size=e.batch_size, latencies=window(runs[e.name], feeds[e.batch_size])),
        max(1.0, deadline - time.perf_counter()), max_rounds=TUNE_MAX_ROUNDS, near=False, stop=watch)
    gain = racing.paired_gain(there, at_peak)
    if not result.settled or result.leader != there.name or gain is None or gain <= 1.0 + racing.RACE_TIE:
        return None
    return (ent.name, there, f"{ent.name} level with the defaults at batch {defaults.batch_size} ({level:.2f}x over "
            f"the rounds both ran); {why}, and separated there from the defaults at batch {defaults.batch_size} "
            f"and {size} after {result.rounds} interleaved rounds ({gain:.2f}x the first)", gain)


def _figure(ent: racing.Entrant) -> dict:
    from navigator.execution.profiling import percentiles

    thr, spread = ent.figure()
    last = [x for w in ent.windows[-racing.RACE_LAST:] for x in w.latencies]
    return {"batch_size": ent.batch_size, "throughput": round(thr, 3),
            "spread": round(spread, 4) if spread is not None else None, "latency_ms": percentiles(last)}


def climb(infer, here: racing.Entrant, feed_at, max_batch: int, budget_s: float, window,
          up_only: bool = False, stop=None) -> tuple:
    """New options move a runner's best batch size: race ``here`` against its doubling neighbours,
    and move while a neighbour is separated from it. Options that give a call fewer threads
    (:data:`FEWER_THREADS`) favour larger batches, so only the larger neighbour is raced (at
    ``max_batch`` already, none); ``stop`` (the tuning's :class:`LoadWatch`) ends a race unsettled,
    where it stays. Returns the entrant at the batch size found, what moved it (None:
    it stayed) and the gain of the moves (the product of each move's interleaved ratio; 1.0: it stayed)."""
    start_size, tried, gain = here.batch_size, {here.batch_size}, 1.0
    feeds = {here.batch_size: feed_at(here.batch_size)}
    while True:
        down = () if up_only else (here.batch_size // 2,)
        sizes = [s for s in (*down, here.batch_size * 2) if 1 <= s <= max_batch and s not in tried]
        if not sizes:
            break
        tried.update(sizes)
        for s in sizes:
            feeds[s] = feed_at(s)
            for _ in range(2):
                infer(feeds[s])
        others = [racing.Entrant(name=f"batch {s}", batch_size=s, screen_throughput=0.0, screen_spread=None)
                  for s in sizes]
        held = racing.Entrant(name=f"batch {here.batch_size}", batch_size=here.batch_size,
                              screen_throughput=here.figure()[0], screen_spread=here.figure()[1])
        result = racing.race([held, *others], lambda e: racing.Window(batch_size=e.batch_size,
                                                                      latencies=window(infer, feeds[e.batch_size])),
                             budget_s, max_rounds=TUNE_MAX_ROUNDS, near=False, stop=stop)
        if not result.settled or result.leader == held.name:
            here = held if len(held.windows) >= racing.RACE_MIN_WINDOWS else here
            break
        gain *= racing.paired_gain(result.entrants[result.leader], held) or 1.0
        here = result.entrants[result.leader]
    if here.batch_size == start_size:
        return here, None, 1.0
    return here, f"its best batch size moved from {start_size} to {here.batch_size} with them", gain

def tune_profile(ws, task, spec: RunnerTask, infer, record: dict, budget_s: float, settings: dict,
                 io_names: dict | None = None, root: int | None = None) -> dict | None:
    """``record`` (a profile's: ``results`` …) with what the tuning at its peak's batch size found
    (``tuning``; with ``options`` and the peak's new figure when it kept some), or None when there is
    nothing to tune (no candidates, no verify spec, a stateful model). ``infer`` is the runner's,
    active; a failure of the tuning leaves the figures as they were and says why. Other processes
    than ``root``'s tree (the run's calling process) that load the machine meanwhile stop it."""
    from navigator import runners
    from navigator.execution.profiling import ProfileSettings, batch_of, race_window, rewarm_for
    from navigator.execution.stages import runner_options, stored_sample

    names = task.io_names if io_names is None else io_names
    if not tunable(task, spec, record):
        return None
    peak = peak_of(record["results"])
    size = peak["batch_size"]
    try:
        sample = stored_sample(ws, names)
        batch_dim = task.profile.batch_dim

        def feed_at(n: int) -> dict:
            return sample if batch_dim is None else batch_of(sample, batch_dim, n)

        for _ in range(2):
            infer(feed_at(size))     # back to speed: other runners may have run since
        window_settings = ProfileSettings(**settings)
        window_settings.window_s = min(window_settings.window_s, TUNE_WINDOW_S)
        rewarm = rewarm_for([spec.runner])
        most = None if batch_dim is None or settings.get("batch_sizes") else window_settings.max_batch_size

        def load(cand: RunnerTask):
            runner = runners.create(cand.spec(), ws.abs(task.artifact), **runner_options(task, cand, names, None))
            runner.activate()
            return runner, runner.profiling_infer()[0]

        found = tune(ws, task, spec, infer, feed_at, size, (peak["throughput"], peak.get("spread")), budget_s,
                     lambda fn, f: race_window(fn, f, window_settings, rewarm), load, names, most,
                     LoadWatch(root))
    except Exception as e:   # noqa: BLE001 - the figures measured so far stand
        log.exception("tuning %s failed", spec.key)
        found = {"reason": f"tuning failed: {' '.join(str(e).split())[:300]}"}
    if found is None:
        return None
    log.info("tuning %s of %s: %s", spec.key, task.key, found.get("reason"))
    return merged(record, found)


def merged(record: dict, found: dict) -> dict:
    """``record`` (a profile's) with the tuning's record ``found``: its options and its figure at
    the peak's place when it kept some. A raced peak's new figure is the raced one times the gain
    the tuning measured interleaved with the defaults, so that it stays comparable with the other
    contenders' raced figures (the tuning's own windows ran at another moment: under load, a
    figure from then fell below the runner-up's and best picked a pair the race had beaten)."""
    results = record["results"]
    peak = peak_of(results)
    out = dict(record) | {"tuning": {k: v for k, v in found.items() if k not in ("options", "figure", "gain")}}
    if found.get("options"):
        out["options"] = found["options"]
        fig = dict(found["figure"], io=peak.get("io"))
        said = f"runtime options {label(found['options'])} kept ({found['gain']:.2f}x its defaults, interleaved)"
        if peak.get("raced"):
            fig |= {"throughput": round(peak["throughput"] * found["gain"], 3), "raced": True}
            said += (f"; its figure is the raced {peak['throughput']:,.0f}/s times that gain "
                     f"({found['figure']['throughput']:,.0f}/s measured at the tuning's moment)")
        kept = [{k: v for k, v in r.items() if k != "raced"} for r in results if r["batch_size"] != fig["batch_size"]]
        out["results"] = sorted(kept + [fig], key=lambda r: r["batch_size"])
        out["reason"] = f"{record['reason']}; {said}" if record.get("reason") else said
    return out


def screen_and_tune(ws, task, spec: RunnerTask, runner, io_names: dict, root: int | None = None,
                    began=None) -> dict:
    """The profile of a format worker's runner (:func:`navigator.execution.stages.run_profile`); the
    run's only (format, runner), screened there with nothing to race, is screened as on a loaded
    machine when other processes than the run's (``root``'s tree) loaded it since ``began`` (a
    :class:`navigator.machine.CpuUse`: the job's start), and tuned there too unless they loaded it
    over the screening (or before it, when the screening was too short to tell)."""
    import dataclasses

    from navigator.execution.profiling import LOAD_SAMPLE_S, busy_cores
    from navigator.execution.stages import run_profile
    from navigator.machine import CpuUse

    since = CpuUse.now(root)
    if task.profile.screen and began is not None and task.profile.loaded is None:
        task = dataclasses.replace(task, profile=dataclasses.replace(task.profile, loaded=busy_cores(began, since)))
    record = run_profile(ws, task, runner, io_names)
    if not task.profile.screen or not tunable(task, spec, record):
        return record
    now = CpuUse.now(root)
    busy = busy_cores(since, now) if now.wall - since.wall >= LOAD_SAMPLE_S else task.profile.loaded
    if busy is not None:
        return record | {"tuning": not_tuned_under_load(busy)}
    infer, _ = runner.profiling_infer()
    return tune_profile(ws, task, spec, infer, record, task.profile.settings.get("budget_s", 20.0),
                        task.profile.settings, io_names, root) or record
