"""What runs on a node: one phase of one model, through the single-model pipeline.

A phase is ``navigator.pipeline.run`` on the model with its manifest options, so the
workspace is exactly what ``navigator convert`` writes:

* ``build``: the model's options, with profiles deferred (``pipeline.run(defer_profiles=True)``:
  export, convert and verify; a profile of an earlier run whose inputs are unchanged is kept,
  any other is left ``skipped``) and no Triton repository yet. Runs beside other models' builds.
* ``measure``: the model's options again (less ``force``): a re-run that resumes the build,
  reusing every unchanged conversion and kept profile, then verifies and profiles the rest. It
  runs alone on its node, so its measurements share the machine with nothing of ours. (A
  verdict whose profile the build deferred is reused, and the profile measured in the race.)
* ``full``: the model's options in one go (a model that is not profiled, or no Ray).

Threads: Ray sets ``OMP_NUM_THREADS`` to a task's CPU count in its workers when the node's
environment does not set it, and the pipeline's worker processes inherit it (torch reads it). A
build keeps that bound (it shares the node); a measure or full phase holds its node, so it runs
without it, as ``navigator convert`` would (:func:`_node_threads`).

Each phase records its attempt and the steps it ran in ``placement.yaml``
(:mod:`navigator.many.placement`). Errors come back as values, never raised, so the driver
can tell a model's failure from a lost node.

Ctrl-C reaches a phase through the run's stop file in the shared workdir (``request["stop"]``),
not ``ray.cancel``: a cancel that crosses a task's reply makes Ray's driver abort ("Tried to
complete task that was not pending"). :class:`StopWatch` interrupts the phase's thread as a
cancel would (a KeyboardInterrupt), and a phase that starts after the file appeared does not run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from typing import Any

from navigator.console import Reporter
from navigator.many import placement

PHASES = ("build", "measure", "full")
LOCK_WAIT_S = 120.0    # a retry waits this long for the lost attempt's processes to let go of the workspace


def phase_options(options: dict, phase: str) -> dict:
    """The options a phase runs with (see the module docstring)."""
    opts = dict(options)
    if phase == "build":
        opts.pop("triton_repo", None)
    elif phase == "measure":
        opts.pop("force", None)
    return opts


def here(node: str | None = None, ip: str | None = None) -> dict:
    """Where this process runs, for placement.yaml."""
    out = {"node": node or "local", "host": socket.gethostname()}
    if ip:
        out["ip"] = ip
    out["pid"] = os.getpid()
    return out


class StepRecorder(Reporter):
    """A quiet reporter that notes every step this attempt ran (not those it reused) in
    placement.yaml as it ends, so the steps of an attempt whose node dies later are known."""

    def __init__(self, ws, by: dict):
        super().__init__("quiet")
        self.ws = ws
        self.by = by
        self.ran: list[str] = []

    def step_end(self, key: str, stage: str, runner: str | None, result: dict) -> None:
        if str(result.get("reason") or "").startswith("reused"):
            return
        step = stage if runner is None else f"{stage} {runner}"
        self.ran.append(f"{key} {step}")
        placement.record_step(self.ws, key, step, {**self.by, "status": result.get("status", "ok")})


class StopWatch:
    """Raises KeyboardInterrupt in this process's main thread once ``path`` exists, at most once,
    and never after :meth:`disarm` (a Ray worker runs other tasks afterwards)."""

    POLL_S = 0.2

    def __init__(self, path: str | None):
        self.path = path
        self.fired = False
        self._armed = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._previous: list = []   # the SIGINT disposition arm() replaced, if it did

    def stopped(self) -> bool:
        return bool(self.path) and os.path.exists(self.path)

    def arm(self) -> None:
        # a KeyboardInterrupt lands in the main thread only: elsewhere the driver's kill stops the task
        if not self.path or threading.current_thread() is not threading.main_thread():
            return
        import signal

        # interrupt_main does nothing where SIGINT is ignored (a process started in the background
        # inherits SIG_IGN): Python's own handler while armed, the previous one back at disarm
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):
            self._previous = [handler if handler is not None else signal.SIG_DFL]
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self._armed = True
        threading.Thread(target=self._watch, name="navigator-stop-watch", daemon=True).start()

    def _watch(self) -> None:
        import _thread

        while not self._done.wait(self.POLL_S):
            if self.stopped():
                with self._lock:
                    if self._armed:
                        self.fired = True
                        _thread.interrupt_main()
                return

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
        self._done.set()
        _checkpoint()
        if self._previous:
            import signal

            signal.signal(signal.SIGINT, self._previous.pop())


def _checkpoint() -> None:
    """Entering a Python function lets a pending interrupt be raised here, not later."""
    for _ in range(2):
        pass


def _wait_for_lock(ws, timeout_s: float) -> None:
    """Until no other process holds the workspace (a retried attempt's processes on a lost
    node may take a moment to die)."""
    from navigator.errors import WorkspaceBusy
    from navigator.workspace.lock import WorkspaceLock

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with WorkspaceLock(ws.lock_path):
                return
        except WorkspaceBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@contextlib.contextmanager
def _node_threads(phase: str, ray_threads: str | None):
    """Without Ray's OMP_NUM_THREADS (``ray_threads``: the value Ray set, or None) for a phase
    that holds its node; restored afterwards, since Ray reuses its worker processes."""
    if phase == "build" or ray_threads is None or os.environ.get("OMP_NUM_THREADS") != ray_threads:
        yield
        return
    del os.environ["OMP_NUM_THREADS"]
    try:
        yield
    finally:
        os.environ["OMP_NUM_THREADS"] = ray_threads


def _check_node(request: dict, where: dict) -> str | None:
    """Why this node cannot run the request (another navigator, a workdir it cannot see)."""
    from pathlib import Path

    from navigator._version import __version__

    if request.get("navigator_version") not in (None, __version__):
        return (f"node {where['node'][:12]} ({where['host']}) has navigator {__version__}, the driver "
                f"{request['navigator_version']}: install the same version on every node")
    token = request.get("token")
    if token:
        try:
            seen = Path(token["path"]).read_text(encoding="utf-8").strip()
        except OSError:
            seen = None
        if seen != token["value"]:
            return (f"--workdir {request['workdir']} is not visible on node {where['node'][:12]} ({where['host']}): "
                    "convert-many needs a workdir that every node shares at the same path (an NFS mount)")
    return None


def run_phase(request: dict, where: dict | None = None, ray_threads: str | None = None) -> dict:
    """Run one phase of one model; returns what happened as a mapping:
    ``status`` (ok | error | interrupted), ``exit_code`` (navigator convert's), ``failures``,
    ``message`` (the error line), ``where``, ``wall_s``, ``ran`` (steps run here)."""
    where = where or here()
    watch = StopWatch(request.get("stop"))
    if watch.stopped():     # queued when Ctrl-C came: never begins (no attempt in placement.yaml)
        return _interrupted(request, where, "interrupted before it started")
    watch.arm()
    try:
        out = _run_phase(request, where, ray_threads)
        watch.disarm()
    except KeyboardInterrupt:   # the stop's interrupt, raised after the pipeline's own guards
        watch.disarm()
        from navigator.workspace.layout import Workspace

        placement.end_attempt(Workspace.for_model(request["workdir"], request["name"]), request["attempt"],
                              "interrupted")
        out = _interrupted(request, where, "interrupted")
    return out


def _interrupted(request: dict, where: dict, message: str) -> dict:
    return {"name": request["name"], "phase": request["phase"], "attempt": request["attempt"], "where": where,
            "failures": [], "ran": [], "status": "interrupted", "exit_code": 130, "message": message, "wall_s": 0.0}


def _run_phase(request: dict, where: dict, ray_threads: str | None) -> dict:
    from navigator import pipeline
    from navigator.config import from_mapping
    from navigator.errors import Interrupted, NavigatorError
    from navigator.workspace.layout import Workspace

    start = time.monotonic()
    number = request["attempt"]
    out: dict[str, Any] = {"name": request["name"], "phase": request["phase"], "attempt": number, "where": where,
                           "failures": [], "message": None, "ran": []}
    problem = _check_node(request, where)
    if problem:
        return {**out, "status": "error", "exit_code": 2, "message": problem, "wall_s": 0.0}
    ws = Workspace.for_model(request["workdir"], request["name"])
    retry_of = request.get("retry_of")
    phase = request["phase"]
    by = {"attempt": number, **{k: where[k] for k in ("node", "host") if k in where}, "run": request["run_id"]}
    recorder = StepRecorder(ws, by)
    try:
        if retry_of:
            _wait_for_lock(ws, LOCK_WAIT_S)
            placement.end_attempt(ws, retry_of, "lost", request.get("retry_reason"))
        attempt = {"attempt": number, "phase": phase, **({"retry_of": retry_of} if retry_of else {}), **where}
        placement.start_attempt(ws, {**attempt, "started": placement.now()})
        config = from_mapping(phase_options(request["options"], phase), source=request.get("where", "model"))
        with _node_threads(phase, ray_threads):
            outcome = pipeline.run(request["model"], None, config, recorder, defer_profiles=phase == "build")
        out.update(status="ok", exit_code=outcome.exit_code, failures=list(outcome.failures),
                   state=outcome.status.state)
        placement.end_attempt(ws, number, "ok", exit_code=outcome.exit_code)
    except (Interrupted, KeyboardInterrupt):
        out.update(status="interrupted", exit_code=130, message="interrupted")
        placement.end_attempt(ws, number, "interrupted")
    except NavigatorError as e:
        out.update(status="error", exit_code=e.exit_code, message=e.one_line())
        placement.end_attempt(ws, number, "error", e.one_line())
    except Exception as e:   # a bug: its traceback goes where navigator convert puts it
        text = traceback.format_exc()
        log_path = getattr(e, "navigator_log", None)
        if log_path is None:
            try:
                ws.root.mkdir(parents=True, exist_ok=True)
                with open(ws.log_path, "a", encoding="utf-8") as f:
                    f.write(f"internal error in convert-many, {phase} attempt {number}:\n{text}")
                log_path = str(ws.log_path)
            except OSError:
                log_path = "not written"
        message = f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]} (traceback in {log_path})"
        out.update(status="error", exit_code=3, message=message)
        placement.end_attempt(ws, number, "error", message)
    out["wall_s"] = round(time.monotonic() - start, 3)
    out["ran"] = recorder.ran
    if ws.status_path.is_file():
        _forget_old_steps(ws)
    return out


def _forget_old_steps(ws) -> None:
    from navigator.errors import UserInputError
    from navigator.workspace import status as status_mod

    try:
        st = status_mod.load(ws.status_path)
    except UserInputError:
        return
    placement.keep_steps_of(ws, [*st.formats, "reference"])
