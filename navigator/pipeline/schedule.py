"""Converting and verifying formats in parallel: up to ``--jobs`` format workers at once,
each format started once its parent is converted (the source's job first and alone: it
computes the reference outputs every other format is verified against). Profiling never
runs beside them: the race worker starts after the last one ended
(:mod:`navigator.pipeline.race`).

Jobs run in the calling process (a live module's: its export, and conversions that need the
live object) run one at a time (``Parallel.in_process``): torch's tracing state (FX, dynamo,
torch.jit) is global to a process, and a torch.export beside a torch.compile breaks the
compile. A profile measured in the calling process waits until no worker runs and holds new
ones back meanwhile (``Parallel.measure_gate``).

Each format keeps its own worker with its timeout and its memory limit
(``--worker-memory-gb``), so crash isolation is unchanged. The parent watches each worker
from a thread of its own; every change of the run's record -- applying a worker's events,
saving status.yaml -- is made under one lock (``Parallel.lock``), which a thread gives up
only while it waits for its worker, so status.yaml keeps a single writer at a time.
Ctrl-C (or an error in one thread) sets ``Parallel.cancel``: every other worker is
stopped and the run ends as it would sequentially.

Default: one job per core that other processes left free while the run prepared (measured from
/proc/stat, this run's own processes set apart), bounded by memory -- ``--worker-memory-gb`` when
given, else an estimate of a conversion's needs from the model's size (:func:`job_count`). ``--no-race``
keeps one job at a time: its profiles run inside the format workers and must run alone.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from navigator.machine import affinity_cores
from navigator.pipeline.context import CallerCalls, RunContext

log = logging.getLogger(__name__)

GIB = 1 << 30
MIN_JOB_BYTES = 2 * GIB     # a conversion's floor: an interpreter with torch or onnxruntime and its graph
MODEL_FACTOR = 6            # a conversion holds the model a few times over (source, graph, output, copies)


def cores() -> int:
    """The cores this process may use; ``OMP_NUM_THREADS`` bounds them when set (Ray sets it to a
    task's CPU count: a convert-many build sharing its node gets no more workers than that)."""
    n = affinity_cores()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(n, int(omp))) if omp.isdigit() and int(omp) > 0 else n


def model_bytes(path) -> int:
    if not path:
        return 0
    p = Path(path)
    try:
        if p.is_file():
            return p.stat().st_size
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    except OSError:
        pass
    return 0


def job_count(requested: int | None, *, explicit_memory_gb: float | None, size_bytes: int, no_race: bool,
              cpu_count: int | None = None, memory_bytes: int | None = None, busy_cores: float | None = None,
              machine_cores: int | None = None) -> int:
    """How many format workers run at once. ``requested`` (``--jobs``; None or 0: auto) wins;
    auto is the cores other processes left free (``busy_cores``: how many they kept busy while
    this run prepared, measured; at least one), bounded by 75% of the memory over what one job
    may take: ``--worker-memory-gb`` when the user gave it, else max(2 GiB, 6x the model's size).
    Two workers on one free core only take turns, and each loses its caches at every turn."""
    if no_race:
        return 1
    if requested:
        return requested
    from navigator.machine import physical_memory_bytes

    n = cpu_count or cores()
    if busy_cores is not None:   # measured over every core this process may run on, before OMP's bound
        n = min(n, max(1, round((machine_cores or affinity_cores()) - busy_cores)))
    memory = memory_bytes if memory_bytes is not None else physical_memory_bytes()
    if memory:
        need = explicit_memory_gb * GIB if explicit_memory_gb else max(MIN_JOB_BYTES, MODEL_FACTOR * size_bytes)
        n = min(n, int(memory * 0.75 // need))
    return max(1, n)


def run_parallel(ctx: RunContext, planned, run_item, waits_for=lambda item: None) -> None:
    """``run_item(ctx, item)`` for every planned format, up to ``ctx.par.jobs`` at once, parents
    first (module docstring). The source's children start as soon as the reference outputs are
    stored: the source's own verification (a torch.compile compile) overlaps their conversion.
    ``waits_for(item)``: a format whose conversion ``item`` also waits for (one a live module's
    edge converts from in a worker, ``Converter.via``); such an item needs the module no more.
    Returns when all ended; re-raises the first error after stopping the others."""
    par = ctx.par
    par.lock, par.cancel = threading.Lock(), threading.Event()
    par.reference_ready, par.gate, par.in_process = threading.Event(), threading.Condition(), threading.Lock()
    par.calls = CallerCalls()   # in-process measurements run on this thread (CallerCalls says why)
    done: set[str] = set()
    pending = list(planned)
    source = pending[0].key if pending else None

    def one(item, **how) -> str:
        with ctx.par.lock:
            if ctx.par.cancel.is_set():   # stopped before its turn came
                raise KeyboardInterrupt
            run_item(ctx, item, **how)
        return item.key

    # A live source (a module of this process): its export first, then its children's conversions
    # (in this process too: they trace the module), and its own verification (a torch.compile
    # compile) once they are converted -- beside its children's verification in workers.
    live_source = pending[0] if pending and ctx.is_live and pending[0].converter is None else None
    children = [p for p in pending if live_source is not None and p.parent == live_source.key and not waits_for(p)]

    def ready(item) -> bool:
        other = waits_for(item)
        if other is not None and other not in done and other not in ctx.par.converted:
            return False
        if item.parent in done or item.parent is None and source in done:
            return True
        if item.parent == source:
            return ctx.par.reference_ready.is_set()
        # its parent converted (ok: a failed route is converted again, its status reset first) and now
        # verifying: the child's conversion needs the artifact only (onnx-optimized beside onnx's
        # verification, both done before a live module's runners are screened instead of one after)
        parent = ctx.status.formats.get(item.parent)
        return item.parent in ctx.par.converted and parent is not None and parent.convert.status == "ok"

    # a thread more for a live source's verification: it runs in this process, beside ctx.par.jobs format
    # threads (whose in-process conversions it waits for, Parallel.in_process), not after one of them
    threads = ctx.par.jobs + (1 if live_source is not None else 0)
    try:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="navigator-format") as pool:
            try:
                _schedule(ctx, pool, one, pending, done, ready, live_source, children)
            except BaseException:   # Ctrl-C wherever it lands, or an error: stop every worker first,
                ctx.par.cancel.set()    # then the pool's exit waits for their threads
                raise
    finally:
        par.lock = par.cancel = par.reference_ready = par.gate = par.in_process = par.calls = None


def _schedule(ctx: RunContext, pool, one, pending: list, done: set, ready, live_source, children) -> None:
    if live_source is not None:
        pending.pop(0)
        running = {pool.submit(one, live_source, verify=False)}
        while running:
            finished, running = _wait_some(ctx, running)
            done.update(f.result() for f in finished)
    else:
        running = {pool.submit(one, pending.pop(0))} if pending else set()
    verifying = None   # the live source's verification: not one of the ctx.par.jobs format slots (run_parallel)
    was_quiet = False
    while pending or running or live_source is not None:
        if live_source is not None and all(c.key in done or c.key in ctx.par.converted for c in children):
            verifying = pool.submit(one, live_source, convert=False)
            running.add(verifying)
            live_source = None
        started = [p for p in pending if ready(p)][:max(0, ctx.par.jobs - len(running - {verifying}))]
        if not started and not running:   # a parent that was never planned: the rest in order
            started = pending[:1]
        for item in started:
            pending.remove(item)
            running.add(pool.submit(one, item))
        # Workers first: a live module's measurement holds every new worker back while it runs, so it
        # waits until no worker ran for a whole poll and none was started (a format's thread starts
        # its next worker -- its verification after a conversion -- within the poll). Taken at once,
        # it held back a child's conversion that could have run beside its parent's verification. A
        # ready item without a free slot does not hold it back: the threads in the slots may wait
        # for the lock the measuring job holds (Parallel.in_process).
        quiet = ctx.par.workers_running == 0 and not started
        finished, running = _wait_some(ctx, running, measure=quiet and was_quiet)
        was_quiet = quiet
        done.update(f.result() for f in finished)


def _wait_some(ctx: RunContext, futures: set, measure: bool = True):
    """Run what the formats' threads handed to this thread (a live module's measurement) when
    ``measure``, then wait a moment for any of ``futures`` (the reference may become ready
    meanwhile); re-raise the error of one that failed."""
    if measure:
        ctx.par.calls.serve()
    finished, rest = wait(futures, timeout=0.05, return_when=FIRST_COMPLETED)
    for f in finished:
        if f.exception() is not None:
            raise f.exception()
    return finished, rest
