"""Converting and verifying formats in parallel: up to ``--jobs`` format workers at once,
each format started once its parent is converted (the source's job first and alone: it
computes the reference outputs every other format is verified against). Profiling never
runs beside them: the race worker starts after the last one ended
(:mod:`navigator.pipeline.race`).

Each format keeps its own worker with its timeout and its memory limit
(``--worker-memory-gb``), so crash isolation is unchanged. The parent watches each worker
from a thread of its own; every change of the run's record -- applying a worker's events,
saving status.yaml -- is made under one lock (``RunContext.lock``), which a thread gives up
only while it waits for its worker, so status.yaml keeps a single writer at a time.
Ctrl-C (or an error in one thread) sets ``RunContext.cancel``: every other worker is
stopped and the run ends as it would sequentially.

Default: one job per core, bounded by memory -- ``--worker-memory-gb`` when given, else an
estimate of a conversion's needs from the model's size (:func:`job_count`). ``--no-race``
keeps one job at a time: its profiles run inside the format workers and must run alone.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from navigator.pipeline.context import RunContext

log = logging.getLogger(__name__)

GIB = 1 << 30
MIN_JOB_BYTES = 2 * GIB     # a conversion's floor: an interpreter with torch or onnxruntime and its graph
MODEL_FACTOR = 6            # a conversion holds the model a few times over (source, graph, output, copies)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
              cpu_count: int | None = None, memory_bytes: int | None = None) -> int:
    """How many format workers run at once. ``requested`` (``--jobs``; None or 0: auto) wins;
    auto is the cores, bounded by 75% of the memory over what one job may take:
    ``--worker-memory-gb`` when the user gave it, else max(2 GiB, 6x the model's size)."""
    if no_race:
        return 1
    if requested:
        return requested
    from navigator.execution.isolation import physical_memory_bytes

    n = cpu_count or cores()
    memory = memory_bytes if memory_bytes is not None else physical_memory_bytes()
    if memory:
        need = explicit_memory_gb * GIB if explicit_memory_gb else max(MIN_JOB_BYTES, MODEL_FACTOR * size_bytes)
        n = min(n, int(memory * 0.75 // need))
    return max(1, n)


def run_parallel(ctx: RunContext, planned, run_item) -> None:
    """``run_item(ctx, item)`` for every planned format, up to ``ctx.jobs`` at once, parents
    first (module docstring). Returns when all ended; re-raises the first error after
    stopping the others."""
    ctx.lock, ctx.cancel = threading.Lock(), threading.Event()
    done: set[str] = set()
    pending = list(planned)
    first = pending.pop(0) if pending else None

    def one(item) -> str:
        with ctx.lock:
            run_item(ctx, item)
        return item.key

    try:
        with ThreadPoolExecutor(max_workers=ctx.jobs, thread_name_prefix="navigator-format") as pool:
            if first is not None:     # the source's job alone: the reference comes from it
                _wait_all(ctx, pool, {pool.submit(one, first)}, done)
            running: set = set()
            while pending or running:
                ready = [p for p in pending if p.parent is None or p.parent in done]
                for item in ready[:max(0, ctx.jobs - len(running))]:
                    pending.remove(item)
                    running.add(pool.submit(one, item))
                if not running:   # a parent that was never planned: run the rest in order
                    running.add(pool.submit(one, pending.pop(0)))
                finished, running = _wait_some(ctx, running)
                done.update(f.result() for f in finished)
    finally:
        ctx.lock = ctx.cancel = None


def _wait_some(ctx: RunContext, futures: set):
    """Wait for at least one of ``futures``; on an error or Ctrl-C stop every worker and re-raise."""
    try:
        finished, rest = wait(futures, return_when=FIRST_COMPLETED)
        for f in finished:
            if f.exception() is not None:
                raise f.exception()
        return finished, rest
    except BaseException:
        ctx.cancel.set()
        wait(futures)
        raise


def _wait_all(ctx: RunContext, pool, futures: set, done: set) -> None:
    while futures:
        finished, futures = _wait_some(ctx, futures)
        done.update(f.result() for f in finished)
