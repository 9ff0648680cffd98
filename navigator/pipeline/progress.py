"""Progress during long steps: a line every :data:`EVERY_S` seconds, with the elapsed time,
for each step running longer than that (a torch.compile compile, an ONNX export, a TensorRT
build), so a run is never silent for minutes. The steps are the ones the run's events opened
and have not closed (``Parallel.open_steps``); a thread of the calling process prints, so
workers need no change, and the line goes through the reporter (nothing in quiet mode)."""

from __future__ import annotations

import threading
import time

from navigator.pipeline.context import RunContext

EVERY_S = 15.0


class Heartbeat:
    """``with Heartbeat(ctx):`` around the formats' run."""

    def __init__(self, ctx: RunContext, every_s: float = EVERY_S, tick_s: float = 1.0):
        self.ctx, self.every_s, self.tick_s = ctx, every_s, tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="navigator-progress", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5.0)   # it ends within a tick; the bound only guards a stuck terminal

    def _run(self) -> None:
        told: dict = {}
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            for step, since in list(self.ctx.par.open_steps.items()):
                if now - since >= self.every_s and now - told.get(step, since) >= self.every_s:
                    told[step] = now
                    key, stage, runner = step
                    self.ctx.reporter.progress(key, stage, runner, now - since)


def opened(ctx: RunContext, key: str, stage: str, runner: str | None) -> None:
    ctx.par.open_steps[(key, stage, runner)] = time.monotonic()


def closed(ctx: RunContext, key: str, stage: str, runner: str | None) -> None:
    ctx.par.open_steps.pop((key, stage, runner), None)
