"""Applying a worker's events to the run's record: each stage's end becomes its step
in status.yaml (saved at once, so the file always tells where a run is); a worker that
died leaves its open and remaining stages ``failed`` with the reason and log tail."""

from __future__ import annotations

from navigator.execution.jobs import ConvertResult, Event, Task
from navigator.pipeline import progress
from navigator.pipeline.context import RunContext
from navigator.pipeline.digests import artifact_sha256
from navigator.workspace import npz
from navigator.workspace.status import ConvertStep, ProfileStep, RunnerStatus, VerifyStep


def apply_event(ctx: RunContext, event: Event) -> None:
    if event.event == "start":
        progress.opened(ctx, event.key, event.stage, event.runner)
        ctx.reporter.step_start(event.key, event.stage, event.runner)
        return
    progress.closed(ctx, event.key, event.stage, event.runner)
    result = dict(event.result)
    if event.stage == "reference":
        if result.get("status") == "ok":
            _drop_samples(ctx, [d["sample"] for d in result.get("dropped") or []], result.get("dropped") or [])
            refine_output_dims(ctx)
            ctx.status.samples.reference_sha256 = npz.files_sha256(ctx.ws.reference_files())
            if ctx.par.reference_ready is not None:   # formats made from the source may start now
                ctx.par.reference_ready.set()
        ctx.reporter.step_end("reference", event.stage, None, result)
        ctx.save()
        return
    key = event.key
    fs = ctx.status.formats[key]
    rel_log = ctx.ws.inner(ctx.ws.stage_log(key, event.stage))
    if event.stage == "convert":
        conv = ConvertResult.from_dict(result)
        fs.convert = ConvertStep(status=conv.status, reason=conv.reason or ("; ".join(conv.notes) or None),
                                 duration_s=conv.duration_s, exporter=conv.exporter,
                                 inputs_sha256=fs.convert.inputs_sha256, log=rel_log,
                                 precision_share=conv.precision_share)
        if conv.status == "ok":
            fs.convert.artifact_sha256 = artifact_sha256(ctx.ws, fs)
        fs.io_names.update(conv.io_names)
        ctx.par.converted.add(key)
        if conv.static_shapes:
            ctx.book.static_keys.add(key)
    else:
        rs = fs.runners[event.runner]
        hashed = ctx.book.step_hashes.get((key, event.runner, event.stage))
        if event.stage == "verify":
            rs.verify = VerifyStep.from_dict(result | {"log": rel_log, "inputs_sha256": hashed})
            if rs.verify.status == "ok" and ctx.verify_func is not None:
                apply_verify_func(ctx, key, event.runner, rs)
        elif event.stage == "profile":
            rs.profile = ProfileStep.from_dict(result | {"log": rel_log, "inputs_sha256": hashed})
    ctx.reporter.step_end(key, event.stage, event.runner, result)
    ctx.save()


def _drop_samples(ctx: RunContext, stems: list[str], dropped: list[dict]) -> None:
    """Profile-corner samples the source model refused: out of the record (the worker renumbered the files)."""
    if not stems:
        return
    info = ctx.status.samples
    gone = {int(s) for s in stems}
    kept = [i for i in range(len(info.shapes)) if i not in gone]
    for d in dropped:
        shapes = info.shapes[int(d["sample"])]
        why = f"the model does not run at the profile corner {shapes}: {d['reason']}; it is left out of verification"
        ctx.reporter.warn(why)
    info.corners = [kept.index(i) for i in info.corners if i not in gone]
    info.shapes = [info.shapes[i] for i in kept]
    info.count = len(info.shapes)


def refine_output_dims(ctx: RunContext) -> None:
    """An output dim the signature records as static but that differs between the reference outputs
    becomes -1 (dynamic): Triton configs and metadata must not freeze one sample's size."""
    import numpy as np

    shapes: dict[str, set] = {}
    for path in ctx.ws.reference_files():
        with np.load(path, allow_pickle=False) as data:
            for name in data.files:
                shapes.setdefault(name, set()).add(data[name].shape)
    for spec in ctx.status.signature.outputs:
        seen = shapes.get(spec.name)
        if not seen or any(len(s) != len(spec.shape) for s in seen):
            continue
        for axis, dim in enumerate(spec.shape):
            if dim >= 0 and len({s[axis] for s in seen}) > 1:
                spec.shape[axis] = -1


def apply_verify_func(ctx: RunContext, key: str, runner_key: str, rs: RunnerStatus) -> None:
    """The API's ``verify_func(reference, output) -> bool`` on every stored sample."""
    for ref_path in ctx.ws.reference_files():
        try:
            ok = bool(ctx.verify_func(npz.load(ref_path), npz.load(ctx.ws.output_file(key, runner_key, ref_path.stem))))
        except Exception as e:
            ok, why = False, f"verify_func raised {type(e).__name__}: {e}"
        else:
            why = f"verify_func rejected sample {ref_path.stem}"
        if not ok:
            rs.verify.status = "failed"
            rs.verify.reason = why
            return


def with_tail(reason: str, tail: str) -> str:
    if not tail:
        return reason
    last = [line for line in tail.splitlines() if line.strip()][-3:]
    return reason + " | log tail: " + " / ".join(x.strip()[:200] for x in last)


def finish_crashed(ctx: RunContext, tasks: list[Task], outcome) -> None:
    """Stages that a dead or killed worker never reported: failed (where it stopped)
    or failed as not run (after it)."""
    reason = outcome.reason or "the worker stopped"
    tail = outcome.log_tail
    done = {(e.task, e.stage, e.runner) for e in outcome.events if e.ended}
    where = outcome.open_stage
    for i, task in enumerate(tasks):
        if task.kind == "reference":
            continue
        fs = ctx.status.formats[task.key]
        worker_log = ctx.ws.inner(ctx.ws.worker_log(task.key))
        here = where is not None and where.task == i
        if task.convert is not None and (i, "convert", None) not in done:
            if here and where.stage == "convert" or fs.convert.status != "ok":
                fs.convert = ConvertStep(status="failed", reason=with_tail(reason, tail), log=worker_log)
                ctx.reporter.step_end(task.key, "convert", None, {"status": "failed", "reason": reason})
            continue
        for spec in task.runners:
            rs = fs.runners[spec.key]
            for stage in ("verify", "profile"):
                if (i, stage, spec.key) in done:
                    continue
                if stage == "profile" and (task.profile is None or rs.verify.status != "ok"):
                    continue
                step = rs.verify if stage == "verify" else rs.profile
                step.status = "failed"
                step.reason = with_tail(reason, tail) if here else f"not run: {reason}"
                step.log = worker_log
                ctx.reporter.step_end(task.key, stage, spec.key, {"status": "failed", "reason": reason})
    ctx.save()


def stage_durations(outcome) -> dict:
    out: dict = {}
    for e in outcome.events:
        if e.ended:
            out[e.stage] = out.get(e.stage, 0.0) + float(e.result.get("duration_s") or 0.0)
    return out


def explain_skips(fs, config) -> None:
    """Every skipped step says why (status.yaml's rule)."""
    for rs in fs.runners.values():
        if rs.verify.status == "skipped" and rs.verify.reason in (None, "", "pending"):
            rs.verify.reason = "not run"
        if rs.profile.status == "skipped" and rs.profile.reason in (None, "", "pending"):
            rs.profile.reason = ("--no-profile" if config.no_profile else
                                 "verification inconclusive: an unverified format is never measured for best"
                                 if rs.verify.status == "inconclusive" else
                                 "verification did not pass" if rs.verify.status != "ok" else "not run")


def skip_runners(fs, reason: str) -> None:
    for rs in fs.runners.values():
        rs.verify = VerifyStep(status="skipped", reason=reason)
        rs.profile = ProfileStep(status="skipped", reason=reason)
