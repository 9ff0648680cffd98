"""The race phase of a run (:mod:`navigator.execution.race_job`): format workers convert and
verify only; once every one of them ended, a single worker profiles every verified
(format, runner) still to measure, alone on the machine -- screening all, racing the
contenders with interleaved windows. Its events are applied like a format worker's.

Not raced: ``--no-race`` (each format worker sweeps its own runners to full depth, as
before) and ``--no-profile``.

A live module's runners need the object, which no worker has: they are screened in the
calling process (:func:`screen_here`), on the calling thread once no worker runs
(navigator.pipeline.dispatch.run_job_in_process), and kept loaded (:func:`keep_for_race`).
They enter the race as peers (:class:`~navigator.execution.jobs.RacePeer`): when one is a
contender, the race worker asks for each of its windows, and this process measures it on the
calling thread while the worker waits (:func:`_peer_window`) -- the two processes' windows
interleaved as the worker's own are."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from navigator.execution.jobs import Job, PeerWindow, RacePeer, Task, timeout_reason
from navigator.pipeline import progress
from navigator.pipeline.context import RunContext
from navigator.pipeline.events import apply_event, explain_skips, with_tail

log = logging.getLogger(__name__)

PENDING = "pending: measured in the race once every format is verified"


def queue_for_race(ctx: RunContext, item, runner_keys: list[str]) -> None:
    """Note ``item``'s runners for the race; their profile steps say they wait for it."""
    _, before = ctx.race.pending.get(item.key, (item, []))
    ctx.race.pending[item.key] = (item, before + [k for k in runner_keys if k not in before])
    fs = ctx.status.formats[item.key]
    for k in runner_keys:
        fs.runners[k].profile.status, fs.runners[k].profile.reason = "skipped", PENDING


def defer_profile(ctx: RunContext, item, task: Task) -> Task:
    """``task`` without its profile step when the race measures it; its runners are noted."""
    if task.kind != "format" or task.profile is None or not task.profile.race or not task.runners:
        return task
    pairs = sum(len(fs.runners) for fs in ctx.status.formats.values())
    if pairs == 1 and len(task.runners) == 1:   # nothing to race: screened in its own worker, no other start
        task = Task.from_dict(task.to_dict())
        task.profile.race, task.profile.screen = False, True
        task.profile.loaded = ctx.race.loaded()   # the worker reads the load over its own steps when this is None
        return task
    queue_for_race(ctx, item, [r.key for r in task.runners])
    task = Task.from_dict(task.to_dict())
    task.profile = None
    return task


def screen_here(task: Task) -> Task:
    """A live module's task when the run races: its runners need the object, which no worker
    has, so they cannot join the race; they are screened in this process instead (the race's
    screening settings and ``phase: screening``), not swept to full depth."""
    if task.kind != "format" or task.profile is None or not task.profile.race:
        return task
    task = Task.from_dict(task.to_dict())
    task.profile.race, task.profile.screen = False, True
    return task


@dataclass
class LivePeer:
    """A live module's runner screened in this process, kept active until the race ends."""

    task: Task
    spec: Any          # its RunnerTask
    runner: Any        # the active runner
    io_names: dict
    infer: Any = None
    sample: dict | None = None


def keep_for_race(ctx: RunContext, entry) -> bool:
    """Keep a runner of a live module's screening (a ``Job.measure_later`` entry) for the race:
    :func:`run_race` enters it as a peer and deactivates it afterwards."""
    _, task, spec, runner, io_names = entry
    if task.profile is None or not task.profile.screen:
        return False
    ctx.race.peers[f"{task.key} on {spec.key}"] = LivePeer(task, spec, runner, io_names)
    return True


def release_peers(ctx: RunContext) -> None:
    """Deactivate the runners kept for the race."""
    peers, ctx.race.peers = ctx.race.peers, {}
    for peer in peers.values():
        try:
            peer.runner.deactivate()
        except Exception as e:   # one runner's cleanup does not stop the others'
            log.warning("deactivating %s: %s", peer.spec.key, e)


def _race_peers(ctx: RunContext) -> list[RacePeer]:
    """The kept runners whose screening gave figures, as the race job's peers."""
    out = []
    for peer in ctx.race.peers.values():
        prof = ctx.status.formats[peer.task.key].runners[peer.spec.key].profile
        if prof.status != "ok" or not prof.results:
            continue
        record = prof.to_dict()
        out.append(RacePeer(key=peer.task.key, runner=peer.spec.key, duration_s=prof.duration_s or 0.0,
                            profile={k: record.get(k) for k in ("stable", "results", "reason", "phase")},
                            settings=dict(peer.task.profile.settings)))
    return out


def _peer_window(ctx: RunContext, event) -> None:
    """Measure one window of a peer on this thread, as the race worker asked, write it to
    ``race_reply`` and wake the worker. Nothing else runs meanwhile: the worker waits."""
    from navigator.execution.profiling import ProfileSettings, batch_of
    from navigator.execution.isolation import StageClock
    from navigator.execution.race_job import PEER_WAIT_S, race_window
    from navigator.execution.stages import stored_sample
    from navigator.pipeline.timeouts import StageTimeout, timeout_here
    from navigator.workspace.atomic import write_text

    # --timeout (at most the worker's wait) bounds the window as a stage, as far as a thread allows
    limit = min(ctx.config.timeout or PEER_WAIT_S, PEER_WAIT_S)
    try:
        with timeout_here(limit, StageClock(event)):
            peer = ctx.race.peers[f"{event.key} on {event.runner}"]
            if peer.infer is None:
                peer.infer, _ = peer.runner.profiling_infer()
                peer.sample = stored_sample(ctx.ws, peer.io_names)
            batch_dim, size = peer.task.profile.batch_dim, event.result["batch_size"]
            feed = peer.sample if batch_dim is None else batch_of(peer.sample, batch_dim, size)
            reply = PeerWindow(latencies=race_window(peer.infer, feed, ProfileSettings(**event.result["settings"])))
    except StageTimeout:   # a BaseException, as for a stage: the race ends, the run goes on
        log.warning("race window of %s on %s: timed out after %g s", event.key, event.runner, limit)
        reply = PeerWindow(error=timeout_reason(limit))
    except Exception as e:
        log.exception("race window of %s on %s", event.key, event.runner)
        reply = PeerWindow(error=f"{type(e).__name__}: {e}")
    write_text(ctx.ws.race_reply, json.dumps(reply.to_dict()))
    try:
        fd = os.open(ctx.ws.race_wake, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:   # no reader: the worker is gone, which its outcome says
        log.warning("race worker not waiting: %s", e)
        return
    try:
        os.write(fd, b"\n")
    finally:
        os.close(fd)


@contextlib.contextmanager
def peer_channel(ws):
    """The FIFOs of a race with peers (race_job._Caller), made anew -- never a file or link an
    earlier run left at their paths -- and removed afterwards: ``race_wake``, which the worker
    waits on for a peer's window, and ``race_ask``, which wakes this process when the worker asks
    for one. Yields ``race_ask``'s descriptor, held open for reading and writing (the worker's
    non-blocking open finds a reader; :func:`isolation.run_worker`'s ``wake_fd``)."""
    ws.jobs_dir.mkdir(parents=True, exist_ok=True)
    for path in (ws.race_wake, ws.race_ask, ws.race_reply):
        if path.is_symlink() or path.exists():
            path.unlink()
    try:
        os.mkfifo(ws.race_wake, 0o600)
        os.mkfifo(ws.race_ask, 0o600)
        fd = os.open(ws.race_ask, os.O_RDWR | os.O_NONBLOCK)
        try:
            yield fd
        finally:
            os.close(fd)
    finally:
        for path in (ws.race_wake, ws.race_ask):
            path.unlink(missing_ok=True)


def race_tasks(ctx: RunContext) -> list[Task]:
    """One task per format with verified runners left to profile: the artifact as converted."""
    from navigator.pipeline.tasks import converted_task, format_task

    tasks = []
    for key, (item, runner_keys) in ctx.race.pending.items():
        fs = ctx.status.formats[key]
        ok = [k for k in runner_keys if fs.runners[k].verify.status == "ok"]
        for k in set(runner_keys) - set(ok):   # not verified: never measured; explain_skips says why
            if fs.runners[k].profile.reason == PENDING:
                fs.runners[k].profile.reason = None
        explain_skips(fs, ctx.config)
        if fs.convert.status != "ok" or not ok:
            continue
        task = converted_task(ctx, item, format_task(ctx, item, fs))
        task.convert = None   # its verify spec stays: runtime options the tuning keeps are verified with it
        task.runners = [r for r in task.runners if r.key in ok]
        tasks.append(task)
    return tasks


def run_race(ctx: RunContext) -> None:
    """Profile the pending runners in the race worker; a crash fails the profiles it did not
    report, naming the one it was measuring."""
    from navigator.execution import isolation

    try:
        _run_race(ctx, isolation)
    finally:
        release_peers(ctx)


def _run_race(ctx: RunContext, isolation) -> None:
    tasks = race_tasks(ctx)
    ctx.race.pending.clear()
    peers = _race_peers(ctx)
    with contextlib.ExitStack() as stack:
        ask = None
        if peers and (tasks or len(peers) > 1):
            try:
                ask = stack.enter_context(peer_channel(ctx.ws))
            except OSError as e:   # a file system without FIFOs: their screening figures only
                log.warning("the live module's runners are not raced (%s): their screening figures stand", e)
                peers = []
        if not tasks and len(peers) < 2:
            return
        from navigator import formats

        not_best = [t.key for t in tasks if formats.serving_refusal(t.key, ctx.status.formats[t.key])]
        job = Job(workspace=str(ctx.ws.root), events=str(ctx.ws.events_file("race")), tasks=tasks, race=True,
                  parent_pid=os.getpid(), race_peers=peers, not_best=not_best, busy=ctx.race.loaded())
        ctx.book.process_starts += 1
        start = time.perf_counter()
        outcome = isolation.run_worker(job, ctx.ws.job_file("race"), ctx.ws.race_log,
                                       stage_timeout_s=ctx.config.timeout, on_event=lambda e: _apply(ctx, e),
                                       memory_limit_gb=ctx.config.worker_memory_gb, forkserver=ctx.forkserver,
                                       wake_fd=ask)
    ctx.book.timings.setdefault("workers", []).append(("race", time.perf_counter() - start, {}))
    log.info("race worker: %.2f s, peak RSS %s MiB", time.perf_counter() - start, outcome.peak_rss_mb)
    _rewrite_tuned(ctx, tasks)
    if not outcome.reason:
        return
    log.warning("race worker: %s", outcome.reason)
    where = outcome.open_stage
    culprit = f" while measuring {where.key} on {where.runner}" if where is not None and where.runner else ""
    for task in tasks:
        fs = ctx.status.formats[task.key]
        for spec in task.runners:
            rs = fs.runners[spec.key]
            if rs.profile.status == "ok" or rs.profile.reason != PENDING:
                continue
            here = where is not None and where.key == task.key and where.runner == spec.key
            rs.profile.status = "failed"
            rs.profile.reason = (with_tail(outcome.reason, outcome.log_tail) if here else
                                 f"not measured: the race worker stopped{culprit} ({outcome.reason})")
            rs.profile.log = ctx.ws.inner(ctx.ws.race_log)
            ctx.reporter.step_end(task.key, "profile", spec.key, {"status": "failed", "reason": rs.profile.reason})
    ctx.save()


def _rewrite_tuned(ctx: RunContext, tasks: list[Task]) -> None:
    """reproduce.sh of each format whose runner the tuning gave runtime options: it names them."""
    from navigator.pipeline.reproduce import retune

    for task in tasks:
        fs = ctx.status.formats[task.key]
        if any(fs.runners[s.key].profile.options for s in task.runners):
            retune(ctx, task.key, fs, task.runners)


def _apply(ctx: RunContext, event) -> None:
    if event.event == "window":   # the race asks for a window of a peer
        _peer_window(ctx, event)
        return
    if event.stage == "race":   # the race itself: on the console, not a step of any format
        if event.event == "start":
            progress.opened(ctx, "contenders", "race", None)
            ctx.reporter.step_start("contenders", "race", None)
        else:
            progress.closed(ctx, "contenders", "race", None)
            result = dict(event.result)
            if result.get("status") == "ok":
                names = list(result.get("contenders") or [])
                others = [n for n in names if n != result.get("leader")]
                result["reason"] = (f"{len(names)} contenders, {result.get('rounds')} rounds of interleaved windows: "
                                    + (f"{result.get('leader')} ahead of {', '.join(others) or 'the others'} beyond "
                                       "the spread" if result.get("settled") else result.get("reason") or
                                       "not separated"))
            ctx.reporter.step_end("contenders", "race", None, result)
        return
    apply_event(ctx, event)
