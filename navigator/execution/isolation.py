"""Starting workers and watching them: per-stage timeouts, crashes, hangs, memory.

A worker is ``python -m navigator._worker JOB.json`` in a new process group
(no multiprocessing, no fork: user scripts need no ``__main__`` guard). The
parent polls the job's events file; a stage running longer than the timeout
gets the process group killed (SIGTERM, then SIGKILL), and a worker that
dies without reporting a stage end leaves that stage ``failed`` with the
signal and the tail of its log.

Memory limit (``--worker-memory-gb``). Every poll (50 ms) the parent reads
``/proc/<pid>/status`` of the worker and of all its descendants (found through
``/proc/<pid>/task/<tid>/children``) and sums ``RssAnon + RssShmem``: the
memory the kernel cannot give back by dropping pages. Above the limit the
worker's process group gets SIGKILL at once (no SIGTERM grace: the memory keeps
growing meanwhile) and the open stage ends ``failed`` with "the worker exceeded
the memory limit of N GiB". Why this and not the alternatives:

* RLIMIT_AS limits address space: CUDA reserves tens of GiB of it at
  initialisation (measured: VmSize 3.8 -> 17.9 GB on ``torch.ones(device=
  "cuda")``, H100), and onnxruntime/TensorRT reserve too, so it breaks GPU work.
* RLIMIT_DATA (private writable mappings) does stop numpy, bytearray and torch
  allocations since Linux 4.7 (measured: each raises MemoryError under a 1 GiB
  limit), but it counts memory that is never touched: an untouched
  ``np.empty`` of 2 GiB is refused although it costs nothing; thread stacks
  (8 MiB each) count; torch's memory-mapped checkpoint loading (mmap=True)
  maps weights private-writable, so a large checkpoint counts in full; torch
  with CUDA loaded has VmData 1.41 GB for 0.63 GB resident (measured, H100;
  RssAnon 0.31 GB). A limit tight enough to protect the
  machine fails legitimate workers; one loose enough to be safe protects
  nothing. It misses CUDA pinned host memory, which is a shared mapping
  (measured on an H100: 2 GiB of ``pin_memory=True`` raised VmData by 0.12 GB
  and RssShmem by 2.0 GiB, hence RssShmem in the sum). And it sees one process
  only, not a converter's subprocesses (trtexec, tf2onnx).
* A cgroup (v2 ``memory.max``) would be exact, but needs a writable, delegated
  cgroup v2 tree, which containers and CI runners mostly lack (this
  development machine has cgroup v1 only).
* File-backed resident pages (``RssFile``: a memory-mapped ONNX external-data
  file, shared libraries) are page cache the kernel reclaims under pressure;
  counting them would fail models larger than the limit that are merely mapped.

The cost is the polling interval: a worker touching memory at full speed
overshoots by one interval's worth before the kill. Measured on the 2-core
development machine: numpy touches ~2.6 GiB/s, so <= ~130 MiB past the limit;
a converter allocating without bound under a 1 GiB limit was seen at 1.04 GiB,
killed and reaped 9 ms after that sample, peak RSS 1087 MiB
(tests/functional/test_faults.py). Each kill logs its figures. The kernel's
OOM killer stays the backstop. Jobs run in the calling process (live sources)
are not limited. The worker's peak resident set (``ru_maxrss`` from ``wait4``, i.e. its VmHWM)
is returned in :class:`WorkerOutcome` and recorded as ``peak_rss_mb``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from navigator.execution.jobs import Event, Job, timeout_reason
from navigator.execution.processes import kill_group, python_command, reap, stop_group
from navigator.machine import GIB

if TYPE_CHECKING:
    from navigator.execution.forkserver import ForkServer

log = logging.getLogger(__name__)

POLL_S = 0.05


@dataclass
class WorkerOutcome:
    returncode: int | None
    events: list[Event] = field(default_factory=list)
    open_stage: Event | None = None    # the stage running when the worker stopped, if any
    reason: str | None = None          # why it stopped early: timeout, signal, exit code
    log_tail: str = ""
    wall_s: float = 0.0
    peak_rss_mb: float | None = None   # the worker's peak resident set (VmHWM), MiB
    memory_killed: bool = False        # killed for exceeding the memory limit


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (through /proc/<pid>/task/<tid>/children)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                continue
    return out


def unreclaimable_bytes(pid: int) -> int:
    """RssAnon + RssShmem of ``pid`` and its descendants: the memory the kernel
    cannot reclaim by dropping file pages (see the module docstring)."""
    total = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        extra = " (a crash inside native code)" if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGABRT") else ""
        extra = " (killed: out of memory?)" if name == "SIGKILL" else extra
        return f"the worker died with {name}{extra}"
    return f"the worker exited with code {code}"


class StageClock:
    """The one rule of --timeout, wherever a stage runs (a worker, a thread of the calling process,
    a race window): the open stage is late once it has been open longer than the limit. What
    stops it differs (a worker is killed, a thread gets an exception); the words do not
    (:func:`~navigator.execution.jobs.timeout_reason`)."""

    def __init__(self, open_stage: Event | None = None):
        self.open_stage = open_stage
        self.stage_start = time.monotonic()

    def overdue(self, limit: float | None, now: float | None = None) -> Event | None:
        """The open stage when it has run past ``limit`` seconds (None or 0: no limit), else None."""
        if not limit or self.open_stage is None:
            return None
        return self.open_stage if (time.monotonic() if now is None else now) - self.stage_start > limit else None


class EventTail(StageClock):
    """The events a job has appended to its JSONL file since the last call, whole lines
    only (a line still being written waits for the next call). It also tracks the open
    stage: the last ``start`` event not yet followed by an ``end``."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = Path(path)
        self.offset = 0
        self.buffer = ""

    def read(self) -> list[Event]:
        with open(self.path, encoding="utf-8") as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        events = [Event.from_dict(json.loads(line)) for line in lines if line.strip()]
        for event in events:
            if event.event == "start":
                self.open_stage, self.stage_start = event, time.monotonic()
            elif event.event == "end":   # not a request within the stage (the race's "window")
                self.open_stage = None
        return events


def _pause(wake_fd: int | None) -> None:
    """:data:`POLL_S`, or less when the worker writes to ``wake_fd`` meanwhile (drained)."""
    if wake_fd is None:
        time.sleep(POLL_S)
        return
    import select

    poller = select.poll()   # not select(): a descriptor may be >= 1024 in a process with many files
    poller.register(wake_fd, select.POLLIN)
    if poller.poll(POLL_S * 1000):
        try:
            os.read(wake_fd, 4096)
        except BlockingIOError:
            pass


def _start(job: Job, job_path: Path, log_path: Path, env: dict[str, str], forkserver: ForkServer | None,
           cancel: threading.Event | None) -> Any:
    """The worker's process: a fork of the run's server when it has one (a ForkedWorker, with the
    Popen face that reap and stop_group use), else a fresh interpreter's Popen."""
    with open(log_path, "ab") as out:
        if forkserver is not None:
            from navigator.execution.forkserver import ServerGone, wait_for

            try:
                return forkserver.spawn(job_path, out, env, cancel=cancel, after=wait_for(job))
            except ServerGone as e:
                log.warning("%s: a fresh worker instead", e)
        return subprocess.Popen(python_command("-m", "navigator._worker", str(job_path)), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=env)


def run_worker(job: Job, job_path: Path, log_path: Path, *, stage_timeout_s: float,
               on_event: Callable[[Event], None] | None = None, env: dict[str, str] | None = None,
               memory_limit_gb: float | None = None, cancel: threading.Event | None = None,
               forkserver: ForkServer | None = None,
               wake_fd: int | None = None) -> WorkerOutcome:
    """Run one job in a worker, calling ``on_event`` for each event as it comes.
    ``memory_limit_gb``: kill the worker when its unreclaimable memory (with its
    descendants') exceeds it; None or 0: no limit. ``cancel`` (a threading.Event): when
    set, the worker is stopped and KeyboardInterrupt raised, as on Ctrl-C -- how a run
    watching several workers from threads stops them all (navigator.pipeline.schedule).
    ``forkserver``: the run's :class:`~navigator.execution.forkserver.ForkServer`, whose child
    runs the job (a warm worker); a fresh interpreter when None or when the server is gone.
    ``wake_fd``: a FIFO's read end the worker writes a byte to right after an event that waits
    for an answer (the race's ``window``): the loop reads events at once instead of at its next
    poll."""
    events_path = Path(job.events)
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    job_path.parent.mkdir(parents=True, exist_ok=True)
    from navigator.workspace.atomic import write_text

    write_text(job_path, job.to_json())   # never half-written on a full disk
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env["NAVIGATOR_WORKER"] = "1"
    start = time.monotonic()
    proc = _start(job, job_path, log_path, child_env, forkserver, cancel)
    outcome = WorkerOutcome(returncode=None)
    tail = EventTail(events_path)
    limit = int(memory_limit_gb * GIB) if memory_limit_gb else None
    try:
        while True:
            code, outcome.peak_rss_mb = reap(proc, block=False)
            for event in tail.read():
                outcome.events.append(event)
                if on_event:
                    on_event(event)
            open_stage = tail.open_stage
            if code is not None:
                outcome.returncode = code
                kill_group(proc.pid)   # what the job started (a factory's helper process) ends with it
                if getattr(proc, "server_died", False):
                    outcome.reason = ("the warm-worker server died (killed from outside?) and its worker with it; "
                                      "the next workers start fresh (--no-warm-workers always does)")
                elif open_stage is not None or code != 0:
                    outcome.reason = _describe_exit(code)
                break
            used = unreclaimable_bytes(proc.pid) if limit else 0
            if limit and used > limit:
                seen = time.monotonic()
                kill_group(proc.pid)
                outcome.returncode, outcome.peak_rss_mb = reap(proc, block=True)
                outcome.memory_killed = True
                where = f" in {open_stage.stage}" if open_stage else ""
                outcome.reason = (f"the worker exceeded the memory limit of {memory_limit_gb:g} GiB{where} "
                                  f"({used / GIB:.2f} GiB resident; --worker-memory-gb) and was killed")
                log.warning("worker killed at %.2f GiB resident (limit %g GiB), %.0f ms after the sample; "
                            "peak RSS %s MiB", used / GIB, memory_limit_gb, (time.monotonic() - seen) * 1000,
                            outcome.peak_rss_mb)
                break
            late = tail.overdue(stage_timeout_s)
            if late is not None:
                outcome.peak_rss_mb = stop_group(proc, grace_s=3.0)
                outcome.returncode = proc.returncode
                outcome.reason = timeout_reason(stage_timeout_s, late.stage, where="; the worker was killed")
                break
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
            _pause(wake_fd)
    except BaseException:
        stop_group(proc, grace_s=3.0)  # Ctrl-C or an error in the parent: never leave a worker behind
        raise
    outcome.open_stage = open_stage
    outcome.wall_s = time.monotonic() - start
    if outcome.reason:
        outcome.log_tail = log_tail(log_path)
    return outcome
