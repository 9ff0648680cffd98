"""One run: prepare, plan, write the workspace, run the formats, choose the best, and
turn every way a run can end (done, bad input, Ctrl-C, a full disk, a bug) into its
record and exit code."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from navigator import formats
from navigator.config import NavigatorConfig
from navigator.errors import Interrupted, NavigatorError, Terminated, UserInputError
from navigator.execution.worker import DISK_FULL_ERRNOS
from navigator.machine import CpuUse, affinity_cores
from navigator.pipeline import outcome as outcome_mod
from navigator.pipeline import schedule
from navigator.pipeline.context import RunBook, RunContext
from navigator.pipeline.diskfull import WorkspaceFull
from navigator.pipeline.execute import run_formats
from navigator.pipeline.plan import plan_formats, requested_targets
from navigator.pipeline.prepare import prepare, resolve_device, write_workspace
from navigator.pipeline.resume import check_same_model, previous_record, resumable
from navigator.workspace.layout import Workspace
from navigator.workspace.lock import WorkspaceLock
from navigator.workspace.status import ConvertStep, FormatStatus, Status

log = logging.getLogger("navigator.pipeline")


@dataclass
class RunOutcome:
    workspace: Workspace
    status: Status
    exit_code: int
    failures: list[str]
    requested: list[str]
    timings: dict
    memory_tree: Any = None     # a live torch source's output tree that status.yaml cannot hold (namedtuples)


def _save_if_possible(ctx: RunContext) -> None:
    """Save the final state; on a full disk the last saved status.yaml stays (the
    writes are atomic: it is never half-written)."""
    try:
        ctx.save()
    except OSError as e:
        log.error("status.yaml could not be saved (%s); it keeps the state of its last save", e)


class _LogFileHandler(logging.FileHandler):
    """navigator.log: opened without following a symbolic link (a log replaced by a link must not
    get our records appended to its target); a record that cannot be written (OSError: a full
    disk) is dropped silently, where logging's default prints a traceback on the console; other
    errors (a bad format string) are reported as usual. Undecodable characters (a workdir with a
    non-UTF-8 byte) are escaped, not an error."""

    def __init__(self, filename):
        super().__init__(filename, mode="a", encoding="utf-8", delay=True, errors="backslashreplace")

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)

    def handleError(self, record) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)


def _install_log_handler(ws: Workspace) -> logging.Handler:
    ws.root.mkdir(parents=True, exist_ok=True)
    handler = _LogFileHandler(ws.log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    logger = logging.getLogger("navigator")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def _record_unavailable(ctx: RunContext, unsupported: list[str], dropped: list[str]) -> None:
    from navigator.converters.registry import registry as converters

    st = ctx.status
    for t in dropped:
        log.info("default target %s left out: its packages are not installed", t)
    plugins = {}
    for kind, unavailable in (("converter", converters.unavailable), ("format", formats.registry.unavailable)):
        for name, reason in unavailable.items():
            log.warning("%s plugin %s is unavailable: %s", kind, name, reason)
            ctx.reporter.warn(f"{kind} plugin {name} is unavailable: {reason}")
            plugins[name if kind == "converter" else f"format {name}"] = reason
    if plugins:
        st.environment["unavailable_plugins"] = plugins
    for key in unsupported:
        k = formats.parse_key(key)
        st.formats[key] = FormatStatus(format=k.format, precision=k.precision, convert=ConvertStep(
            status="skipped", reason=f"no converter produces {key} here (precision {k.precision})"))


def _check_source_outside(source, ws) -> None:
    """A model file inside the workspace it is converted into would be removed or overwritten by
    the run that reads it (``--force``, or a fresh start): refused before anything is touched."""
    path = getattr(source, "path", None)
    if not path:
        return
    try:
        inside = Path(str(path).split(":")[0] if ".py:" in str(path) else path).resolve().is_relative_to(ws.root)
    except (OSError, ValueError):
        return
    if inside:
        raise UserInputError(f"{path} lies inside the workspace {ws.root} it would be converted into; a fresh start "
                             "or --force would remove it before it is read",
                             hint="copy the model out of the workspace, or give another --model-name")


def run(model: Any, samples: Any, config: NavigatorConfig, reporter, *, verify_func=None,
        defer_profiles: bool = False) -> RunOutcome:
    """The whole pipeline for one model (navigator.pipeline's docstring). ``defer_profiles``:
    profiles that cannot be reused from the last run are not measured but left ``skipped``
    (:data:`~navigator.pipeline.tasks.DEFERRED`) for a later run to measure, unlike
    ``--no-profile``, which drops them (convert-many's build phase). The run's workers are forks
    of one server that imports the frameworks once (:mod:`navigator.execution.forkserver`), unless
    ``no_warm_workers``."""
    from navigator.execution import forkserver

    from navigator.execution.compile_cache import run_caches

    with run_caches():
        server = forkserver.for_run(model, config)
        try:
            return _run(model, samples, config, reporter, verify_func=verify_func, defer_profiles=defer_profiles,
                        server=server)
        finally:
            if server is not None:
                server.close()


SAMPLE_S = 0.25   # the shortest window the free cores are measured over


def _busy_cores(since: CpuUse) -> float | None:
    """Cores other processes kept busy since ``since``, over at least a quarter of a second."""
    now = CpuUse.now()
    if now.wall - since.wall < SAMPLE_S:
        time.sleep(SAMPLE_S - (now.wall - since.wall))
        now = CpuUse.now()
    return now.others_since(since)


def _run(model: Any, samples: Any, config: NavigatorConfig, reporter, *, verify_func, defer_profiles: bool,
         server) -> RunOutcome:
    t0 = time.perf_counter()
    # what other processes use meanwhile sizes the parallel work (auto --jobs)
    cpu_at_start = CpuUse.now()
    explicit_memory_gb = config.worker_memory_gb
    config = config.resolved()
    device, runner_devices = resolve_device(config.device)
    prep = prepare(model, samples, config, reporter, forkserver=server)
    if server is not None:   # importing while the run plans, writes the workspace and runs the reference
        server.start()
    ws, source = prep.ws, prep.source
    targets, dropped = requested_targets(config, source, device)
    planned, unsupported = plan_formats(config, source, targets)
    try:
        ws.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:   # the workdir is a file, read-only, … : bad input, not a bug
        raise UserInputError(f"--workdir: cannot create {ws.root}: {e.strerror or e}") from None
    timings: dict = {"prepare_s": time.perf_counter() - t0}
    with WorkspaceLock(ws.lock_path):
        ws.check_no_links()
        ws.remove_stray_temp_files()   # of a run killed outright (SIGKILL): nothing else removed them
        handler = _install_log_handler(ws)
        ctx = None
        try:
            log.info("navigator convert %s into %s (device %s)", source.path or type(source.obj).__name__, ws.root,
                     device)
            _check_source_outside(source, ws)
            old = previous_record(ws)
            check_same_model(prep, old, config)
            previous = resumable(prep, config)
            if old is not None and previous is None and old.formats:
                why = "--force" if config.force else "the model, samples or shape profiles changed since the last run"
                line = (f"starting afresh ({why}): the last run's formats {', '.join(old.formats)} are removed "
                        "and redone as planned")
                log.warning("%s", line)
                reporter.warn(line)
            st = write_workspace(prep, config, device, keep=previous is not None)
            if previous is not None:
                log.info("resuming: the model, samples and profiles are unchanged since %s", previous.updated)
                reporter.info("resuming: unchanged steps of the last run are reused (--force redoes them)")
            ctx = RunContext(config=config, ws=ws, status=st, source=source, device=device, reporter=reporter,
                             runner_devices=runner_devices, resume_from=previous,
                             verify_func=verify_func, book=RunBook(timings=timings), defer_profiles=defer_profiles,
                             forkserver=server)
            ctx.race.since = cpu_at_start
            busy = None if config.jobs or config.no_race or len(planned) < 2 else _busy_cores(cpu_at_start)
            ctx.par.jobs = schedule.job_count(config.jobs, explicit_memory_gb=explicit_memory_gb,
                                              no_race=config.no_race, size_bytes=schedule.model_bytes(source.path),
                                              busy_cores=busy)
            log.info("up to %d format workers at once (--jobs%s)", ctx.par.jobs, "" if busy is None else
                     f"; other processes kept {busy:.1f} of {affinity_cores()} cores busy")
            if server is not None:
                log.info("warm workers: each worker is a fork of the fork server %s, which imports %s "
                         "(--no-warm-workers: fresh interpreters)", server.pid, ", ".join(server.preload))
            if ctx.is_live:
                ctx.live = source.live_callable()
            _record_unavailable(ctx, unsupported, dropped)
            reporter.plan(ws, [p.key for p in planned], unsupported)
            run_formats(ctx, planned)
            if previous is not None:   # formats of the last run that this one did not plan keep their records
                for key, fs in previous.formats.items():
                    if key not in st.formats and ws.format_dir(key).is_dir():
                        st.formats[key] = fs
            st.best = outcome_mod.select_best(st, no_profile=config.no_profile)
            st.state = "complete"
            ctx.save()
            if config.triton_repo:   # --triton-repo: the Triton repository of the best format (navigator.triton)
                from navigator.triton import after_convert
                after_convert(ws.root, st, config.triton_repo, reporter)
            code, failures = outcome_mod.outcome_code(st, [t for t in targets if t in st.formats])
            timings["total_s"] = time.perf_counter() - t0
            timings["process_starts"] = ctx.book.process_starts
            log.info("done in %.2f s with %d worker processes", timings["total_s"], ctx.book.process_starts)
            return RunOutcome(ws, st, code, failures, targets, timings,
                              memory_tree=getattr(getattr(source, "io", None), "memory_tree", None))
        except KeyboardInterrupt as e:
            ws.remove_stray_temp_files()   # the workers stopped with the run may have been writing
            if ctx is not None:
                ctx.status.state = "interrupted"
                _save_if_possible(ctx)
            stopped = Interrupted(f"{'terminated' if isinstance(e, Terminated) else 'interrupted'}; the workspace "
                                  "records state: interrupted")
            stopped.exit_code = 143 if isinstance(e, Terminated) else 130
            raise stopped from None
        except NavigatorError:
            ws.remove_stray_temp_files()
            if ctx is not None and ctx.status.state == "running":
                ctx.status.state = "interrupted"   # never leave `running` behind
                _save_if_possible(ctx)
            raise
        except OSError as e:
            if e.errno not in DISK_FULL_ERRNOS:
                log.exception("internal error")
                e.navigator_log = str(ws.log_path)
                raise
            log.error("the disk is full: %s", e)
            ws.remove_stray_temp_files()
            if ctx is not None and ctx.status.state == "running":
                ctx.status.state = "interrupted"
                _save_if_possible(ctx)
            where = f" writing {e.filename}" if e.filename else ""
            raise WorkspaceFull(ws, f"{e.strerror or e}{where}") from None
        except Exception as e:
            log.exception("internal error")
            e.navigator_log = str(ws.log_path)   # the CLI names it in its one line
            raise
        finally:
            logging.getLogger("navigator").removeHandler(handler)
            handler.close()
