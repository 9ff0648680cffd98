"""Running the planned formats: one job per format, parents first; the source's job
also computes the reference outputs (or, with ``--reference KEY``, that format's chain
runs first and the reference comes from it)."""

from __future__ import annotations

import dataclasses
import logging
import time

from navigator import deps, formats
from navigator.errors import UserInputError
from navigator.execution.jobs import RunnerTask, Task
from navigator.pipeline import progress, resume
from navigator.pipeline.context import RunContext
from navigator.pipeline.diskfull import WorkspaceFull, says_disk_full
from navigator.pipeline.dispatch import run_job, run_job_in_process
from navigator.pipeline.events import explain_skips, skip_runners
from navigator.pipeline.race import defer_profile, queue_for_race, release_peers, run_race, screen_here
from navigator.pipeline.schedule import run_parallel
from navigator.pipeline.reproduce import write_reproduce
from navigator.pipeline.digests import artifact_sha256
from navigator.pipeline.tasks import (DEFERRED, converted_task, format_task, reference_task, runner_specs,  # noqa: F401
                                     sys_path_for)
from navigator.workspace import npz
from navigator.workspace.status import ConvertStep, FormatStatus, ProfileStep, RunnerStatus, VerifyStep

log = logging.getLogger(__name__)



def run_formats(ctx: RunContext, planned) -> None:
    """One worker per format, parents first; the first one also computes the reference; then
    the race worker profiles what the format workers verified."""
    st = ctx.status
    for item in planned:
        k = formats.parse_key(item.key)
        fs = FormatStatus(format=k.format, precision=k.precision,
                          path=ctx.ws.inner(ctx.ws.format_dir(item.key) / formats.file_name(k.format)),
                          parent=item.parent, isolated=ctx.source.isolated if item.converter is None else True)
        fs.io_names = {t.name: t.name for t in st.signature.inputs + st.signature.outputs}
        for spec in runner_specs(ctx, k.format):
            fs.runners[spec.key] = RunnerStatus(runner=spec.runner, device=spec.device, provider=spec.provider,
                                                verify=VerifyStep(reason="pending"),
                                                profile=ProfileStep(reason="pending"))
        st.formats[item.key] = fs
    ctx.save()
    try:
        with progress.Heartbeat(ctx):   # a line with the elapsed time for every step running long
            start = time.perf_counter()
            _run_planned(ctx, planned)
            ctx.book.timings["formats_s"] = time.perf_counter() - start
            start = time.perf_counter()
            run_race(ctx)   # every profile still to measure, alone, once every format is verified
            ctx.book.timings["race_s"] = time.perf_counter() - start
    finally:
        release_peers(ctx)   # a live module's runners kept for a race that a stopped run never reached


def _run_planned(ctx: RunContext, planned) -> None:
    st = ctx.status
    ref = ctx.config.reference
    if not ref or ref == ctx.source.key:
        if ctx.par.jobs > 1 and len(planned) > 1:   # the source and one child overlap too (reference first)
            via = {p.key: p.converter.via for p in planned if routable(ctx, p)}
            run_parallel(ctx, planned, run_item, waits_for=lambda item: via.get(item.key))
            return
        for item in planned:
            run_item(ctx, item)
        return
    # --reference FORMAT: convert that format's chain first, take the reference from it,
    # then verify and profile everything against it
    chain = _chain(planned, ref)
    first = [p for p in planned if p.key in chain]
    for item in first:
        run_item(ctx, item, verify=False)
    _reference_from(ctx, ref)
    for item in first:
        if st.formats[item.key].convert.status == "ok":
            run_item(ctx, item, convert=False)
    for item in planned:
        if item.key not in chain:
            run_item(ctx, item)


def _chain(planned, key: str) -> set[str]:
    """``key`` and every format it is made from."""
    parents = {p.key: p.parent for p in planned}
    chain = set()
    while key is not None and key not in chain:
        chain.add(key)
        key = parents.get(key)
    return chain


def _reference_from(ctx: RunContext, key: str) -> None:
    """Reference outputs from format ``key``'s first runner that runs here (--reference)."""
    fs = ctx.status.formats[key]
    if fs.convert.status != "ok":
        raise UserInputError(f"--reference {key}: that format was not converted ({fs.convert.reason})")
    specs = runner_specs(ctx, fs.format)
    if not specs:
        raise UserInputError(f"--reference {key}: no runner for format {fs.format} on {ctx.device}")
    spec = specs[0]
    sig = ctx.status.signature
    options = {"inputs": [fs.io_names.get(n, n) for n in sig.input_names],
               "outputs": [fs.io_names.get(n, n) for n in sig.output_names], "precision": fs.precision}
    task = reference_task(ctx, fs.path, RunnerTask.of(spec, **options), io_names=fs.io_names)
    run_job(ctx, "reference", [task], ctx.ws.reference_worker_log, [])
    if not ctx.ws.reference_files():
        raise_reference_failed(ctx)
    ctx.status.samples.reference = {"key": key, "runner": spec.key}
    ctx.save()


def run_item(ctx: RunContext, item, *, convert: bool = True, verify: bool = True) -> None:
    """One format: export or convert it (``convert``), then verify and profile it in
    its worker (``verify``; without it the job converts only)."""
    st = ctx.status
    fs = st.formats[item.key]
    ctx.ws.format_dir(item.key).mkdir(parents=True, exist_ok=True)
    if not convert:
        run_tasks(ctx, item, [_deferred(ctx, fs, converted_task(ctx, item, format_task(ctx, item, fs)))])
        return
    route = None
    if item.converter is None:
        export_source(ctx, item, fs)
        if fs.convert.status != "ok":
            skip_runners(fs, "the source could not be brought into the workspace")
            return
    else:
        parent = st.formats[item.parent]
        if parent.convert.status != "ok":
            fs.convert = ConvertStep(status="skipped", reason=f"its parent {item.parent} was not converted")
            skip_runners(fs, fs.convert.reason)
            ctx.reporter.step_end(item.key, "convert", None, fs.convert.to_dict())
            return
        # reproduce.sh is written even when this machine cannot run the edge:
        # users rebuild the artifact where its packages are (e.g. a Triton container)
        write_reproduce(ctx, item, fs, format_task(ctx, item, fs))
        why_not = cannot_convert_here(ctx, item.converter)
        if why_not:
            fs.convert = ConvertStep(status="skipped", reason=why_not)
            skip_runners(fs, why_not)
            ctx.reporter.step_end(item.key, "convert", None, fs.convert.to_dict())
            return
        fs.convert.inputs_sha256 = resume.convert_hash(ctx, item)
        route = worker_route(ctx, item)
        if route is not None:   # made from that format: its hash and reproduce script are the route's
            via, edge = route
            routed = _routed_task(ctx, item, fs, via, edge)
            route = via, edge, routed
            routed_item = dataclasses.replace(item, parent=via, converter=edge)
            fs.convert.inputs_sha256 = resume.convert_hash(ctx, routed_item, routed.convert.params)
            write_reproduce(ctx, routed_item, fs, routed)
    if not fs.runners:
        log.info("%s: no runner for format %s on %s", item.key, fs.format, ctx.device)
    task = format_task(ctx, item, fs)
    if item.converter is None:
        write_reproduce(ctx, item, fs, task)
    reference_kept = (item.converter is None and ctx.resume_from is not None
                      and ctx.resume_from.samples.reference == st.samples.reference
                      and len(ctx.ws.reference_files()) == st.samples.count
                      and ctx.resume_from.samples.reference_sha256 == npz.files_sha256(ctx.ws.reference_files()))
    if reference_kept:
        st.samples.reference_sha256 = ctx.resume_from.samples.reference_sha256
    task, raced = resume.reuse(ctx, item, task)
    if raced:
        queue_for_race(ctx, item, raced)
    task = _deferred(ctx, fs, task)
    if task is None:   # every step of this format is unchanged since the last run
        old = ctx.resume_from.formats.get(item.key) if ctx.resume_from else None
        fs.peak_rss_mb = old.peak_rss_mb if old else None
        explain_skips(fs, ctx.config)
        ctx.save()
        return
    in_process = item.converter is not None and (
        item.converter.needs_live and ctx.is_live
        or item.converter.__module__ == "__main__")   # a class of the user's script: no worker can import it
    route = route if task.convert is not None and in_process else None
    route_failed = _convert_via(ctx, item, fs, task, *route) if route is not None else None
    if route is not None and route_failed is None:
        in_process = False
        task = converted_task(ctx, item, task)
    if task.convert is not None and in_process:
        ctx.status.formats[item.key].isolated = False
        conversion_only = Task.from_dict(task.to_dict())
        conversion_only.runners, conversion_only.profile = [], None
        run_job_in_process(ctx, item.key, [conversion_only])       # the module exists only here
        task = converted_task(ctx, item, task)
        if route_failed:   # the route from the other format failed first: say so
            fs.convert.reason = "; ".join(x for x in (route_failed, fs.convert.reason) if x)
        if fs.convert.status != "ok":
            skip_runners(fs, "conversion failed")
            ctx.save()
            return
    if not verify:
        task = Task.from_dict(task.to_dict())
        task.runners, task.profile = [], None
    tasks = [task]
    own_reference = ctx.config.reference in (None, ctx.source.key) and not reference_kept
    if item.converter is None and ctx.source.reference_runner and own_reference:
        tasks.insert(0, reference_task(ctx, fs.path, ctx.source.reference_runner))
    elif item.converter is None and ctx.par.reference_ready is not None and ctx.ws.reference_files():
        ctx.par.reference_ready.set()   # computed already (a torch source, a kept one): its children may start
    run_tasks(ctx, item, tasks)
    if item.converter is None and verify and not ctx.ws.reference_files():
        raise_reference_failed(ctx)


def routable(ctx: RunContext, item) -> type | None:
    """The edge that makes ``item`` in a worker from the format its live-object edge names
    (``Converter.via``), when this run can take that route: a live object, formats in parallel
    (the route's point: the calling process exports one thing after another, workers run beside
    it), that format planned from the same parent, the edge's parameters allowing it, and the
    other edge able to run here. None otherwise."""
    from navigator.converters.registry import registry

    conv = item.converter
    # its own via only: a subclass that exports otherwise (its convert) must not be bypassed
    if conv is None or not vars(conv).get("via") or not conv.needs_live or not ctx.is_live or ctx.par.jobs <= 1:
        return None
    via = ctx.status.formats.get(conv.via)
    if via is None or via.parent != item.parent or not conv.via_allowed(conv.params_from_config(ctx.config)):
        return None
    fmt = formats.parse_key(conv.via).format
    edge = next((e for e in registry.edges() if e.source == fmt and e.target == conv.target), None)
    return edge if edge is not None and cannot_convert_here(ctx, edge) is None else None


def worker_route(ctx: RunContext, item) -> tuple[str, type] | None:
    """(format, edge) to convert ``item`` from in a worker now (:func:`routable`), once that format
    was converted with dynamic shapes (one frozen to the samples' shapes would freeze this one
    too, where the live object's own export may not); None: convert from the live object."""
    edge = routable(ctx, item)
    via = item.converter.via if edge is not None else None
    if via is None or ctx.status.formats[via].convert.status != "ok" or via in ctx.book.static_keys:
        return None
    return via, edge


def _routed_task(ctx: RunContext, item, fs: FormatStatus, via: str, edge: type) -> Task:
    """The conversion-only task that makes ``item`` with ``edge`` from format ``via``; the route
    edge's parameters, with those the user set for the usual edge where both have them."""
    from navigator.execution.jobs import ConvertSpec
    from navigator.pipeline.tasks import params_dict

    own = params_dict(edge.params_from_config(ctx.config))
    main = params_dict(item.converter.params_from_config(ctx.config))
    task = format_task(ctx, item, fs)
    task.runners, task.profile = [], None
    task.convert = ConvertSpec(converter=edge.import_path(), source=ctx.status.formats[via].path, output=fs.path,
                               params=own | {k: v for k, v in main.items() if k in own and v is not None},
                               device=ctx.device)
    return task


def _convert_via(ctx: RunContext, item, fs: FormatStatus, task: Task, via: str, edge: type,
                 routed: Task) -> str | None:
    """Run ``routed`` (:func:`_routed_task`: ``item`` made with ``edge`` from format ``via``) in a
    worker; None when it converted, else why not -- the usual edge's hash and reproduce script come
    back, and the caller converts from the live object with ``task``, keeping that reason."""
    run_job(ctx, item.key, [routed], ctx.ws.worker_log(item.key), sys_path_for(edge))
    if fs.convert.status == "ok":
        fs.convert.reason = "; ".join(x for x in (f"converted from {via} in a worker", fs.convert.reason) if x)
        return None
    why = f"from {via} in a worker: {fs.convert.status}: {fs.convert.reason}"
    ctx.reporter.warn(f"{item.key}: the conversion {why[:300]}; exporting it from the live module instead")
    log.warning("%s: the conversion %s; exporting it from the live module instead", item.key, why)
    fs.convert = ConvertStep(inputs_sha256=resume.convert_hash(ctx, item))
    write_reproduce(ctx, item, fs, task)
    ctx.par.converted.discard(item.key)
    ctx.save()
    return why[:600]


def _deferred(ctx: RunContext, fs: FormatStatus, task: Task | None) -> Task | None:
    """``task`` without its profile when the run defers profiles (RunContext.defer_profiles);
    the runners' profiles say so."""
    if task is None or task.profile is None or not ctx.defer_profiles:
        return task
    task = Task.from_dict(task.to_dict())
    task.profile = None
    for spec in task.runners:
        fs.runners[spec.key].profile = ProfileStep(status="skipped", reason=DEFERRED)
    return task


def run_tasks(ctx: RunContext, item, tasks: list[Task]) -> None:
    fs = ctx.status.formats[item.key]
    if item.converter is None and ctx.is_live:   # no worker has the object: screened in this process
        run_job_in_process(ctx, item.key, [screen_here(t) for t in tasks])
    else:   # a worker: its profiles wait for the race (navigator.pipeline.race)
        tasks = [defer_profile(ctx, item, t) for t in tasks]
        run_job(ctx, item.key, tasks, ctx.ws.worker_log(item.key), sys_path_for(item.converter))
    explain_skips(fs, ctx.config)
    ctx.save()


def cannot_convert_here(ctx: RunContext, converter) -> str | None:
    """Why this edge is skipped on this machine (a missing package names it), or None."""
    missing = deps.missing(converter.requires)
    if missing:
        return f"needs the package(s) {', '.join(missing)}, which are not installed"
    if ctx.device not in converter.devices:
        return f"{converter.name} runs on {', '.join(converter.devices)}, not on {ctx.device}"
    if converter.needs_live and ctx.is_live and "cpu" not in converter.devices:
        return (f"{converter.name} needs the module on the GPU, and a live module stays in the calling process, "
                "which never initialises CUDA; pass path/to/file.py:factory so a worker can build it")
    return converter.unavailable_reason(ctx.device)


def raise_reference_failed(ctx: RunContext) -> None:
    from navigator.errors import plain_reason
    from navigator.execution.isolation import log_tail

    tail = log_tail(ctx.ws.reference_log, 8) or log_tail(ctx.ws.worker_log(ctx.source.key), 8)
    # the log's tail ends a traceback: keep its message lines, not the source lines and ^^^^ markers
    lines = [ln.strip() for ln in tail.splitlines()
             if ln.strip() and not ln[:1].isspace() and not ln.startswith("Traceback")]
    cause = plain_reason(" / ".join(lines[-2:]) or "see navigator.log", 300)
    samples = ctx.status.samples
    if samples.source == "generated":   # the model rejects what we made up: say what we made and the cure
        made = ", ".join(f"{n}: {'x'.join(map(str, shape)) or 'scalar'}"
                         for n, shape in (samples.shapes or [{}])[0].items())
        raise UserInputError(f"the model does not run on the generated samples ({made}): {cause}",
                             hint="give the sizes it takes (--shapes NAME:8x3x640x640), real inputs (--samples "
                                  "DIR) or the values it expects (--value-ranges NAME:LO,HI)")
    raise UserInputError(f"the reference outputs could not be computed from the source model ({cause})")


def export_source(ctx: RunContext, item, fs: FormatStatus) -> None:
    start = time.perf_counter()
    ctx.reporter.step_start(item.key, "export", None)
    progress.opened(ctx, item.key, "export", None)
    try:
        info = ctx.source.export(ctx.ws, ctx.ws.abs(fs.path)) or {}
        fs.convert = ConvertStep(status="ok", duration_s=round(time.perf_counter() - start, 4),
                                 exporter=info.get("exporter"), inputs_sha256=ctx.status.model.sha256)
        fs.convert.artifact_sha256 = artifact_sha256(ctx.ws, fs)
    except UserInputError:
        raise
    except Exception as e:
        log.exception("export failed")
        fs.convert = ConvertStep(status="failed", reason=f"{type(e).__name__}: {e}",
                                 duration_s=round(time.perf_counter() - start, 4))
    progress.closed(ctx, item.key, "export", None)
    ctx.reporter.step_end(item.key, "export", None, fs.convert.to_dict())
    if fs.convert.status == "failed" and says_disk_full(fs.convert.reason):
        raise WorkspaceFull(ctx.ws, f"{item.key} export: {fs.convert.reason[:200]}")
    ctx.save()
