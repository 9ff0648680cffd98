"""The worker process: ``python -m navigator._worker JOB.json``.

One worker runs the tasks of one :class:`~navigator.execution.jobs.Job` in order:
a format's convert -> verify -> profile (and, in the first job, the reference
outputs). It reports each stage as an :class:`~navigator.execution.jobs.Event`
line in the job's events file; the parent reads them while the worker runs,
enforces the per-stage timeout and turns a crash or a hang into ``failed`` with
the log tail. Nothing here writes status.yaml: the parent is its only writer.
The same :func:`run_job` serves jobs run in the calling process (live sources).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

from navigator.errors import error_text
from navigator.execution import stages, tuning
from navigator.execution.logs import StageLog
from navigator.execution.jobs import Event, Job, Task

log = logging.getLogger("navigator.worker")

# A worker that cannot write its events because the workspace's filesystem is full exits with this.
EXIT_DISK_FULL = 28
DISK_FULL_ERRNOS = (28, 122)   # ENOSPC, EDQUOT


class Events:
    def __init__(self, path: str, on_emit=None):
        self._f = open(path, "a", buffering=1, encoding="utf-8")
        self._on_emit = on_emit   # in-process: the caller applies each event as it is written

    def emit(self, event: Event) -> None:
        event.t = time.time()
        self._f.write(json.dumps(event.to_dict(), default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        if self._on_emit is not None:
            self._on_emit()

    def close(self) -> None:
        self._f.close()


def _run_stage(events: Events, task_index: int, key: str, stage: str, runner: str | None, fn, log_path: Path) -> dict:
    events.emit(Event(task=task_index, key=key, stage=stage, runner=runner, event="start"))
    start = time.perf_counter()
    with StageLog(log_path):
        try:
            result = fn()
            if hasattr(result, "to_dict"):
                result = result.to_dict()
        except Exception as e:
            from navigator.errors import NavigatorError
            from navigator.runners.base import RunnerUnavailable

            status = "skipped" if isinstance(e, RunnerUnavailable) else "failed"
            if isinstance(e, NavigatorError):
                log.error("%s", e.one_line())
            else:
                log.error("%s failed:\n%s", stage, traceback.format_exc())
            result = {"status": status, "reason": error_text(e)}
    result.setdefault("status", "ok")
    result["duration_s"] = round(time.perf_counter() - start, 4)
    events.emit(Event(task=task_index, key=key, stage=stage, runner=runner, event="end", result=result))
    return result


def _run_format(ws, events: Events, i: int, task: Task, live, measure_later: list | None = None,
                root: int | None = None) -> None:
    from navigator.machine import CpuUse

    io_names = dict(task.io_names)
    # the load over this job's convert and verify shapes the run's only screening (the parent's is
    # over the run before this job; an in-process job's screening takes that one)
    began = CpuUse.now(root) if task.profile is not None and task.profile.screen else None
    if task.convert is not None:
        result = _run_stage(events, i, task.key, "convert", None, lambda: stages.run_convert(ws, task, live),
                            ws.stage_log(task.key, "convert"))
        if result["status"] != "ok":
            return
        io_names.update(result.get("io_names") or {})
        if result.get("static_shapes"):
            task = task.static()
    for spec in task.runners:
        holder = {}

        def verify(spec=spec):
            result, holder["runner"] = stages.run_verify(ws, task, spec, io_names, live)
            return result

        result = _run_stage(events, i, task.key, "verify", spec.key, verify, ws.stage_log(task.key, "verify"))
        runner = holder.get("runner")
        if task.profile is not None and runner is not None and result["status"] == "ok":
            if measure_later is not None:   # in-process: measured on the calling thread (measure_deferred)
                measure_later.append((i, task, spec, runner, io_names))
                continue
            _run_stage(events, i, task.key, "profile", spec.key,
                       lambda: tuning.screen_and_tune(ws, task, spec, runner, io_names, root, began),
                       ws.stage_log(task.key, "profile"))
        if runner is not None:
            runner.deactivate()


def measure_deferred(ws, events: Events, deferred: list, keep=None) -> None:
    """The profiles an in-process job left in ``Job.measure_later``, measured by the calling
    thread once the job's thread ended (navigator.pipeline.dispatch says why); each runner
    is deactivated after its profile, or when a Ctrl-C stops them, unless ``keep(entry)``
    takes it after a profile that ended ok (a screening that joins the race)."""
    try:
        while deferred:
            i, task, spec, runner, io_names = deferred[0]
            result = _run_stage(events, i, task.key, "profile", spec.key,
                                lambda: stages.run_profile(ws, task, runner, io_names),
                                ws.stage_log(task.key, "profile"))
            entry = deferred.pop(0)
            if not (keep is not None and result.get("status") == "ok" and keep(entry)):
                runner.deactivate()
    finally:
        for *_, runner, _ in deferred:
            runner.deactivate()


def run_job(job: Job) -> int:
    from navigator.workspace.layout import Workspace

    ws = Workspace(Path(job.workspace))
    events = Events(job.events)
    if job.race:
        from navigator.execution.race_job import run_race

        return run_race(ws, events, job)
    for i, task in enumerate(job.tasks):
        if task.kind == "prepare":   # a factory source, opened here rather than in the calling process
            from navigator.execution.prepare_job import run_prepare

            result = _run_stage(events, i, task.key, "prepare", None, lambda: run_prepare(task),
                                Path(task.prepare.out).parent / "prepare-stage.log")
            if result["status"] != "ok":
                return 1
            continue
        if task.kind == "reference":
            result = _run_stage(events, i, task.key, "reference", None,
                                lambda: stages.run_reference(ws, task, job.live), ws.reference_log)
            if result["status"] != "ok":
                return 1
            continue
        _run_format(ws, events, i, task, job.live, job.measure_later, job.parent_pid)
    return 0


def _die_with_parent(parent_pid: int | None) -> None:
    """Linux: be killed when the run that started us dies (even by SIGKILL), so no
    orphan keeps writing into a workspace that a resumed run now owns."""
    import signal

    from navigator.execution.processes import parent_death_signal

    if not parent_pid or not parent_death_signal(signal.SIGKILL):
        return
    if os.getppid() != parent_pid:   # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str] | None = None, *, forked: bool = False) -> int:
    """Run the job of ``JOB.json``. ``forked``: this process is a fork server's child
    (navigator.execution.forkserver), which already dies with its server, and the server with the run."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m navigator._worker JOB.json", file=sys.stderr)
        return 2
    job = Job.from_json(Path(argv[0]).read_text(encoding="utf-8"))
    if not forked:
        _die_with_parent(job.parent_pid)
    from navigator.runners import onnxruntime as ort_runner

    ort_runner.MEASURING_SPIN_US = 1000   # this process measures sessions one after another
    for p in reversed(job.sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    logging.basicConfig(level=getattr(logging, job.log_level, logging.INFO), stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run_job(job)
    except OSError as e:   # the events file could not be written: tell the parent by the exit code
        if e.errno in DISK_FULL_ERRNOS:
            print(f"navigator worker: {e}", file=sys.stderr)
            return EXIT_DISK_FULL
        raise
