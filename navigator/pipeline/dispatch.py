"""Running a job: in a worker process (:func:`run_job`), or, for a live source and for
converters defined in the user's ``__main__``, in the calling process
(:func:`run_job_in_process`), with the same events and the same per-stage timeout
as far as a thread allows."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from navigator.execution.jobs import Job, Task, timeout_reason
from navigator.execution.logs import library_logs_to_navigator
from navigator.execution.worker import EXIT_DISK_FULL
from navigator.pipeline.context import RunContext
from navigator.pipeline.diskfull import WorkspaceFull, check_disk_full, says_disk_full
from navigator.pipeline.events import apply_event, finish_crashed, stage_durations
from navigator.pipeline.race import keep_for_race
from navigator.pipeline.timeouts import IN_PROCESS_GRACE_S, StageTimeout, async_raise, timeout_here
from navigator.workspace.status import ProfileStep, VerifyStep

log = logging.getLogger(__name__)


def run_job(ctx: RunContext, name: str, tasks: list[Task], log_path: Path, sys_path: list[str]) -> None:
    """``tasks`` in one worker process, its events applied to the record as they come."""
    from navigator.execution import isolation

    job = Job(workspace=str(ctx.ws.root), events=str(ctx.ws.events_file(name)), tasks=tasks, sys_path=sys_path,
              parent_pid=os.getpid())
    ctx.book.process_starts += 1
    start = time.perf_counter()

    def on_event(event) -> None:
        with ctx.par.locked():
            apply_event(ctx, event)

    with ctx.par.unlocked(), ctx.par.worker_slot():   # other formats' threads apply their events meanwhile
        outcome = isolation.run_worker(job, ctx.ws.job_file(name), log_path, stage_timeout_s=ctx.config.timeout,
                                       on_event=on_event, memory_limit_gb=ctx.config.worker_memory_gb,
                                       cancel=ctx.par.cancel, forkserver=ctx.forkserver)
    ctx.book.timings.setdefault("workers", []).append((name, time.perf_counter() - start, stage_durations(outcome)))
    log.info("worker %s: %.2f s, peak RSS %s MiB", name, time.perf_counter() - start, outcome.peak_rss_mb)
    for task in tasks:
        fs = ctx.status.formats.get(task.key)
        if task.kind == "format" and fs is not None and outcome.peak_rss_mb is not None:
            fs.peak_rss_mb = max(fs.peak_rss_mb or 0.0, outcome.peak_rss_mb)
    if outcome.returncode == EXIT_DISK_FULL:
        raise WorkspaceFull(ctx.ws, f"the worker of {name} could not write its events: No space left on device")
    if outcome.reason:
        log.warning("worker %s: %s", name, outcome.reason)
        if says_disk_full(outcome.log_tail):
            raise WorkspaceFull(ctx.ws, f"the worker of {name} stopped: {outcome.reason}")
        finish_crashed(ctx, tasks, outcome)
    check_disk_full(ctx, tasks)


def run_job_in_process(ctx: RunContext, name: str, tasks: list[Task]) -> None:
    """A job run by this process (a live source, a converter of the user's __main__):
    the same code and events as a worker, without its process isolation or memory
    limit; the per-stage timeout is enforced as far as a thread allows
    (:func:`_run_in_thread`). CUDA runners are skipped: this process never
    initialises CUDA."""
    events = ctx.ws.events_file(name)
    events.parent.mkdir(parents=True, exist_ok=True)
    events.write_text("")
    kept = []
    for task in tasks:
        if task.kind == "format":
            fs = ctx.status.formats[task.key]
            fs.isolated = False
            for spec in [r for r in task.runners if r.device != "cpu"]:
                rs = fs.runners[spec.key]
                why = ("a live module runs in the calling process, which never initialises CUDA; pass "
                       "path/to/file.py:factory (CLI) so a worker can rebuild it on the GPU")
                rs.verify = VerifyStep(status="skipped", reason=why)
                rs.profile = ProfileStep(status="skipped", reason=why)
            task = Task.from_dict(task.to_dict())
            task.runners = [r for r in task.runners if r.device == "cpu"]
        kept.append(task)
    job = Job(workspace=str(ctx.ws.root), events=str(events), tasks=kept, live=ctx.live,
              measure_later=[] if any(t.profile is not None for t in kept) else None)
    start = time.perf_counter()
    if ctx.par.in_process is None:
        with library_logs_to_navigator():
            outcome = _run_in_thread(ctx, name, job)
        _measure_here(ctx, job, outcome)
    else:   # parallel formats: one in-process job at a time (torch's tracing state is global)
        with ctx.par.unlocked():
            ctx.par.in_process.acquire()
        try:
            with library_logs_to_navigator():
                outcome = _run_in_thread(ctx, name, job)
            _measure_here(ctx, job, outcome)
        finally:
            ctx.par.in_process.release()
    ctx.book.timings.setdefault("workers", []).append((f"{name} (in process)", time.perf_counter() - start,
                                                   stage_durations(outcome)))
    if outcome.reason:
        log.warning("in-process job %s: %s", name, outcome.reason)
        finish_crashed(ctx, kept, outcome)
    check_disk_full(ctx, kept)


def _measure_here(ctx: RunContext, job: Job, outcome) -> None:
    """The profiles the in-process job left (``Job.measure_later``), measured on the thread that
    runs the scheduler -- the one whose OpenMP team torch already uses -- once the job's thread
    ended, with no worker running (``Parallel.measure_gate``). From a second thread, or beside
    one whose OpenMP team is still alive, GNU OpenMP stops busy-waiting and torch measured at
    about half its speed (:class:`navigator.pipeline.context.CallerCalls`). --timeout bounds each
    profile as in a worker, as far as a thread can be stopped
    (:func:`navigator.pipeline.timeouts.timeout_here`). A job whose thread was stopped (a later verify
    ran past --timeout) still has its earlier runners measured; one whose thread was abandoned leaves
    them to finish_crashed (it may still use them)."""
    from navigator.execution import worker
    from navigator.execution.isolation import EventTail

    deferred = job.measure_later
    if not deferred:
        return
    if "abandoned" in (outcome.reason or ""):
        return
    tail = EventTail(Path(job.events))
    tail.read()   # what the job's thread wrote was applied already
    busy = ctx.race.loaded()   # a screening here is adapted to the load (profiling.screen_settings)
    for _, task, *_ in deferred:
        if task.profile is not None and task.profile.screen:
            task.profile.loaded = busy

    def apply_new() -> None:
        with ctx.par.locked():
            for event in tail.read():
                outcome.events.append(event)
                apply_event(ctx, event)

    def measure() -> None:
        events = worker.Events(job.events, on_emit=apply_new)
        try:
            with ctx.par.measure_gate():
                try:
                    with timeout_here(ctx.config.timeout, tail):
                        worker.measure_deferred(ctx.ws, events, deferred, keep=lambda e: keep_for_race(ctx, e))
                except StageTimeout:
                    _timed_out_here(ctx, events, deferred)
        finally:
            events.close()

    with ctx.par.unlocked():   # the scheduler's thread applies the events under the lock
        ctx.par.on_caller(measure)


def _timed_out_here(ctx: RunContext, events, deferred: list) -> None:
    """End the profile that ran past --timeout on the calling thread, and those after it."""
    from navigator.execution.jobs import Event

    limit = ctx.config.timeout
    log.warning("a profile measured in the calling process ran past --timeout %g s: stopped", limit)
    for n, (i, task, spec, _runner, _io) in enumerate(deferred):
        reason = (timeout_reason(limit, "profile", where="in the calling process") if n == 0 else
                  f"not run: an earlier profile {timeout_reason(limit)}")
        if n:
            events.emit(Event(task=i, key=task.key, stage="profile", runner=spec.key, event="start"))
        events.emit(Event(task=i, key=task.key, stage="profile", runner=spec.key, event="end",
                          result={"status": "failed", "reason": reason}))


def _run_in_thread(ctx: RunContext, name: str, job: Job):
    """Run an in-process job in a thread of its own and watch it as isolation.run_worker
    watches a worker: events are applied as they come, and a stage running past
    --timeout gets :class:`StageTimeout` raised in its thread. Python code stops at its
    next bytecode; a thread stuck in native code (a C++ export, a kernel, a blocking
    call) cannot be stopped from outside: after IN_PROCESS_GRACE_S it is abandoned
    (a daemon thread, its CPU and memory held until the process exits) and the run
    goes on. Returns an isolation.WorkerOutcome."""
    import threading

    from navigator.execution import worker
    from navigator.execution.isolation import POLL_S, EventTail, WorkerOutcome

    box: dict = {}

    def target() -> None:
        try:
            box["code"] = worker.run_job(job)
        except BaseException as e:   # noqa: B902 - handed to the watching thread
            box["error"] = e

    thread = threading.Thread(target=target, name=f"navigator-job-{name}", daemon=True)
    outcome = WorkerOutcome(returncode=None)
    tail = EventTail(Path(job.events))
    open_stage = None
    timed_out = None
    abandoned = False
    limit = ctx.config.timeout
    start = time.monotonic()
    thread.start()
    try:
        while True:
            alive = thread.is_alive()
            for event in tail.read():
                outcome.events.append(event)
                apply_event(ctx, event)
            open_stage = tail.open_stage
            if not alive:
                break
            now = time.monotonic()
            late = tail.overdue(limit, now) if timed_out is None else None
            if late is not None:
                timed_out = (now, late)
                log.warning("in-process stage %s of %s ran past --timeout %g s: stopping its thread",
                            late.stage, late.key, limit)
                async_raise(thread, StageTimeout)
            elif timed_out is not None and now - timed_out[0] > IN_PROCESS_GRACE_S:
                abandoned = True
                break
            if ctx.par.cancel is not None and ctx.par.cancel.is_set():
                raise KeyboardInterrupt
            with ctx.par.unlocked():   # parallel formats apply their events meanwhile
                thread.join(POLL_S)
    except BaseException:   # Ctrl-C or an error here: stop the job's thread too, as far as it can be
        async_raise(thread, KeyboardInterrupt)
        raise
    outcome.open_stage = open_stage
    outcome.wall_s = time.monotonic() - start
    error = box.get("error")
    if timed_out is not None:
        stage = timed_out[1].stage
        outcome.open_stage = open_stage or timed_out[1]
        outcome.reason = timeout_reason(limit, stage, where="in the calling process")
        if abandoned:
            outcome.reason += (f"; it did not stop within {IN_PROCESS_GRACE_S:g} s (native code cannot be "
                               "interrupted), so its thread was abandoned and keeps running until the process "
                               "exits")
            log.error("in-process job %s: %s", name, outcome.reason)
        else:
            outcome.reason += "; its thread was stopped"
        return outcome
    if error is not None:
        raise error
    return outcome
