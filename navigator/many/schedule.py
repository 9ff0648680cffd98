"""Running the manifest's models: as Ray tasks (:func:`run_on_ray`), or one after another in
this process when Ray is not installed (:func:`run_in_order`).

On Ray, a model is one task per phase (:mod:`navigator.many.node`): ``build`` then ``measure``
when it is profiled, else ``full``. Ray decides where each runs from its resource requests
(:mod:`navigator.many.cluster`); this loop only decides what to submit: measurements of built
models before new models, at most ``--max-parallel`` models at a time. Ray's worker processes
run one phase after another, as one Python process runs ``navigator.convert`` several times (the
pipeline's own work happens in its worker subprocesses; CUDA is never initialised in the process
that runs the pipeline), except for a ``file.py:factory`` model: importing it puts its folder on
``sys.path`` and its neighbours in ``sys.modules``, so its phases get a fresh worker process each
(``max_calls=1``). No Ray-side retries: when a task's node or worker dies (``NodeDiedError``,
``WorkerCrashedError`` …) the loop submits the phase again, up to the manifest's ``retries``, and
the new attempt records the lost one in placement.yaml before resuming the workspace, which keeps
every step the lost attempt finished.

Ctrl-C: the run's stop file appears in the shared workdir and every running task gets a
KeyboardInterrupt from it (:class:`navigator.many.node.StopWatch`; not ``ray.cancel``, whose race
with a task's reply aborts Ray's driver), which the pipeline turns into ``state: interrupted``
with its workers stopped. Tasks still queued return at once without running; tasks that do not
end within :data:`STOP_GRACE_S` are killed (their status.yaml then says ``running``, which a
re-run also resumes).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from navigator.many import placement
from navigator.many.cluster import short
from navigator.many.manifest import Manifest, ModelEntry
from navigator.many.outcome import ModelOutcome

log = logging.getLogger(__name__)

POLL_S = 0.5
STOP_GRACE_S = 30.0


def phases_of(entry: ModelEntry, parallel: bool = True) -> list[str]:
    return ["build", "measure"] if parallel and entry.profiles else ["full"]


@dataclass
class _Job:
    outcome: ModelOutcome
    phases: list[str]
    phase: int = 0              # index into phases
    tries: int = 0              # attempts of the current phase
    retry_of: int | None = None
    retry_reason: str | None = None

    @property
    def entry(self) -> ModelEntry:
        return self.outcome.entry

    @property
    def current(self) -> str:
        return self.phases[self.phase]


def request(run: dict, job: _Job) -> dict:
    """What a node needs to run one phase (plain data: it travels to the task)."""
    e = job.entry
    return {"name": e.name, "model": e.model, "options": e.options, "workdir": str(run["workdir"]),
            "where": e.where, "phase": job.current, "attempt": job.outcome.attempts, "retry_of": job.retry_of,
            "retry_reason": job.retry_reason, "run_id": run["id"], "token": run.get("token"), "stop": run.get("stop"),
            "navigator_version": run["navigator_version"]}


def _absorb(job: _Job, result: dict, reporter) -> bool:
    """Take a phase's result into the model's outcome; True when the model goes on to its next phase."""
    o = job.outcome
    where = result.get("where") or {}
    node = short(str(where.get("node", "local")))
    if node not in o.nodes:
        o.nodes.append(node)
    status = result.get("status")
    o.exit_code = result.get("exit_code")
    o.failures = list(result.get("failures") or [])
    o.message = result.get("message")
    if status == "interrupted":
        o.interrupted = True
        return False
    if status != "ok":
        reporter.step_end(o.name, job.current, f"node {node}", {"status": "failed", "reason": o.message,
                                                                "duration_s": result.get("wall_s")})
        return False
    o.phases.append(job.current)
    failed = len(o.failures)
    reporter.step_end(o.name, job.current, f"node {node}",
                      {"status": "ok", "duration_s": result.get("wall_s"),
                       "reason": f"{failed} target(s) failed" if failed else None})
    return job.phase + 1 < len(job.phases)


def run_in_order(manifest: Manifest, run: dict, reporter) -> list[ModelOutcome]:
    """Without Ray: each model in this process, one at a time, in one ``full`` phase. Ctrl-C
    stops the model at hand (its workspace says ``interrupted``) and the ones after it."""
    from navigator.many.node import run_phase

    outcomes = [ModelOutcome(entry=e) for e in manifest.models]
    for o in outcomes:
        job = _Job(outcome=o, phases=["full"])
        o.attempts += 1
        reporter.step_start(o.name, "full", None)
        try:
            result = run_phase(request(run, job))
        except KeyboardInterrupt:     # between two of run_phase's own guards
            o.interrupted = True
        else:
            _absorb(job, result, reporter)
        if o.interrupted:
            run["interrupted"] = True
            break
    return outcomes


def _lost_errors():
    import ray.exceptions as rex

    return (rex.NodeDiedError, rex.WorkerCrashedError, rex.LocalRayletDiedError, rex.OutOfMemoryError,
            rex.ObjectLostError)


def _remote(ray, *, fresh_worker: bool = False):
    """The task function, defined here so that no module imports Ray at import time.
    ``fresh_worker``: each call in a worker process of its own (``max_calls=1``; Ray accepts it
    only where the function is declared, not in ``.options()``)."""

    @ray.remote(max_retries=0, **({"max_calls": 1} if fresh_worker else {}))
    def navigator_phase(req: dict) -> dict:
        import ray as ray_here

        from navigator.many.node import here, run_phase

        ctx = ray_here.get_runtime_context()
        cpus = ctx.get_assigned_resources().get("CPU")
        return run_phase(req, where=here(ctx.get_node_id(), ray_here.util.get_node_ip_address()),
                         ray_threads=str(max(int(cpus), 1)) if cpus is not None else None)

    return navigator_phase


class Heartbeat:
    """A line every ``every_s`` seconds for each task running longer than that, as a single
    convert prints for its long steps: a convert-many build is never silent for minutes."""

    def __init__(self, reporter, every_s: float, clock=time.monotonic):
        self.reporter, self.every_s, self.clock = reporter, every_s, clock
        self._since: dict = {}
        self._told: dict = {}

    def started(self, task) -> None:
        self._since[task] = self.clock()

    def ended(self, task) -> None:
        self._since.pop(task, None)
        self._told.pop(task, None)

    def tick(self, running: dict) -> None:
        """``running``: task -> (model name, phase)."""
        now = self.clock()
        for task, (name, phase) in running.items():
            since = self._since.get(task, now)
            if now - since >= self.every_s and now - self._told.get(task, since) >= self.every_s:
                self._told[task] = now
                self.reporter.progress(name, phase, None, now - since)


def run_on_ray(manifest: Manifest, run: dict, reporter, *, max_parallel: int | None = None) -> list[ModelOutcome]:
    import ray

    from navigator.many.cluster import task_resources
    from navigator.pipeline.progress import EVERY_S

    fn = _remote(ray)
    fn_fresh = _remote(ray, fresh_worker=True)   # factories: their import puts folders on sys.path, modules
    lost_errors = _lost_errors()
    outcomes = [ModelOutcome(entry=e) for e in manifest.models]
    waiting = deque(_Job(outcome=o, phases=phases_of(o.entry)) for o in outcomes)
    ready: deque[_Job] = deque()     # models whose next phase (measure) or retry may go now
    inflight: dict = {}
    beat = Heartbeat(reporter, EVERY_S)
    limit = max_parallel or len(outcomes)

    def submit(job: _Job) -> None:
        job.outcome.attempts += 1
        job.tries += 1
        opts = task_resources(job.entry.resources, job.current)
        task_fn = fn_fresh if job.entry.is_factory else fn   # in sys.modules: a worker of its own
        ref = task_fn.options(name=f"navigator {job.entry.name} {job.current}", **opts).remote(request(run, job))
        inflight[ref] = job
        beat.started(ref)
        reporter.step_start(job.entry.name, job.current, None)

    try:
        while waiting or ready or inflight:
            while ready and len(inflight) < limit:
                submit(ready.popleft())
            while waiting and len(inflight) < limit:
                submit(waiting.popleft())
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_S)
            beat.tick({ref: (job.entry.name, job.current) for ref, job in inflight.items()})
            for ref in done:
                job = inflight.pop(ref)
                beat.ended(ref)
                try:
                    result = ray.get(ref)
                except lost_errors as e:
                    _lost(job, e, manifest.retries, ready, reporter, run)
                    continue
                except ray.exceptions.RayError as e:   # our task function raised: a bug, reported as one line
                    text = " ".join(str(e).split())
                    job.outcome.exit_code, job.outcome.message = 3, f"internal error in the task: {text[-300:]}"
                    continue
                if _absorb(job, result, reporter):
                    job.phase, job.tries, job.retry_of, job.retry_reason = job.phase + 1, 0, None, None
                    ready.append(job)
    except KeyboardInterrupt:
        run["interrupted"] = True
        _stop(ray, inflight, reporter, run)
        for job in list(waiting) + list(ready):
            job.outcome.interrupted = job.outcome.interrupted or bool(job.outcome.phases)
    return outcomes


def _lost(job: _Job, error: BaseException, retries: int, ready: deque, reporter, run: dict) -> None:
    o = job.outcome
    first = str(error).strip().split(". ")[0]
    reason = f"lost: {type(error).__name__}: {' '.join(first.split())[:300]}"
    o.lost += 1
    number = o.attempts
    if job.tries <= retries:
        reporter.warn(f"{o.name}: {job.current} attempt {number} {reason}; retrying ({job.tries} of {retries})")
        job.retry_of, job.retry_reason = number, reason
        ready.append(job)
        return
    placement.end_attempt(_ws(run, o), number, "lost", reason)
    o.exit_code, o.message = 3, f"{job.current} {reason}; no retries left (retries: {retries})"
    reporter.step_end(o.name, job.current, None, {"status": "failed", "reason": o.message})


def _ws(run: dict, o: ModelOutcome):
    from navigator.workspace.layout import Workspace

    return Workspace.for_model(run["workdir"], o.name)


def _stop(ray, inflight: dict, reporter, run: dict) -> None:
    """Ctrl-C: interrupt every running task, wait for them to record it, kill the rest."""
    if not inflight:
        return
    reporter.info(f"interrupted: stopping {len(inflight)} task(s)")
    refs = list(inflight)
    try:
        Path(run["stop"]).write_text(run["id"], encoding="utf-8")
    except (KeyError, OSError):    # no stop file: Ray's own interrupt, racy as it is
        for ref in refs:
            ray.cancel(ref, force=False)
    deadline = time.monotonic() + STOP_GRACE_S
    pending = refs
    try:
        while pending and time.monotonic() < deadline:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
    except KeyboardInterrupt:       # a second Ctrl-C: stop waiting
        pass
    for ref in pending:
        ray.cancel(ref, force=True)
    for job in inflight.values():
        ws = _ws(run, job.outcome)
        started = any(a.get("attempt") == job.outcome.attempts for a in placement.attempts(ws))
        # a task still queued never began: its model was not run (unless an earlier phase was)
        job.outcome.interrupted = started or bool(job.outcome.phases)
        placement.end_attempt(ws, job.outcome.attempts, "interrupted")
