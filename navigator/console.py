"""What a person sees: one start/✅/❌ line per step while working, then a table.

Rich output only on a TTY; plain lines otherwise (CI logs); nothing with
``quiet``. Everything also goes to navigator.log through logging.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Callable, TextIO

log = logging.getLogger("navigator.progress")

ICONS = {"ok": "✅", "failed": "❌", "skipped": "⏭️ ", "inconclusive": "❔"}
PLAIN = {"ok": "[ok]", "failed": "[FAILED]", "skipped": "[skipped]", "inconclusive": "[INCONCLUSIVE]"}


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, as ``navigator.convert(on_progress=...)`` receives it and the
    ``navigator.progress`` logger records it: ``phase`` is ``start``, ``running`` (every 15 s while
    a step lasts) or ``end``; ``status`` (ok, failed, skipped, inconclusive) and ``reason`` come with
    ``end``. ``key`` is a format key (or ``contenders`` for the race), ``stage`` export, convert,
    verify, profile or race."""

    phase: str
    key: str
    stage: str
    runner: str | None = None
    elapsed_s: float | None = None
    status: str | None = None
    reason: str | None = None


class Reporter:
    def __init__(self, mode: str = "auto", stream: TextIO | None = None,
                 on_progress: Callable[[ProgressEvent], object] | None = None):
        self.on_progress = on_progress
        self.stream = stream or sys.stdout
        if mode == "auto":
            mode = "rich" if getattr(self.stream, "isatty", lambda: False)() else "plain"
        self.mode = mode
        self._console = None
        if mode == "rich":
            try:
                from rich.console import Console

                self._console = Console(file=self.stream, highlight=False)
            except ImportError:  # pragma: no cover - rich is a core dependency
                self.mode = "plain"

    def _print(self, text: str, style: str | None = None) -> None:
        if self.mode == "quiet":
            return
        try:
            try:
                self._write(text, style)
            except UnicodeEncodeError:   # a path that is not valid UTF-8 (surrogate escapes) or an ASCII terminal
                enc = getattr(self.stream, "encoding", None) or "utf-8"
                self._write(text.encode(enc, "backslashreplace").decode(enc), style)
        except BrokenPipeError:
            self._reader_gone()

    def _write(self, text: str, style: str | None) -> None:
        if self._console is not None:
            self._console.print(text, style=style, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def _reader_gone(self) -> None:
        """The reader closed the pipe (``navigator convert … | head -1``): the run goes on silently
        (status.yaml and navigator.log still get everything) instead of dying half-way; the stream's
        descriptor is pointed at /dev/null so the interpreter's own flush at exit is quiet too."""
        import os

        self.mode = "quiet"
        self._console = None
        try:
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass

    def _icon(self, status: str) -> str:
        return (ICONS if self.mode == "rich" else PLAIN).get(status, status)

    def info(self, text: str) -> None:
        self._print(text)

    def warn(self, text: str) -> None:
        self._print(f"warning: {text}", "yellow")

    def plan(self, ws, keys: list[str], unsupported: list[str]) -> None:
        self._print(f"workspace {ws.root}")
        self._print(f"formats: {', '.join(keys)}" + (f" (not available: {', '.join(unsupported)})"
                                                     if unsupported else ""))

    def _notify(self, event: ProgressEvent) -> None:
        """The event to the ``navigator.progress`` logger and the caller's callback; a callback
        that raises is logged, never the end of the run."""
        what = f"{event.key} {event.stage}" + (f" [{event.runner}]" if event.runner else "")
        if event.phase == "end":
            log.info("%s: %s%s", what, event.status, f" ({event.reason})" if event.reason else "")
        else:
            log.info("%s: %s", what, "started" if event.phase == "start" else f"running for {event.elapsed_s:.0f} s")
        if self.on_progress is not None:
            try:
                self.on_progress(event)
            except Exception as e:   # noqa: BLE001 - the caller's code: its error must not end the run
                log.warning("the progress callback raised %s: %s", type(e).__name__, e)

    def step_start(self, key: str, stage: str, runner: str | None) -> None:
        self._notify(ProgressEvent("start", key, stage, runner))
        if self.mode == "rich":
            self._print(f"   … {key} {stage}" + (f" [{runner}]" if runner else ""), "dim")

    def progress(self, key: str, stage: str, runner: str | None, elapsed_s: float) -> None:
        """A step still running (navigator.pipeline.progress): its elapsed time."""
        self._notify(ProgressEvent("running", key, stage, runner, elapsed_s=elapsed_s))
        self._print(f"   … {key} {stage}" + (f" [{runner}]" if runner else "") + f": running for {elapsed_s:.0f} s",
                    "dim")

    def step_end(self, key: str, stage: str, runner: str | None, result: dict) -> None:
        status = result.get("status", "ok")
        self._notify(ProgressEvent("end", key, stage, runner, elapsed_s=result.get("duration_s"), status=status,
                                   reason=str(result["reason"])[:300] if result.get("reason") else None))
        line = f"{self._icon(status)} {key} {stage}" + (f" [{runner}]" if runner else "")
        if result.get("duration_s") is not None:
            line += f" ({result['duration_s']:.2f} s)"
        if result.get("reason"):   # why it failed or was skipped; for an ok step: reused, a fallback taken
            line += f": {str(result['reason'])[:300]}"
        if stage == "profile" and status == "ok" and result.get("results"):
            from navigator.workspace.status import peak_of

            peak = peak_of(result["results"])
            line += f": {peak['throughput']:.1f}/s at batch {peak['batch_size']}"
        self._print(line, {"ok": None, "failed": "red", "skipped": "yellow", "inconclusive": "yellow"}.get(status))

    def table(self, title: str, headers: list[str], rows: list[list[str]]) -> None:
        """A table: rich on a TTY, aligned plain columns otherwise (the title only there)."""
        if self.mode == "quiet":
            return
        if self._console is not None:
            from rich.table import Table

            table = Table(title=title)
            for h in headers:
                table.add_column(h)
            for row in rows:
                table.add_row(*row)
            try:
                self._console.print(table)
            except BrokenPipeError:
                self._reader_gone()
            return
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
        self._print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
        for row in rows:
            self._print("  ".join(c.ljust(w) for c, w in zip(row, widths)))

    def summary(self, status, *, exit_code: int, failures: list[str], timings: dict | None = None) -> None:
        if self.mode == "quiet":
            return
        self.table(f"{status.model.name}: {status.state}",
                   ["format", "runner", "convert", "verify", "profile", "throughput for best"], summary_rows(status))
        if status.best:
            b = status.best
            self._print(best_line(b), None if b.note is None else "yellow")
        else:
            self._print("best: none (no format was verified)")
        for key, fs in status.formats.items():
            if fs.convert.status == "skipped":
                self.warn(f"{key} skipped: {fs.convert.reason}")
        for f in failures:
            self._print(f"{'not verified' if ': verification inconclusive: ' in f else 'failed'}: {f}", "red")
        if timings and "total_s" in timings:
            self._print(f"done in {timings['total_s']:.1f} s ({timings.get('process_starts', 0)} worker processes)")


def best_line(b) -> str:
    """The ``best:`` line: the pick, and how far it can be trusted (status.yaml's ``best``)."""
    extra = f", {b.throughput:.1f}/s at batch {b.batch_size}" if b.throughput is not None else ""
    line = f"best: {b.key} on {b.runner}{extra} (basis: {b.basis})"
    if b.note:
        return f"{line}; NOT A SURE PICK: {b.note}"
    if b.separated and b.lead():
        return f"{line}; {b.lead()}"
    return line


def summary_rows(status) -> list[list[str]]:
    rows = []
    for key, fs in status.formats.items():
        conv = fs.convert.status
        if not fs.runners:
            rows.append([key, "-", conv, "-", "-", "-"])
            continue
        for rkey, rs in fs.runners.items():
            peak = rs.profile.peak() if rs.profile.status == "ok" else None
            best = f"{peak.throughput:.1f}/s @ {peak.batch_size}" if peak else "-"
            top = max(rs.profile.results, key=lambda r: r.throughput, default=None) if peak else None
            if top is not None and top.throughput > peak.throughput:
                # the race's side-by-side figure is what best uses; the higher one was measured alone, earlier
                best += f" (alone: {top.throughput:.1f}/s @ {top.batch_size})"
            rows.append([key, rkey, conv, rs.verify.status, rs.profile.status, best])
    return rows
