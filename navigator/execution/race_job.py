"""The race job: one worker that profiles every verified (format, runner) of the run, alone
on the machine (the parent starts it after every conversion and verification ended).

1. **Screening.** Each runner is loaded and swept briefly (:data:`SCREEN`: 3 to 5
   windows per batch size; batch sizes x4 apart, stopping when a larger batch is not ahead
   by more than the windows' spread, or, while they are too noisy to tell, not ahead at
   all; then the peak's two doubling neighbours). On a loaded machine (other processes kept
   a quarter of the cores busy over the run so far, then over the screening before) from the
   largest batch size down at 3 windows each (:func:`~navigator.execution.profiling.screen_settings`).
   Its profile is reported at once with ``phase: screening``.
2. **Contenders.** The leader and every runner not separated from it
   (:func:`navigator.execution.racing.contenders`).
3. **The race.** The contenders' windows at their screening peaks are measured in turn,
   one window each per round (:func:`navigator.execution.racing.race`: each dropped once
   separated from the leader, behind it in each of the last rounds or shown behind it over all
   of them), until the leader is alone, a tie or the near rule ends it, or the budget, or
   :data:`RACE_MAX_ROUNDS` (:data:`RACE_LOADED_ROUNDS` on a loaded machine); their profiles are
   then reported again with the race figure at that batch size and ``phase: race``.

Budget: ``--profile-budget-s`` is per format, as in a full sweep; screening takes at most
:data:`SCREEN_BUDGET_S` of it per runner and the race at most one format's budget and
:data:`RACE_MAX_ROUNDS` rounds, so a race never takes longer than the full sweeps did.

**Peers.** A live module's runners need the object, which no worker has: the calling process
screens them itself and enters them as :class:`~navigator.execution.jobs.RacePeer` records with
their screening figures. When one is a contender, each of its race windows is measured by the
calling process on request (:class:`_Caller`) while this worker waits in ``select()``, so the
race interleaves the two processes' windows as it does its own, one process measuring at a time.

Runners stay loaded from screening to the race while the artifacts are small
(:data:`KEEP_LOADED_BYTES`), so a torch.compile graph is not compiled twice; larger ones
are unloaded after screening, and contenders whose artifacts add up to more than that are
not raced (the race holds every contender at once: 6.6x a 2.25 GiB model's size in memory,
benchmarks/results/large_model_cpu.md), nor tuned; their screening figures stand. A crash here
fails the profiles not yet reported (the parent names the runner that was being measured)."""

from __future__ import annotations

import logging
import os
import select
import time
from pathlib import Path

from navigator.execution import racing
from navigator.execution.jobs import Event, Job, PeerWindow, RacePeer, RunnerTask, Task
from navigator.execution.profiling import (  # noqa: F401  (the screening and race-window settings)
    LOAD_SAMPLE_S, RACE_WINDOW_S, REWARM_S, SCREEN_BUDGET_S, busy_cores, race_window, rewarm_for)
from navigator.machine import CpuUse, affinity_cores

log = logging.getLogger("navigator.worker")

RACE_MAX_ROUNDS = 30
# on a loaded machine (other processes kept LOADED_SHARE of the cores busy over the screenings) the race
# ends after this many rounds: its windows then swing with the other processes' load (spreads 0.5-2 beside a
# second benchmark), so rounds beyond it measured that load and settled nothing (the pick says it is unsure)
RACE_LOADED_ROUNDS = 10
KEEP_LOADED_BYTES = 1 << 30
PEER_WAIT_S = 120.0   # the longest a window of the calling process may take to come back


class _Entry:
    def __init__(self, index: int, task: Task, spec: RunnerTask):
        self.index, self.task, self.spec = index, task, spec
        self.runner = None
        self.infer = None
        self.io = None
        self.record: dict | None = None
        self.duration_s = 0.0
        self.entrant: racing.Entrant | None = None

    @property
    def name(self) -> str:
        return f"{self.task.key} on {self.spec.key}"

    @property
    def key(self) -> str:
        return self.task.key

    @property
    def rkey(self) -> str:
        return self.spec.key


def _entrant(name: str, results: list[dict], caller: bool = False) -> racing.Entrant:
    """The race entrant of a screening: at its peak's batch size, with the peak's figure."""
    peak = max(results, key=lambda r: r["throughput"])
    return racing.Entrant(name=name, batch_size=peak["batch_size"], screen_throughput=peak["throughput"],
                          screen_spread=peak.get("spread"), caller=caller)


class _Peer:
    """A :class:`RacePeer` in the race: figures as the calling process screened them; its
    windows come from the calling process (:class:`_Caller`)."""

    index = 0   # events name no task of this job

    def __init__(self, peer: RacePeer):
        self.peer, self.key, self.rkey, self.name = peer, peer.key, peer.runner, peer.name
        self.record = {k: peer.profile.get(k) for k in ("stable", "results", "reason", "phase")}
        self.duration_s = peer.duration_s
        self.entrant = _entrant(self.name, self.record["results"], caller=True)
        self.io = self.record["results"][0].get("io")   # the runner's: the same at every batch size


class _Caller:
    """The calling process's side of a peer's window: this worker asks with an ``event:
    window`` (its batch size and window settings) and waits in ``select()`` on the FIFO
    ``Workspace.race_wake``, using no CPU while the calling process measures; once woken it
    reads the :class:`PeerWindow` from ``Workspace.race_reply``. The FIFO is held open for
    reading and writing, so the parent's non-blocking open always finds a reader and this side
    never reads an end of file."""

    def __init__(self, ws, events):
        self.ws, self.events = ws, events
        self.fd = os.open(ws.race_wake, os.O_RDWR | os.O_NONBLOCK)
        try:   # the parent holds its read end open: at once, not at its next 50 ms poll
            self.ask = os.open(ws.race_ask, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            self.ask = None

    def close(self) -> None:
        os.close(self.fd)
        if self.ask is not None:
            os.close(self.ask)

    def window(self, peer: _Peer, batch_size: int, settings) -> list[float]:
        import dataclasses
        import json

        self.events.emit(Event(task=0, key=peer.key, stage="race", runner=peer.rkey, event="window",
                               result={"batch_size": batch_size, "settings": dataclasses.asdict(settings)}))
        if self.ask is not None:
            try:
                os.write(self.ask, b"\n")
            except OSError:   # the parent reads the event at its next poll anyway
                pass
        if not select.select([self.fd], [], [], PEER_WAIT_S)[0]:   # (a signal does not cut it short: PEP 475)
            raise TimeoutError(f"the calling process did not measure {peer.name} within {PEER_WAIT_S:g} s")
        os.read(self.fd, 4096)
        reply = PeerWindow.from_dict(json.loads(self.ws.race_reply.read_text(encoding="utf-8")))
        if reply.error or not reply.latencies:
            raise RuntimeError(f"the calling process could not measure {peer.name}: {reply.error or 'no latencies'}")
        return reply.latencies


def _artifact_bytes(ws, tasks: list[Task]) -> int:
    """What loading the tasks' artifacts reads: each file, the files of a folder artifact, and the
    files its format's record says belong to it (OpenVINO's model.bin, ONNX external data)."""
    from navigator import formats
    from navigator.dotted import resolve

    total = 0
    for task in tasks:
        path = Path(ws.abs(task.artifact))
        if path.is_dir():
            files = [f for f in path.rglob("*")]
        else:
            files = [path]
            for fmt in (f for f in formats.all_formats() if f.artifact == path.name):
                files += [path.with_name(c) for c in fmt.companions]
                if fmt.data_files and path.is_file():
                    try:
                        files += resolve(fmt.data_files)(path)
                    except Exception:   # noqa: BLE001 - an unreadable graph: its own size stands
                        pass
        total += sum(f.stat().st_size for f in set(files) if f.is_file())
    return total


def _load(ws, entry: _Entry) -> None:
    from navigator import runners
    from navigator.execution.stages import runner_options

    task, spec = entry.task, entry.spec
    entry.runner = runners.create(spec.spec(), ws.abs(task.artifact),
                                  **runner_options(task, spec, task.io_names, None))
    start = time.perf_counter()
    entry.runner.activate()   # torch_compile compiles here, from the run's compiler caches its verify filled
    cache = getattr(entry.runner, "graph_cache", None)
    log.info("race: %s loaded in %.2f s%s", entry.name, time.perf_counter() - start,
             f" (inductor graph cache: {cache['hit']} hit, {cache['miss']} miss)" if cache else "")
    entry.infer, entry.io = entry.runner.profiling_infer()


def _unload(entry: _Entry) -> None:
    if entry.runner is not None:
        try:
            entry.runner.deactivate()
        finally:
            entry.runner = entry.infer = None


def _sample(ws, task: Task) -> dict:
    from navigator.execution.stages import stored_sample

    return stored_sample(ws, task.io_names)


def _settings(task: Task, sample: dict, **over):
    from navigator.execution.profiling import ProfileSettings

    prof = task.profile
    settings = ProfileSettings(**(prof.settings | over))
    if settings.batch_sizes == [0] and prof.batch_dim is not None:   # static shapes: the sample's batch
        own = next(iter(sample.values())).shape[prof.batch_dim]
        settings.batch_sizes, settings.max_batch_size = [own], max(own, settings.max_batch_size)
    return settings


def _screen(ws, entry: _Entry, keep: bool, busy: float | None = None) -> dict:
    """``entry``'s screening; as on a loaded machine when other processes kept ``busy`` cores busy
    (not None: :func:`navigator.execution.profiling.screen_settings`)."""
    from navigator.execution.profiling import MIN_WINDOWS, screen_settings, sweep

    task = entry.task
    sample = _sample(ws, task)
    full = _settings(task, sample)
    settings = _settings(task, sample, **screen_settings(busy), budget_s=min(full.budget_s, SCREEN_BUDGET_S))
    if busy is not None:
        log.info("screening %s at %d windows a batch size, largest first: other processes kept %.1f cores busy",
                 entry.name, MIN_WINDOWS, busy)
    _load(ws, entry)
    try:
        outcome = sweep(entry.infer, sample, task.profile.batch_dim, settings)
    finally:
        if not keep:
            _unload(entry)
    for r in outcome.results:
        r["io"] = entry.io
        log.info("screening %s, batch %d: %.1f/s (spread %.3f)", entry.name, r["batch_size"], r["throughput"],
                 r["spread"])
    return {"stable": outcome.stable, "results": outcome.results, "reason": outcome.reason, "phase": "screening"}


def _race_record(entry: _Entry, result: racing.RaceResult) -> dict:
    from navigator.execution.profiling import percentiles

    e = entry.entrant
    thr, spread = e.figure()
    last = e.windows[-racing.RACE_LAST:]
    figure = {"batch_size": e.batch_size, "throughput": round(thr, 3),
              "latency_ms": percentiles([x for w in last for x in w.latencies]),
              "spread": round(spread, 4) if spread is not None else None, "io": entry.io, "raced": True}
    record = dict(entry.record)
    record["results"] = [figure if r["batch_size"] == e.batch_size else r for r in record["results"]]
    record["phase"] = "race"
    record["stable"] = not racing.unstable(spread)
    if e.out:   # dropped, whether or not the race settled among the others
        record["reason"] = f"{racing.OUT}{e.out}"
    elif not result.settled:
        record["reason"] = result.reason
    else:
        record["reason"] = f"won the race after {len(e.windows)} interleaved windows"
    return record


def run_race(ws, events, job: Job) -> int:
    from navigator.errors import error_text
    from navigator.execution.logs import StageLog

    entries = [_Entry(i, task, spec) for i, task in enumerate(job.tasks) for spec in task.runners]
    peers = [_Peer(p) for p in job.race_peers]
    if not entries and len(peers) < 2:
        return 0
    keep = _artifact_bytes(ws, job.tasks) <= KEEP_LOADED_BYTES
    settings = job.tasks[0].profile.settings if job.tasks else peers[0].peer.settings
    budget = settings.get("budget_s", 20.0)
    total_budget = budget * (len(job.tasks) + len({p.key for p in peers}))
    start = time.perf_counter()
    began = last = CpuUse.now(job.parent_pid)   # the run's own processes are not "others"
    busy = job.busy   # the load over the run so far, until one over a screening is read
    for entry in entries:
        key, rkey = entry.task.key, entry.spec.key
        events.emit(Event(task=entry.index, key=key, stage="profile", runner=rkey, event="start"))
        t0 = time.perf_counter()
        now = CpuUse.now(job.parent_pid)
        if now.wall - last.wall >= LOAD_SAMPLE_S:   # the load over the screening before this one
            busy, last = busy_cores(last, now), now
        with StageLog(ws.stage_log(key, "profile")):
            try:
                entry.record = _screen(ws, entry, keep, busy)
            except Exception as e:
                log.exception("profile of %s failed", entry.name)
                _unload(entry)
                result = {"status": "failed", "reason": error_text(e)}
            else:
                result = dict(entry.record)
        result.setdefault("status", "ok")
        entry.duration_s = result["duration_s"] = round(time.perf_counter() - t0, 4)
        events.emit(Event(task=entry.index, key=key, stage="profile", runner=rkey, event="end", result=result))
        if entry.record and entry.record["results"]:
            entry.entrant = _entrant(entry.name, entry.record["results"])
    # the load over the screenings (the race's own windows alternate with the calling process's)
    busy_screening = busy_cores(began)
    screened = [e for e in entries if e.entrant is not None] + peers
    names = {e.entrant.name: e for e in screened}
    chosen = [names[c.name] for c in racing.contenders([e.entrant for e in screened])]
    for entry in entries:
        if entry not in chosen:
            _unload(entry)
    held = sum(_artifact_bytes(ws, [e.task]) for e in chosen if isinstance(e, _Entry))
    try:
        records = {e.name: e.record for e in [*entries, *peers] if e.record}
        if len(chosen) >= 2 and held > KEEP_LOADED_BYTES:
            events.emit(Event(task=chosen[0].index, key="race", stage="race", runner=None, event="start"))
            events.emit(Event(task=chosen[0].index, key="race", stage="race", event="end", result={
                "status": "skipped", "duration_s": 0.0, "contenders": [e.name for e in chosen],
                "reason": f"not raced: its {len(chosen)} contenders would hold {held / 2**30:.2f} GiB of artifacts in "
                          "memory at once; their screening figures stand"}))
        elif len(chosen) >= 2:
            left = max(1.0, min(budget, total_budget - (time.perf_counter() - start)))
            records |= _run_race(ws, events, chosen, left, settings, busy_screening)
        pick = _best_pick([*entries, *peers], records, set(job.not_best))
        if isinstance(pick, _Entry) and keep:   # a live module's runner (a peer) lives in the calling process
            _tune_leader(ws, events, pick, records[pick.name],
                         max(1.0, min(budget, total_budget - (time.perf_counter() - start))), settings,
                         busy_screening, job.parent_pid)
    finally:
        for entry in entries:
            _unload(entry)
    return 0


def _run_race(ws, events, chosen: list, budget_s: float, settings: dict, busy: float | None = None) -> dict:
    """The race of ``chosen``, its events; returns each contender's profile record by name (none
    when the race failed: the screening figures stand). ``busy``: cores other processes kept busy
    over the screenings when that loaded the machine (:data:`RACE_LOADED_ROUNDS`)."""
    from navigator.errors import error_text

    events.emit(Event(task=chosen[0].index, key="race", stage="race", runner=None, event="start"))
    t0 = time.perf_counter()
    try:
        result = _race(ws, events, chosen, budget_s, settings, busy)
    except Exception as e:
        log.exception("the race failed")
        events.emit(Event(task=chosen[0].index, key="race", stage="race", event="end",
                          result={"status": "failed", "reason": error_text(e),
                                  "duration_s": round(time.perf_counter() - t0, 4)}))
        return {}   # the screening figures stand
    race_s = time.perf_counter() - t0
    summary = {"status": "ok", "duration_s": round(race_s, 4), "leader": result.leader,
               "settled": result.settled, "rounds": result.rounds, "contenders": [e.name for e in chosen],
               "reason": None if result.settled else result.reason}
    events.emit(Event(task=chosen[0].index, key="race", stage="race", event="end", result=summary))
    records = {}
    for entry in chosen:
        record = _race_record(entry, result) | {"status": "ok",
                                                "duration_s": round(entry.duration_s + race_s / len(chosen), 4)}
        events.emit(Event(task=entry.index, key=entry.key, stage="profile", runner=entry.rkey, event="end",
                          result=record))
        entry.duration_s, records[entry.name] = record["duration_s"], record
    return records


def _best_pick(entries: list, records: dict, not_best: set):
    """The (format, runner) best will pick from these figures: the highest peak (a raced figure
    first, as ProfileStep.peak) among those of a format a server runs as verified, one the race
    dropped below the eligible pairs it kept (:func:`racing.ranking`, as outcome.select_best); None
    without one."""
    from navigator.workspace.status import peak_of

    eligible = [e for e in entries if e.name in records and e.key not in not_best and records[e.name].get("results")]
    figures = []
    for e in eligible:
        record = records[e.name]
        peak = peak_of(record["results"])
        figures.append((peak["throughput"], racing.standing(bool(peak.get("raced")), record.get("reason"))))
    keys = racing.ranking(figures)
    return max(zip(keys, eligible), key=lambda ke: ke[0], default=(None, None))[1]


def _tune_leader(ws, events, entry: _Entry, record: dict, budget_s: float, settings: dict,
                 busy: float | None, root: int | None = None) -> None:
    """The winner's runtime options (:mod:`navigator.execution.tuning`), in its profile record;
    none when other processes (outside ``root``'s tree) kept ``busy`` cores busy meanwhile (not
    None: the machine is loaded), or loaded it during the tuning."""
    from navigator.execution import tuning

    if not tuning.tunable(entry.task, entry.spec, record):
        return
    if busy is not None:
        log.info("%s not tuned: other processes kept %.1f cores busy", entry.name, busy)
        out = record | {"status": "ok", "duration_s": entry.duration_s, "tuning": tuning.not_tuned_under_load(busy)}
        events.emit(Event(task=entry.index, key=entry.key, stage="profile", runner=entry.rkey, event="end", result=out))
        return
    t0 = time.perf_counter()
    if entry.runner is None:
        _load(ws, entry)
    out = tuning.tune_profile(ws, entry.task, entry.spec, entry.infer, record, budget_s, settings, root=root)
    if out is None:
        return
    out["status"] = "ok"
    out["duration_s"] = round(entry.duration_s + time.perf_counter() - t0, 4)
    events.emit(Event(task=entry.index, key=entry.key, stage="profile", runner=entry.rkey, event="end", result=out))


def _race(ws, events, chosen: list, budget_s: float, settings: dict, busy: float | None = None) -> racing.RaceResult:
    """Load the contenders (unless still loaded), warm each up again, and race them; a peer's
    windows come from the calling process. The race logs to the race worker's own log
    (jobs/race.log)."""
    from navigator.execution.profiling import ProfileSettings, batch_of

    feeds = {}
    for entry in chosen:
        if isinstance(entry, _Peer):
            continue
        if entry.runner is None:
            _load(ws, entry)
        task = entry.task
        sample = _sample(ws, task)
        feeds[entry.name] = sample if task.profile.batch_dim is None else \
            batch_of(sample, task.profile.batch_dim, entry.entrant.batch_size)
        for _ in range(2):
            entry.infer(feeds[entry.name])   # warm up again: other runners ran since its screening
    window_settings = ProfileSettings(**settings)
    window_settings.window_s = min(window_settings.window_s, RACE_WINDOW_S)
    rewarm = rewarm_for([e.spec.runner if isinstance(e, _Entry) else None for e in chosen])
    by_name = {e.name: e for e in chosen}
    caller = _Caller(ws, events) if any(isinstance(e, _Peer) for e in chosen) else None

    def measure(ent: racing.Entrant) -> racing.Window:
        entry = by_name[ent.name]
        if isinstance(entry, _Peer):
            lat = caller.window(entry, ent.batch_size, window_settings)
        else:
            lat = race_window(entry.infer, feeds[ent.name], window_settings, rewarm)
        return racing.Window(batch_size=ent.batch_size, latencies=lat)

    try:
        result = racing.race([e.entrant for e in chosen], measure, budget_s,
                             max_rounds=RACE_MAX_ROUNDS if busy is None else RACE_LOADED_ROUNDS)
    finally:
        if caller is not None:
            caller.close()
    if busy is not None and result.capped:
        result.reason = (f"{result.reason}: other processes kept {busy:.1f} of the {affinity_cores()} cores busy, "
                         "so more rounds would measure their load (NAVIGATOR_IGNORE_LOAD=1 races on)")
    log.info("race of %s: leader %s after %d rounds, %s", ", ".join(e.name for e in chosen), result.leader,
             result.rounds, "settled" if result.settled else result.reason)
    return result
