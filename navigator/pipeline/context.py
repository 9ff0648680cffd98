"""What every stage of one run shares: :class:`RunContext`, and the prepared source."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from navigator.config import NavigatorConfig
from navigator.sources.prepare import Prepared  # noqa: F401  (the run's inputs, read by resume)
from navigator.workspace import status as status_mod
from navigator.workspace.layout import Workspace
from navigator.workspace.status import Status

if TYPE_CHECKING:  # pragma: no cover
    from navigator.console import Reporter
    from navigator.execution.forkserver import ForkServer
    from navigator.sources.base import Source

T = TypeVar("T")


@dataclass
class RunBook:
    """What the run keeps beside status.yaml: stage times, worker starts, the digests that let a
    later run reuse a step, and the formats exported with static shapes."""

    timings: dict[str, float] = field(default_factory=dict)
    process_starts: int = 0
    static_keys: set[str] = field(default_factory=set)   # formats exported with static shapes only
    step_hashes: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (key, runner, stage) -> sha256


@dataclass
class RaceState:
    """The runners waiting for the race, and a live module's screened runners kept loaded for it
    (navigator.pipeline.race.LivePeer)."""

    pending: dict[str, Any] = field(default_factory=dict)   # key -> (planned item, runner keys) to race
    peers: dict[Any, Any] = field(default_factory=dict)
    since: Any = None   # a navigator.machine.CpuUse at the run's start: the load other processes put on it since

    def loaded(self) -> float | None:
        """Cores other processes kept busy since the run started, when that loaded the machine
        (:func:`navigator.execution.profiling.busy_cores`); None: quiet or unknown."""
        from navigator.execution.profiling import busy_cores

        return None if self.since is None else busy_cores(self.since)


@dataclass
class Parallel:
    """How the formats of a run share the machine: ``jobs`` at once; while they run in parallel,
    the lock every change of the record (and save) is made under, released only while a thread
    waits for its worker, and the event that stops every worker."""

    jobs: int = 1                    # formats converted and verified at once (navigator.pipeline.schedule)
    lock: threading.Lock | None = None
    cancel: threading.Event | None = None
    reference_ready: threading.Event | None = None   # set once the reference outputs are stored
    gate: threading.Condition | None = None          # measurements in this process vs workers
    in_process: threading.Lock | None = None         # one in-process job at a time (torch tracing is global)
    converted: set[str] = field(default_factory=set)   # formats whose convert step ended (any status)
    open_steps: dict[tuple[str, str, str | None], float] = field(default_factory=dict)  # -> start (progress)
    workers_running: int = 0
    measuring: bool = False
    calls: CallerCalls | None = None       # while formats run in parallel: work handed to the calling thread

    def locked(self) -> contextlib.AbstractContextManager[Any]:
        return self.lock if self.lock is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Let other threads change the record while this one waits (a no-op when sequential)."""
        if self.lock is None:
            yield
            return
        self.lock.release()
        try:
            yield
        finally:
            self.lock.acquire()

    @contextlib.contextmanager
    def worker_slot(self) -> Iterator[None]:
        """Held while a worker runs: it waits while this process measures (measure_gate)."""
        if self.gate is None:
            yield
            return
        with self.gate:
            while self.measuring:
                self.gate.wait()
            self.workers_running += 1
        try:
            yield
        finally:
            with self.gate:
                self.workers_running -= 1
                self.gate.notify_all()

    def on_caller(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread that runs the scheduler (the one that called navigator), from
        any thread of the run: directly when this is it or formats run one at a time, else
        handed over (:class:`CallerCalls`). Returns its result or raises its error."""
        if self.calls is None:
            return fn()
        return self.calls.run(fn, self.cancel)

    @contextlib.contextmanager
    def measure_gate(self) -> Iterator[None]:
        """Held while a job of this process (a live source's) profiles: no worker runs meanwhile,
        so the measurement is alone on the machine as the race's is."""
        if self.gate is None:
            yield
            return
        with self.gate:
            while self.workers_running:
                self.gate.wait()
            self.measuring = True
        try:
            yield
        finally:
            with self.gate:
                self.measuring = False
                self.gate.notify_all()


@dataclass
class RunContext:
    """What every stage of one run shares: its fixed inputs, the record (``status``, saved as
    status.yaml, and ``book``), how its formats share the machine (``par``) and the race's state."""

    config: NavigatorConfig
    ws: Workspace
    status: Status
    source: Source
    device: str                      # where converters run: cuda when a GPU is used, else cpu
    reporter: Reporter
    runner_devices: tuple[str, ...] = ("cpu",)  # where formats are verified and profiled
    verify_func: Callable[..., Any] | None = None
    resume_from: Status | None = None                # the previous record, when its inputs are unchanged
    live: Any = None                 # the flat module of a live torch source (sources.torch_support.LiveModel)
    # Profiles that cannot be reused are left to a later run instead of measured now (convert-many's
    # build phase: its measurements run alone on the node afterwards, navigator.many.node).
    defer_profiles: bool = False
    forkserver: ForkServer | None = None   # the run's warm workers, or None
    book: RunBook = field(default_factory=RunBook)
    par: Parallel = field(default_factory=Parallel)
    race: RaceState = field(default_factory=RaceState)

    def save(self) -> None:
        status_mod.save(self.status, self.ws.status_path)

    @property
    def is_live(self) -> bool:
        """The source is an object of this process that no worker can rebuild."""
        return self.source.obj is not None and not getattr(self.source, "factory", None)


class CallerCalls:
    """Work the threads of a parallel run hand to the scheduler's thread, which runs it
    between its checks of the workers (:meth:`serve`).

    Why: a measurement of a live module in this process must run on the thread whose
    OpenMP team torch already uses, with no other thread's team alive -- GNU OpenMP
    shortens its busy-wait to almost nothing once it manages more threads than there are
    cores, which halved torch's throughput measured from a second thread (a transformer
    block at batch 64: 18-20k/s against 37-41k/s on the first thread, same process)."""

    def __init__(self) -> None:
        import queue

        self.owner = threading.get_ident()
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._taken = threading.Lock()

    def run(self, fn: Callable[[], T], cancel: threading.Event | None = None) -> T:
        if threading.get_ident() == self.owner:
            return fn()
        item: dict[str, Any] = {"fn": fn, "done": threading.Event(), "taken": False}
        self._queue.put(item)
        while not item["done"].wait(0.05):
            if cancel is not None and cancel.is_set():
                with self._taken:
                    if not item["taken"]:      # the scheduler stopped: it will never take it
                        item["taken"] = True
                        raise KeyboardInterrupt
        if "error" in item:
            raise item["error"]
        result: T = item["result"]     # serve() sets a result or an error, never neither
        return result

    def serve(self) -> None:
        """Run (on the scheduler's thread) everything handed over so far; an error in one is
        handed back to the thread that asked, and a Ctrl-C also stops the scheduler."""
        import queue

        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                with self._taken:
                    if item["taken"]:
                        continue
                    item["taken"] = True
                item["result"] = item["fn"]()
            except BaseException as e:   # noqa: B902 - handed back to the thread that asked
                item["error"] = e
                if not isinstance(e, Exception):
                    raise
            finally:   # whatever lands where (a Ctrl-C between two lines), the asking thread is released
                if "result" not in item:
                    item.setdefault("error", KeyboardInterrupt())
                item["done"].set()
