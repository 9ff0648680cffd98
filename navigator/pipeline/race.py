"""The race phase of a run (:mod:`navigator.execution.race_job`): format workers convert and
verify only; once every one of them ended, a single worker profiles every verified
(format, runner) still to measure, alone on the machine -- screening all, racing the
contenders with interleaved windows. Its events are applied like a format worker's.

Not raced: ``--no-race`` (each format worker sweeps its own runners to full depth, as
before), ``--no-profile``, and jobs run in the calling process (a live module: its runners
need the object, which no worker has), which are screened there (:func:`screen_here`), on
the calling thread once no worker runs (navigator.pipeline.dispatch.run_job_in_process)."""

from __future__ import annotations

import logging
import os
import time

from navigator.execution.jobs import Job, Task
from navigator.pipeline import progress
from navigator.pipeline.context import RunContext
from navigator.pipeline.events import apply_event, explain_skips, with_tail

log = logging.getLogger(__name__)

PENDING = "pending: measured in the race once every format is verified"


def queue_for_race(ctx: RunContext, item, runner_keys: list[str]) -> None:
    """Note ``item``'s runners for the race; their profile steps say they wait for it."""
    _, before = ctx.race_pending.get(item.key, (item, []))
    ctx.race_pending[item.key] = (item, before + [k for k in runner_keys if k not in before])
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


def race_tasks(ctx: RunContext) -> list[Task]:
    """One task per format with verified runners left to profile: the artifact as converted."""
    from navigator.pipeline.execute import converted_task
    from navigator.pipeline.tasks import format_task

    tasks = []
    for key, (item, runner_keys) in ctx.race_pending.items():
        fs = ctx.status.formats[key]
        ok = [k for k in runner_keys if fs.runners[k].verify.status == "ok"]
        for k in set(runner_keys) - set(ok):   # not verified: never measured; explain_skips says why
            if fs.runners[k].profile.reason == PENDING:
                fs.runners[k].profile.reason = None
        explain_skips(fs, ctx.config)
        if fs.convert.status != "ok" or not ok:
            continue
        task = converted_task(ctx, item, format_task(ctx, item, fs))
        task.verify, task.convert = None, None
        task.runners = [r for r in task.runners if r.key in ok]
        tasks.append(task)
    return tasks


def run_race(ctx: RunContext) -> None:
    """Profile the pending runners in the race worker; a crash fails the profiles it did not
    report, naming the one it was measuring."""
    from navigator.execution import isolation

    tasks = race_tasks(ctx)
    ctx.race_pending.clear()
    if not tasks:
        return
    job = Job(workspace=str(ctx.ws.root), events=str(ctx.ws.events_file("race")), tasks=tasks, race=True,
              parent_pid=os.getpid())
    ctx.process_starts += 1
    start = time.perf_counter()
    outcome = isolation.run_worker(job, ctx.ws.job_file("race"), ctx.ws.race_log, stage_timeout_s=ctx.config.timeout,
                                   on_event=lambda e: _apply(ctx, e), memory_limit_gb=ctx.config.worker_memory_gb,
                                   forkserver=ctx.forkserver)
    ctx.timings.setdefault("workers", []).append(("race", time.perf_counter() - start, {}))
    log.info("race worker: %.2f s, peak RSS %s MiB", time.perf_counter() - start, outcome.peak_rss_mb)
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


def _apply(ctx: RunContext, event) -> None:
    if event.stage == "race":   # the race itself: on the console, not a step of any format
        if event.event == "start":
            progress.opened(ctx, "contenders", "race", None)
            ctx.reporter.step_start("contenders", "race", None)
        else:
            progress.closed(ctx, "contenders", "race", None)
            result = dict(event.result)
            if result.get("status") == "ok":
                n = len(result.get("contenders") or [])
                result["reason"] = (f"{n} contenders, {result.get('rounds')} rounds of interleaved windows: "
                                    + (f"{result.get('leader')} ahead beyond the spread" if result.get("settled")
                                       else result.get("reason") or "not separated"))
            ctx.reporter.step_end("contenders", "race", None, result)
        return
    apply_event(ctx, event)
