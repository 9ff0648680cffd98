"""The pipeline: export -> convert -> verify -> profile -> select best.

One function per stage. The live source is handled in this process
(``prepare``); every file-to-file step runs in a worker (``run_formats``),
one per format, whose failures stay inside that format. The parent is the
only writer of status.yaml and saves it after every reported step, so the
file always tells where a run is.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from navigator import deps, formats, runners
from navigator._worker import DISK_FULL_ERRNOS, EXIT_DISK_FULL
from navigator.config import NavigatorConfig
from navigator.errors import Interrupted, NavigatorError, UserInputError
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.layout import Workspace
from navigator.workspace.lock import WorkspaceLock
from navigator.workspace.status import (Best, ConvertStep, FormatStatus, ModelInfo, ProfileStep, RunnerStatus,
                                        SamplesInfo, Status, VerifyStep)

log = logging.getLogger(__name__)

DEFAULT_TARGETS = {
    "onnx": ("onnx", "onnx-optimized", "openvino?"),   # "?" = only when its packages are installed
    "torch": ("torch", "torchscript", "torch_export", "onnx", "onnx-optimized"),
    "savedmodel": ("savedmodel", "onnx", "onnx-optimized"),
}
# Added to the defaults on a GPU: AOTInductor takes 10-25 s to compile on a CPU, so there only on request.
CUDA_DEFAULT_TARGETS = {"torch": ("aoti",)}


@dataclass
class RunContext:
    """What every stage of one run shares."""

    config: NavigatorConfig
    ws: Workspace
    status: Status
    source: Any
    device: str                      # where converters run: cuda when a GPU is used, else cpu
    reporter: Any
    runner_devices: tuple = ("cpu",)  # where formats are verified and profiled
    verify_func: Callable | None = None
    timings: dict = field(default_factory=dict)
    process_starts: int = 0
    static_keys: set = field(default_factory=set)   # formats exported with static shapes only
    resume_from: Status | None = None                # the previous record, when its inputs are unchanged
    step_hashes: dict = field(default_factory=dict)  # (key, runner key, stage) -> inputs_sha256

    def save(self) -> None:
        status_mod.save(self.status, self.ws.status_path)


# --------------------------------------------------------------------------- prepare
def resolve_device(device: str) -> tuple[str, tuple[str, ...]]:
    """(the device converters use, the devices runners run on).

    ``auto`` uses the GPU when the driver reports one (read from /proc, CUDA
    untouched) and keeps the CPU runners beside the CUDA ones, so a GPU machine
    without onnxruntime-gpu still verifies every format; ``cuda`` and ``cpu``
    mean that device alone."""
    gpu = deps.gpu_present()
    if device == "auto":
        return ("cuda", ("cuda", "cpu")) if gpu else ("cpu", ("cpu",))
    if device == "cuda" and not gpu:
        raise UserInputError("--device cuda: no NVIDIA GPU is visible on this machine (none in "
                             "/proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES hides them)", hint="use --device cpu")
    return device, (device,)


def _environment(device: str) -> dict:
    import platform

    env = {"python": platform.python_version(), "platform": platform.platform(),
           "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(), "gpu": None,
           "device": device, "packages": deps.versions()}
    try:
        names = sorted(os.listdir("/proc/driver/nvidia/gpus"))
        env["gpu"] = names or None
    except OSError:
        pass
    return env


def prepare(model: Any, samples: Any, config: NavigatorConfig, reporter) -> tuple[Workspace, Any, list[dict], dict]:
    """Open the source, read its signature, pick the workspace, take or generate
    the samples and derive the shape profiles. Writes nothing yet."""
    from navigator import samples as samples_mod
    from navigator.signature import detect_batch_dim
    from navigator.sources import open_source

    source = open_source(model, config.model_format, config.signature_name)
    name = config.model_name or source.name
    ws = Workspace.for_model(config.workdir, name)
    if source.signature is None:   # a framework object: its inputs come from the samples (or --shapes)
        raw, batch_dim = source.resolve(samples, config, config.batch_dim, config.no_batching)
        if raw is not None:
            samples = raw
    else:
        batch_dim = detect_batch_dim(source.signature, batch_dim=config.batch_dim, no_batching=config.no_batching)
    sig = source.signature
    info = SamplesInfo()
    if samples is not None and config.samples:
        raise UserInputError("samples given twice: as an argument and as --samples")
    if samples is not None:
        batches = samples_mod.from_iterable(samples, sig, count=config.sample_count or samples_mod.DEFAULT_TAKEN,
                                             batch_dim=batch_dim)
        info.source = "iterable"
    elif config.samples:
        batches = samples_mod.from_folder(config.samples, sig, count=config.sample_count, batch_dim=batch_dim)
        info.source = "folder"
    else:
        batches = samples_mod.generate(sig, shapes=list(config.shapes or []) or None,
                                       count=config.sample_count or samples_mod.DEFAULT_GENERATED,
                                       value_ranges=config.value_ranges, dtypes=config.dtypes,
                                       bounds=source.index_bounds, batch_dim=batch_dim, seed=config.seed)
        info.source = "generated"
        info.value_ranges = {spec.name: list(samples_mod.value_range(spec, config.value_ranges or {},
                                                                      source.index_bounds,
                                                                      (config.dtypes or {}).get(spec.name)))
                             for spec in sig.inputs}
    info.count = len(batches)
    info.shapes = [{k: list(v.shape) for k, v in b.items()} for b in batches]
    info.sha256 = samples_mod.samples_sha256(batches)
    warnings: list[str] = []
    if config.shape_profiles:
        profiles = [dict(p) for p in config.shape_profiles]
        for p in profiles:
            samples_mod.check_profile_covers(p, sig, [])     # names, ranks, static dims
        for i, batch in enumerate(batches):   # every sample inside at least one profile (prefill/decode)
            if not any(_inside(p, batch) for p in profiles):
                shapes = {n: list(a.shape) for n, a in batch.items()}
                raise UserInputError(f"sample {i} ({shapes}) lies outside every shape profile; widen "
                                     "--min-shapes/--max-shapes or give samples inside them")
    else:
        profile, warnings = samples_mod.derive_profile(sig, batches, batch_dim=batch_dim,
                                                       max_batch_size=config.max_batch_size)
        profiles = [profile]
    for w in warnings:
        log.warning("%s", w)
        reporter.warn(w)
    reference = source.complete(batches, batch_dim) if hasattr(source, "complete") else None
    _check_output_options(config, sig)
    meta = {"batch_dim": batch_dim, "profiles": profiles, "samples_info": info, "warnings": warnings,
            "reference": reference}
    return ws, source, batches, meta


def _inside(profile: dict, batch: dict) -> bool:
    return all(all(lo <= d <= hi for lo, d, hi in zip(profile[n]["min"], a.shape, profile[n]["max"]))
               for n, a in batch.items() if n in profile)


def _check_output_options(config: NavigatorConfig, sig) -> None:
    outputs = set(sig.output_names)
    for option, values in (("--compare", config.compare), ("--atol", config.atol), ("--rtol", config.rtol)):
        for name in values or {}:
            if name not in ("", "*") and name not in outputs:
                raise UserInputError(f"{option}: unknown output {name!r}; the model's outputs are "
                                     f"{', '.join(repr(n) for n in sig.output_names)}")


def write_workspace(ws: Workspace, source, batches: list[dict], meta: dict, config: NavigatorConfig,
                    device: str, *, keep: bool = False) -> Status:
    """The workspace's status.yaml (state running) and samples: from scratch, or keeping
    the artifacts and reference outputs of an earlier run (``keep``, when resuming)."""
    from navigator._version import __version__

    for sub in (("jobs",) if keep else ("formats", "samples", "jobs", "report")):
        shutil.rmtree(ws.root / sub, ignore_errors=True)
    for i, batch in enumerate(batches):
        npz.save(ws.sample_file("inputs", i), batch)
    for i, outputs in enumerate(meta.get("reference") or []):
        npz.save(ws.sample_file("reference", i), outputs)
    st = Status(
        model=ModelInfo(name=ws.name, source_format=source.format,
                        path=str(source.path.resolve()) if source.path else None, sha256=source.sha256()),
        navigator_version=__version__, state="running", environment=_environment(device),
        signature=source.signature, batch_dim=meta["batch_dim"], shape_profiles=meta["profiles"],
        samples=meta["samples_info"], config=config.to_dict(),
    )
    st.config["device"] = device
    if source.reference_runner is None:
        st.samples.reference = {"key": source.key, "runner": "torch eager fp32, cpu, calling process"}
    elif config.reference in (None, source.key):
        runner = source.reference_runner
        st.samples.reference = {"key": source.key,
                                "runner": f"{runner['runner']}-{runner.get('provider') or runner['device']}",
                                **({"options": runner["options"]} if runner.get("options") else {})}
    st.created = status_mod.now()
    status_mod.save(st, ws.status_path)
    return st


# --------------------------------------------------------------------------- plan
def requested_targets(config: NavigatorConfig, source, device: str = "cpu") -> tuple[list[str], list[str]]:
    """(targets to plan, optional defaults dropped because a package is missing)."""
    from navigator.converters.registry import registry

    if config.targets:
        base = list(config.targets)
        optional: list[str] = []
    else:
        defaults = getattr(source, "default_targets", None) or DEFAULT_TARGETS.get(source.format, (source.key,))
        base = [t.rstrip("?") for t in defaults]
        if device == "cuda":
            base += list(CUDA_DEFAULT_TARGETS.get(source.format, ()))
        optional = [t.rstrip("?") for t in DEFAULT_TARGETS.get(source.format, ()) if t.endswith("?")]
    targets: list[str] = []
    for t in base:
        for p in config.target_precisions:
            key = t if p == "fp32" else f"{t}-{p}"
            if key not in targets:
                targets.append(key)
    dropped = []
    edges = {c.target: c for c in registry.edges()}
    for t in list(targets):
        conv = edges.get(t)
        if t in optional and conv is not None and deps.missing(conv.requires):
            targets.remove(t)
            dropped.append(t)
    if source.key not in targets:
        targets.insert(0, source.key)   # the first artifact is always verified: it anchors the others
    if config.reference and config.reference not in targets:
        targets.append(config.reference)
    return targets, dropped


def plan_formats(config: NavigatorConfig, source, targets: list[str]):
    """(planned formats, requested precision variants that no converter makes).
    Checks every converter's parameters, so bad ones stop the run before it writes."""
    from navigator.converters.planner import plan
    from navigator.converters.registry import registry

    edges = registry.edges()
    unsupported = []
    for t in targets:
        if t != source.key and t not in {e.target for e in edges}:
            key = formats.parse_key(t) if _is_key(t) else None
            if key is not None and key.precision != "fp32":
                unsupported.append(t)
    if config.runners:
        known = runners.known_runners()
        bad = [r for r in config.runners if r not in known]
        if bad:
            raise UserInputError(f"--runners: unknown runner {bad[0]!r}; known: {', '.join(known)}")
    if config.reference and source.reference_runner is None and config.reference != source.key:
        raise UserInputError(f"--reference {config.reference}: a {source.format} source is its own reference "
                             "(eager fp32 in the calling process); --reference is for file sources such as ONNX")
    if config.reference and config.reference != source.key:
        try:   # name the flag: the planner alone would call it an unknown *target*
            plan(source.key, [config.reference], edges)
        except UserInputError as e:
            raise UserInputError(f"--reference: {e.one_line()}") from None
    planned = plan(source.key, [t for t in targets if t not in unsupported], edges)
    names = {e.name for e in edges}
    unknown = sorted(set(config.converter_params or {}) - names)
    if unknown:
        raise UserInputError(f"converter_params: unknown converter {unknown[0]!r}; valid: {', '.join(sorted(names))}")
    for item in planned:
        if item.converter is not None:
            item.converter.params_from_config(config)
    return planned, unsupported


def _is_key(text: str) -> bool:
    try:
        formats.parse_key(text)
        return True
    except UserInputError:
        return False


# --------------------------------------------------------------------------- verify rules
def verify_settings(ctx: RunContext, key: str) -> dict:
    from navigator.validators.tolerances import rule_for

    k = formats.parse_key(key)
    cfg = ctx.config
    rules = {}
    for spec in ctx.status.signature.outputs:
        rule = rule_for(spec.name, spec.dtype, precision=k.precision, fmt=k.format, device=ctx.device,
                        compare=cfg.compare,
                        atol=cfg.atol, rtol=cfg.rtol)
        rules[spec.name] = {"mode": rule.mode, "atol": rule.atol, "rtol": rule.rtol, "threshold": rule.threshold}
    batch_dim = ctx.status.batch_dim
    sizes: list[int] = []
    if batch_dim is not None:
        full = max(s[ctx.status.signature.inputs[0].name][batch_dim] for s in ctx.status.samples.shapes)
        sizes = sorted(set(cfg.verify_batch_sizes or (1, full)))
        if len(sizes) < 2:
            sizes = sorted(set(sizes) | {2 if full == 1 else 1})
    return {"rules": rules, "allow_nan": cfg.allow_nan, "error_stat": cfg.error_stat, "batch_sizes": sizes,
            "batch_dim": batch_dim}


def profile_settings(ctx: RunContext) -> dict | None:
    if ctx.config.no_profile:
        return None
    settings = {"max_batch_size": ctx.config.max_batch_size, "budget_s": ctx.config.profile_budget_s}
    if ctx.config.profile_batch_sizes:
        settings["batch_sizes"] = list(ctx.config.profile_batch_sizes)
        settings["max_batch_size"] = max(settings["max_batch_size"], *ctx.config.profile_batch_sizes)
    return {"batch_dim": ctx.status.batch_dim, "settings": settings}


# --------------------------------------------------------------------------- run formats
def _sys_path_for(cls) -> list[str]:
    """Folders a worker needs on sys.path to import ``cls`` (plugins defined outside site-packages)."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file or cls.__module__.startswith("navigator."):
        return []
    root = Path(file).resolve().parent
    for _ in range(cls.__module__.count(".")):
        root = root.parent
    return [str(root)]


def _runner_specs(ctx: RunContext, fmt: str) -> list:
    chosen = ctx.config.runners
    return [spec for device in ctx.runner_devices for spec in runners.specs_for(fmt, device)
            if not chosen or spec.runner in chosen]


def _format_task(ctx: RunContext, item, fmt_status: FormatStatus) -> dict:
    key = item.key
    sig = ctx.status.signature
    task: dict = {"kind": "format", "key": key, "artifact": fmt_status.path, "io_names": fmt_status.io_names,
                  "input_names": sig.input_names, "output_names": sig.output_names,
                  "verify": verify_settings(ctx, key), "profile": profile_settings(ctx), "runners": []}
    if item.converter is not None:
        conv = item.converter
        parent = ctx.status.formats[item.parent]
        params = conv.params_from_config(ctx.config)
        task["convert"] = {"converter": conv.import_path(), "source": parent.path, "output": fmt_status.path,
                           "params": _params_dict(params), "device": ctx.device}
    for spec in _runner_specs(ctx, fmt_status.format):
        entry = spec.to_dict() | {"key": spec.key}
        entry["options"] = {"precision": fmt_status.precision}
        if fmt_status.format == "aoti":
            entry["options"]["compiled_for"] = ctx.device
        task["runners"].append(entry)
    return task


def _params_dict(params) -> dict:
    import dataclasses

    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


def _write_reproduce(ctx: RunContext, item, fmt_status: FormatStatus, task: dict) -> None:
    import json
    import shlex

    from navigator.workspace.atomic import write_text

    fdir = ctx.ws.format_dir(item.key)
    conv = task.get("convert")
    lines = ["#!/usr/bin/env bash", f"# Rebuilds formats/{item.key} of this workspace.", "set -euo pipefail",
             'cd "$(dirname "$0")/../.."']
    if conv:
        write_text(fdir / "params.json", json.dumps(conv["params"], indent=1) + "\n")
        module = conv["converter"].split(":")[0]
        lines.append(" ".join(shlex.quote(x) for x in [
            "python", "-m", module, "--workspace", ".", "--source", conv["source"], "--output", conv["output"],
            "--params", f"formats/{item.key}/params.json", "--device", conv["device"]]))
        params = item.converter.params_from_dict(conv["params"])
        lines.extend(item.converter.reproduce_notes(params, conv["source"], conv["output"], ctx.status))
        script = item.converter.reproduce_py(params, conv["source"], conv["output"], ctx.status)
        if script:
            write_text(fdir / "reproduce.py", script)
            lines.insert(4, f"# the same with plain framework calls: python formats/{item.key}/reproduce.py")
    else:
        src = ctx.status.model.path or "<source>"
        lines.append(f"# {item.key} is the source model, copied from {shlex.quote(src)}")
        lines.append(f"cp {shlex.quote(src)} {shlex.quote(fmt_status.path)}")
    write_text(fdir / "reproduce.sh", "\n".join(lines) + "\n")
    os.chmod(fdir / "reproduce.sh", 0o755)


def _apply_event(ctx: RunContext, event: dict) -> None:
    key = event["key"]
    stage = event["stage"]
    if event["event"] == "start":
        ctx.reporter.step_start(key, stage, event.get("runner"))
        return
    result = dict(event["result"])
    if stage == "reference":
        ctx.reporter.step_end("reference", stage, None, result)
        return
    fs = ctx.status.formats[key]
    rel_log = f"formats/{key}/{stage}.log"
    if stage == "convert":
        notes = "; ".join(result.get("notes") or []) or None
        fs.convert = ConvertStep(status=result["status"], reason=result.get("reason") or notes,
                                 duration_s=result.get("duration_s"), exporter=result.get("exporter"),
                                 inputs_sha256=fs.convert.inputs_sha256, log=rel_log)
        if result.get("io_names"):
            fs.io_names.update(result["io_names"])
        if result.get("static_shapes"):
            ctx.static_keys.add(key)
    else:
        rs = fs.runners[event["runner"]]
        if stage == "verify":
            rs.verify = VerifyStep.from_dict(result | {"log": rel_log,
                                                        "inputs_sha256": ctx.step_hashes.get((key, event["runner"], "verify"))})
            if rs.verify.status == "ok" and ctx.verify_func is not None:
                _apply_verify_func(ctx, key, event["runner"], rs)
        elif stage == "profile":
            rs.profile = ProfileStep.from_dict(result | {"log": rel_log,
                                                          "inputs_sha256": ctx.step_hashes.get((key, event["runner"], "profile"))})
    ctx.reporter.step_end(key, stage, event.get("runner"), result)
    ctx.save()


def _apply_verify_func(ctx: RunContext, key: str, runner_key: str, rs: RunnerStatus) -> None:
    out_dir = ctx.ws.outputs_dir(key, runner_key)
    for ref_path in sorted(ctx.ws.reference_dir.glob("*.npz")):
        try:
            ok = bool(ctx.verify_func(npz.load(ref_path), npz.load(out_dir / ref_path.name)))
        except Exception as e:
            ok, why = False, f"verify_func raised {type(e).__name__}: {e}"
        else:
            why = f"verify_func rejected sample {ref_path.stem}"
        if not ok:
            rs.verify.status = "failed"
            rs.verify.reason = why
            return


def _finish_crashed(ctx: RunContext, tasks: list[dict], outcome) -> None:
    """Stages that a dead or killed worker never reported: failed (where it stopped)
    or failed as not run (after it)."""
    reason = outcome.reason or "the worker stopped"
    tail = outcome.log_tail
    done = {(e["task"], e["stage"], e.get("runner")) for e in outcome.events if e["event"] == "end"}
    where = outcome.open_stage
    for i, task in enumerate(tasks):
        if task["kind"] == "reference":
            continue
        fs = ctx.status.formats[task["key"]]
        here = where is not None and where["task"] == i
        if task.get("convert") and (i, "convert", None) not in done:
            if here and where["stage"] == "convert" or fs.convert.status != "ok":
                fs.convert = ConvertStep(status="failed", reason=_with_tail(reason, tail),
                                         log=f"formats/{task['key']}/worker.log")
                ctx.reporter.step_end(task["key"], "convert", None, {"status": "failed", "reason": reason})
            continue
        for spec in task["runners"]:
            rs = fs.runners[spec["key"]]
            for stage in ("verify", "profile"):
                if (i, stage, spec["key"]) in done:
                    continue
                if stage == "profile" and (not task.get("profile") or rs.verify.status != "ok"):
                    continue
                step = rs.verify if stage == "verify" else rs.profile
                step.status = "failed"
                step.reason = _with_tail(reason, tail) if here else f"not run: {reason}"
                step.log = f"formats/{task['key']}/worker.log"
                ctx.reporter.step_end(task["key"], stage, spec["key"], {"status": "failed", "reason": reason})
    ctx.save()


def _with_tail(reason: str, tail: str) -> str:
    if not tail:
        return reason
    last = [line for line in tail.splitlines() if line.strip()][-3:]
    return reason + " | log tail: " + " / ".join(x.strip()[:200] for x in last)


def run_job(ctx: RunContext, name: str, tasks: list[dict], log_path: Path, sys_path: list[str]) -> None:
    from navigator import isolation

    job = {"workspace": str(ctx.ws.root), "events": str(ctx.ws.jobs_dir / f"{name}.events.jsonl"),
           "tasks": tasks, "sys_path": sys_path, "log_level": "INFO", "parent_pid": os.getpid()}
    ctx.process_starts += 1
    start = time.perf_counter()
    outcome = isolation.run_worker(job, ctx.ws.jobs_dir / f"{name}.json", log_path,
                                   stage_timeout_s=ctx.config.timeout, on_event=lambda e: _apply_event(ctx, e),
                                   memory_limit_gb=ctx.config.worker_memory_gb)
    ctx.timings.setdefault("workers", []).append((name, time.perf_counter() - start, _stage_durations(outcome)))
    log.info("worker %s: %.2f s, peak RSS %s MiB", name, time.perf_counter() - start, outcome.peak_rss_mb)
    for task in tasks:
        fs = ctx.status.formats.get(task.get("key"))
        if task["kind"] == "format" and fs is not None and outcome.peak_rss_mb is not None:
            fs.peak_rss_mb = max(fs.peak_rss_mb or 0.0, outcome.peak_rss_mb)
    if outcome.returncode == EXIT_DISK_FULL:
        raise WorkspaceFull(ctx.ws, f"the worker of {name} could not write its events: No space left on device")
    if outcome.reason:
        log.warning("worker %s: %s", name, outcome.reason)
        if _says_disk_full(outcome.log_tail):
            raise WorkspaceFull(ctx.ws, f"the worker of {name} stopped: {outcome.reason}")
        _finish_crashed(ctx, tasks, outcome)
    _check_disk_full(ctx, tasks)


# --------------------------------------------------------------------------- a full disk
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "[Errno 28]", "[Errno 122]")


class WorkspaceFull(UserInputError):
    """The workspace's filesystem is full. Exit 2, as for an unwritable --workdir: the
    environment must change before any step can succeed. Not exit 1, which is a
    verdict on the model (a target failed) that --allow-failures turns into 0 and CI
    gates read as a regression; not exit 3, which is a Navigator bug."""

    def __init__(self, ws: Workspace, detail: str):
        super().__init__(f"no space left on the filesystem of the workspace {ws.root} ({detail}); status.yaml "
                         "keeps the last state it could write",
                         hint="free space or pass another --workdir, then run again: finished steps are reused")


def _says_disk_full(text: str | None) -> bool:
    return bool(text) and any(t in text for t in _DISK_FULL_TEXT)


def _check_disk_full(ctx: RunContext, tasks: list[dict]) -> None:
    """A step that failed because the disk is full stops the run: every later step
    would fail the same way, each with its own line."""
    for task in tasks:
        fs = ctx.status.formats.get(task.get("key"))
        if fs is None:
            continue
        steps = [("convert", fs.convert)] + [(f"{stage} on {rk}", getattr(rs, stage)) for rk, rs in
                                              fs.runners.items() for stage in ("verify", "profile")]
        for what, step in steps:
            if step.status == "failed" and _says_disk_full(step.reason):
                raise WorkspaceFull(ctx.ws, f"{task['key']} {what}: {step.reason.split(' | ')[0][:200]}")


def _stage_durations(outcome) -> dict:
    out: dict = {}
    for e in outcome.events:
        if e["event"] == "end":
            out[e["stage"]] = out.get(e["stage"], 0.0) + float(e["result"].get("duration_s") or 0.0)
    return out


def run_formats(ctx: RunContext, planned) -> None:
    """One worker per format, parents first; the first one also computes the reference."""
    st = ctx.status
    for item in planned:
        k = formats.parse_key(item.key)
        fdir = ctx.ws.format_dir(item.key)
        fs = FormatStatus(format=k.format, precision=k.precision,
                          path=ctx.ws.rel(fdir / formats.file_name(k.format)), parent=item.parent,
                          isolated=ctx.source.isolated if item.converter is None else True)
        fs.io_names = {t.name: t.name for t in st.signature.inputs + st.signature.outputs}
        for spec in _runner_specs(ctx, k.format):
            fs.runners[spec.key] = RunnerStatus(runner=spec.runner, device=spec.device, provider=spec.provider,
                                                verify=VerifyStep(reason="pending"),
                                                profile=ProfileStep(reason="pending"))
        st.formats[item.key] = fs
    ctx.save()
    ref = ctx.config.reference
    if not ref or ref == ctx.source.key:
        for item in planned:
            _run_item(ctx, item)
        return
    # --reference FORMAT: convert that format's chain first, take the reference from it,
    # then verify and profile everything against it
    chain = _chain(planned, ref)
    first = [p for p in planned if p.key in chain]
    for item in first:
        _run_item(ctx, item, verify=False)
    _reference_from(ctx, ref)
    for item in first:
        if st.formats[item.key].convert.status == "ok":
            _run_item(ctx, item, convert=False)
    for item in planned:
        if item.key not in chain:
            _run_item(ctx, item)


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
    specs = _runner_specs(ctx, fs.format)
    if not specs:
        raise UserInputError(f"--reference {key}: no runner for format {fs.format} on {ctx.device}")
    spec = specs[0]
    sig = ctx.status.signature
    options = {"inputs": [fs.io_names.get(n, n) for n in sig.input_names],
               "outputs": [fs.io_names.get(n, n) for n in sig.output_names], "precision": fs.precision}
    task = {"kind": "reference", "key": "reference", "artifact": fs.path, "runner": spec.to_dict(),
            "options": options, "io_names": dict(fs.io_names)}
    run_job(ctx, "reference", [task], ctx.ws.root / "samples" / "reference-worker.log", [])
    if not any(ctx.ws.reference_dir.glob("*.npz")):
        raise_reference_failed(ctx)
    ctx.status.samples.reference = {"key": key, "runner": spec.key}
    ctx.save()


def _run_item(ctx: RunContext, item, *, convert: bool = True, verify: bool = True) -> None:
    """One format: export or convert it (``convert``), then verify and profile it in
    its worker (``verify``; without it the job converts only)."""
    st = ctx.status
    fs = st.formats[item.key]
    fdir = ctx.ws.format_dir(item.key)
    fdir.mkdir(parents=True, exist_ok=True)
    if not convert:
        _run_tasks(ctx, item, [_converted_task(ctx, item, _format_task(ctx, item, fs))])
        return
    if item.converter is None:
        _export_source(ctx, item, fs)
        if fs.convert.status != "ok":
            _skip_runners(fs, "the source could not be brought into the workspace")
            return
    else:
        parent = st.formats[item.parent]
        if parent.convert.status != "ok":
            fs.convert = ConvertStep(status="skipped", reason=f"its parent {item.parent} was not converted")
            _skip_runners(fs, fs.convert.reason)
            ctx.reporter.step_end(item.key, "convert", None, fs.convert.to_dict())
            return
        # reproduce.sh is written even when this machine cannot run the edge:
        # users rebuild the artifact where its packages are (e.g. a Triton container)
        _write_reproduce(ctx, item, fs, _format_task(ctx, item, fs))
        why_not = _cannot_convert_here(ctx, item.converter)
        if why_not:
            fs.convert = ConvertStep(status="skipped", reason=why_not)
            _skip_runners(fs, why_not)
            ctx.reporter.step_end(item.key, "convert", None, fs.convert.to_dict())
            return
        fs.convert.inputs_sha256 = _convert_hash(ctx, item)
    if not fs.runners:
        log.info("%s: no runner for format %s on %s", item.key, fs.format, ctx.device)
    task = _format_task(ctx, item, fs)
    if item.converter is None:
        _write_reproduce(ctx, item, fs, task)
    reference_kept = (item.converter is None and ctx.resume_from is not None
                      and ctx.resume_from.samples.reference == st.samples.reference
                      and len(list(ctx.ws.reference_dir.glob("*.npz"))) == st.samples.count)
    task = _reuse(ctx, item, task)
    if task is None:   # every step of this format is unchanged since the last run
        old = ctx.resume_from.formats.get(item.key) if ctx.resume_from else None
        fs.peak_rss_mb = old.peak_rss_mb if old else None
        _explain_skips(fs, ctx.config)
        ctx.save()
        return
    live = _is_live(ctx)
    in_process = item.converter is not None and (
        item.converter.needs_live and live
        or item.converter.__module__ == "__main__")   # a class of the user's script: no worker can import it
    if task.get("convert") and in_process:
        _convert_in_process(ctx, item, task)       # the module exists only here
        task = _converted_task(ctx, item, task)
        if fs.convert.status != "ok":
            _skip_runners(fs, "conversion failed")
            ctx.save()
            return
    if not verify:
        task = dict(task, runners=[], profile=None)
    tasks = [task]
    own_reference = ctx.config.reference in (None, ctx.source.key) and not reference_kept
    if item.converter is None and ctx.source.reference_runner and own_reference:
        tasks.insert(0, {"kind": "reference", "key": "reference", "artifact": fs.path,
                         "runner": {k: v for k, v in ctx.source.reference_runner.items() if k != "options"},
                         "options": ctx.source.reference_runner.get("options", {})})
    _run_tasks(ctx, item, tasks)
    if item.converter is None and verify and not any(ctx.ws.reference_dir.glob("*.npz")):
        raise_reference_failed(ctx)


def _converted_task(ctx: RunContext, item, task: dict) -> dict:
    """The verify/profile task of a format converted earlier: no convert step, the
    artifact's names as converted, samples' shapes only when exported static."""
    task = dict(task, io_names=dict(ctx.status.formats[item.key].io_names))
    task.pop("convert", None)
    if item.key in ctx.static_keys:
        from navigator._worker import _static

        task = _static(task)
    return task


def _step_hash(*parts) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def resumable(ws: Workspace, source, meta: dict, config: NavigatorConfig) -> Status | None:
    """The earlier record of this workspace when a re-run may reuse its steps: not
    --force, and the same model digest (``Source.sha256``: a file's bytes; a SavedModel
    directory's whole tree; a ``file.py:factory``'s file, its sibling .py files and its
    reference outputs), samples, signature and shape profiles. Live objects (an
    nn.Module passed to the API) have no digest and always start afresh."""
    if config.force or not ws.status_path.is_file():
        return None
    try:
        old = status_mod.load(ws.status_path)
    except UserInputError as e:
        log.info("not resuming: %s", e.one_line())
        return None
    sha = source.sha256()
    same = (sha is not None and old.model.sha256 == sha and old.samples.sha256 == meta["samples_info"].sha256
            and old.signature.to_dict() == source.signature.to_dict() and old.batch_dim == meta["batch_dim"]
            and old.shape_profiles == meta["profiles"])
    return old if same else None


def _convert_hash(ctx: RunContext, item) -> str:
    from navigator._version import __version__

    if item.converter is None:
        return ctx.status.model.sha256 or _step_hash("live", ctx.source.key)
    conv = item.converter
    parent = ctx.status.formats[item.parent]
    return _step_hash(parent.convert.inputs_sha256, conv.name, _params_dict(conv.params_from_config(ctx.config)),
                      {m: deps.version(m) for m in conv.requires}, __version__)


def _reuse(ctx: RunContext, item, task: dict) -> dict | None:
    """Take from the earlier record what is unchanged; returns the task left to run
    (None when nothing is). Hashes of every step are noted for the new record."""
    fs = ctx.status.formats[item.key]
    old = ctx.resume_from.formats.get(item.key) if ctx.resume_from else None
    if old is not None and task.get("convert") and old.convert.status == "ok" \
            and old.convert.inputs_sha256 == fs.convert.inputs_sha256 and ctx.ws.abs(fs.path).exists():
        fs.convert = old.convert
        fs.io_names = dict(old.io_names)
        if "static shapes" in (old.convert.exporter or ""):
            ctx.static_keys.add(item.key)
        task = _converted_task(ctx, item, task)
        ctx.reporter.step_end(item.key, "convert", None, {"status": "ok", "reason": "reused, inputs unchanged"})
    kept = []
    for spec in task["runners"]:
        verify_hash = _step_hash(fs.convert.inputs_sha256, spec["key"], task["verify"], task.get("io_names"),
                                 ctx.status.samples.sha256, ctx.status.samples.reference)
        profile_hash = _step_hash(verify_hash, task.get("profile"))
        ctx.step_hashes[(item.key, spec["key"], "verify")] = verify_hash
        ctx.step_hashes[(item.key, spec["key"], "profile")] = profile_hash
        # a verify_func (a Python callable) cannot be compared with the last run's: verify again
        reusable = old is not None and not task.get("convert") and ctx.verify_func is None
        before = old.runners.get(spec["key"]) if reusable else None
        if (before is not None and before.verify.status == "ok" and before.verify.inputs_sha256 == verify_hash
                and (not task.get("profile") or (before.profile.status == "ok"
                                                 and before.profile.inputs_sha256 == profile_hash))):
            fs.runners[spec["key"]].verify = before.verify
            if task.get("profile"):
                fs.runners[spec["key"]].profile = before.profile
            ctx.reporter.step_end(item.key, "verify", spec["key"], {"status": "ok", "reason": "reused"})
            continue
        kept.append(spec)
    task = dict(task, runners=kept)
    return task if task.get("convert") or kept else None


def _run_tasks(ctx: RunContext, item, tasks: list[dict]) -> None:
    fs = ctx.status.formats[item.key]
    if item.converter is None and _is_live(ctx):
        _run_job_in_process(ctx, item.key, tasks)
    else:
        run_job(ctx, item.key, tasks, ctx.ws.format_dir(item.key) / "worker.log",
                _sys_path_for(item.converter) if item.converter else [])
    _explain_skips(fs, ctx.config)
    ctx.save()



def _is_live(ctx: RunContext) -> bool:
    """The source is an object of this process that no worker can rebuild."""
    return ctx.source.obj is not None and not getattr(ctx.source, "factory", None)


def _convert_in_process(ctx: RunContext, item, task: dict) -> None:
    """Run an edge that needs the live object here (isolated: false), as a worker would."""
    ctx.status.formats[item.key].isolated = False
    _run_job_in_process(ctx, item.key, [dict(task, runners=[], profile=None)])


def _run_job_in_process(ctx: RunContext, name: str, tasks: list[dict]) -> None:
    """A job run by this process (a live source, a converter of the user's __main__):
    the same code and events as a worker, without its process isolation or memory
    limit; the per-stage timeout is enforced as far as a thread allows
    (:func:`_run_in_thread`). CUDA runners are skipped: this process never
    initialises CUDA."""
    events = ctx.ws.jobs_dir / f"{name}.events.jsonl"
    events.parent.mkdir(parents=True, exist_ok=True)
    events.write_text("")
    kept = []
    for task in tasks:
        if task.get("kind") == "format":
            fs = ctx.status.formats[task["key"]]
            fs.isolated = False
            for spec in [r for r in task["runners"] if r["device"] != "cpu"]:
                rs = fs.runners[spec["key"]]
                why = ("a live module runs in the calling process, which never initialises CUDA; pass "
                       "path/to/file.py:factory (CLI) so a worker can rebuild it on the GPU")
                rs.verify = VerifyStep(status="skipped", reason=why)
                rs.profile = ProfileStep(status="skipped", reason=why)
            task = dict(task, runners=[r for r in task["runners"] if r["device"] == "cpu"])
        kept.append(task)
    job = {"workspace": str(ctx.ws.root), "events": str(events), "tasks": kept}
    start = time.perf_counter()
    outcome = _run_in_thread(ctx, name, job)
    ctx.timings.setdefault("workers", []).append((f"{name} (in process)", time.perf_counter() - start,
                                                   _stage_durations(outcome)))
    if outcome.reason:
        log.warning("in-process job %s: %s", name, outcome.reason)
        _finish_crashed(ctx, kept, outcome)
    _check_disk_full(ctx, kept)


class StageTimeout(BaseException):
    """Raised inside the thread of an in-process job whose stage ran past --timeout.
    A BaseException, so the stage's own ``except Exception`` does not turn it into an
    ordinary failure and the job stops where it is, as a killed worker would."""


IN_PROCESS_GRACE_S = 5.0   # how long a timed-out in-process stage gets to unwind before it is abandoned


def _async_raise(thread, exc_type) -> None:
    """Raise ``exc_type`` in ``thread`` at its next Python bytecode (CPython)."""
    import ctypes

    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def _run_in_thread(ctx: RunContext, name: str, job: dict):
    """Run an in-process job in a thread of its own and watch it as isolation.run_worker
    watches a worker: events are applied as they come, and a stage running past
    --timeout gets :class:`StageTimeout` raised in its thread. Python code stops at its
    next bytecode; a thread stuck in native code (a C++ export, a kernel, a blocking
    call) cannot be stopped from outside: after IN_PROCESS_GRACE_S it is abandoned
    (a daemon thread, its CPU and memory held until the process exits) and the run
    goes on. Returns an isolation.WorkerOutcome."""
    import threading

    from navigator import _worker
    from navigator.isolation import POLL_S, EventTail, WorkerOutcome

    box: dict = {}

    def target() -> None:
        try:
            box["code"] = _worker.run_job(job)
        except BaseException as e:   # noqa: B902 - handed to the watching thread
            box["error"] = e

    thread = threading.Thread(target=target, name=f"navigator-job-{name}", daemon=True)
    outcome = WorkerOutcome(returncode=None)
    tail = EventTail(Path(job["events"]))
    open_stage = None
    timed_out: tuple[float, dict] | None = None
    abandoned = False
    limit = ctx.config.timeout
    start = time.monotonic()
    thread.start()
    try:
        while True:
            alive = thread.is_alive()
            for event in tail.read():
                outcome.events.append(event)
                _apply_event(ctx, event)
            open_stage, stage_start = tail.open_stage, tail.stage_start
            if not alive:
                break
            now = time.monotonic()
            if timed_out is None and open_stage is not None and limit and now - stage_start > limit:
                timed_out = (now, open_stage)
                log.warning("in-process stage %s of %s ran past --timeout %g s: stopping its thread",
                            open_stage["stage"], open_stage["key"], limit)
                _async_raise(thread, StageTimeout)
            elif timed_out is not None and now - timed_out[0] > IN_PROCESS_GRACE_S:
                abandoned = True
                break
            thread.join(POLL_S)
    except BaseException:   # Ctrl-C or an error here: stop the job's thread too, as far as it can be
        _async_raise(thread, KeyboardInterrupt)
        raise
    outcome.open_stage = open_stage
    outcome.wall_s = time.monotonic() - start
    error = box.get("error")
    if timed_out is not None:
        stage = timed_out[1]["stage"]
        outcome.open_stage = open_stage or timed_out[1]
        outcome.reason = f"timed out after {limit:g} s in {stage} (--timeout) in the calling process"
        if abandoned:
            outcome.reason += (f"; it did not stop within {IN_PROCESS_GRACE_S:g} s (native code cannot be "
                               "interrupted), so its thread was abandoned and keeps running until the process "
                               "exits")
            log.error("in-process job %s: %s", name, outcome.reason)
        else:
            outcome.reason += "; its thread was stopped"
        return outcome
    if error is not None:
        raise error
    return outcome


def _cannot_convert_here(ctx: RunContext, converter) -> str | None:
    """Why this edge is skipped on this machine (a missing package names it), or None."""
    missing = deps.missing(converter.requires)
    if missing:
        return f"needs the package(s) {', '.join(missing)}, which are not installed"
    if ctx.device not in converter.devices:
        return f"{converter.name} runs on {', '.join(converter.devices)}, not on {ctx.device}"
    if converter.needs_live and _is_live(ctx) and "cpu" not in converter.devices:
        return (f"{converter.name} needs the module on the GPU, and a live module stays in the calling process, "
                "which never initialises CUDA; pass path/to/file.py:factory so a worker can build it")
    return converter.unavailable_reason(ctx.device)


def raise_reference_failed(ctx: RunContext) -> None:
    from navigator.isolation import log_tail

    tail = log_tail(ctx.ws.root / "samples" / "reference.log", 8) or log_tail(
        ctx.ws.format_dir(ctx.source.key) / "worker.log", 8)
    # the log's tail ends a traceback: keep its message lines, not the source lines and ^^^^ markers
    lines = [ln.strip() for ln in tail.splitlines()
             if ln.strip() and not ln[:1].isspace() and not ln.startswith("Traceback")]
    raise UserInputError(f"the reference outputs could not be computed from the source model "
                         f"({' / '.join(lines[-2:]) or 'see navigator.log'})")


def _export_source(ctx: RunContext, item, fs: FormatStatus) -> None:
    start = time.perf_counter()
    ctx.reporter.step_start(item.key, "export", None)
    try:
        info = ctx.source.export(ctx.ws, ctx.ws.abs(fs.path)) or {}
        fs.convert = ConvertStep(status="ok", duration_s=round(time.perf_counter() - start, 4),
                                 exporter=info.get("exporter"), inputs_sha256=ctx.status.model.sha256)
    except UserInputError:
        raise
    except Exception as e:
        log.exception("export failed")
        fs.convert = ConvertStep(status="failed", reason=f"{type(e).__name__}: {e}",
                                 duration_s=round(time.perf_counter() - start, 4))
    ctx.reporter.step_end(item.key, "export", None, fs.convert.to_dict())
    if fs.convert.status == "failed" and _says_disk_full(fs.convert.reason):
        raise WorkspaceFull(ctx.ws, f"{item.key} export: {fs.convert.reason[:200]}")
    ctx.save()


def _explain_skips(fs: FormatStatus, config: NavigatorConfig) -> None:
    """Every skipped step says why (status.yaml's rule)."""
    for rs in fs.runners.values():
        if rs.verify.status == "skipped" and rs.verify.reason in (None, "", "pending"):
            rs.verify.reason = "not run"
        if rs.profile.status == "skipped" and rs.profile.reason in (None, "", "pending"):
            rs.profile.reason = ("--no-profile" if config.no_profile else
                                 "verification did not pass" if rs.verify.status != "ok" else "not run")


def _skip_runners(fs: FormatStatus, reason: str) -> None:
    for rs in fs.runners.values():
        rs.verify = VerifyStep(status="skipped", reason=reason)
        rs.profile = ProfileStep(status="skipped", reason=reason)


# --------------------------------------------------------------------------- best
def select_best(st: Status, *, no_profile: bool) -> Best | None:
    """Highest throughput among verified (format, runner); by preference with --no-profile."""
    candidates = []
    for key, fs in st.formats.items():
        if fs.convert.status != "ok":
            continue
        for rkey, rs in fs.runners.items():
            if rs.verify.status != "ok":
                continue
            peak = rs.profile.peak() if rs.profile.status == "ok" else None
            candidates.append((key, rkey, peak))
    if not candidates:
        return None
    profiled = [c for c in candidates if c[2] is not None]
    if profiled and not no_profile:
        key, rkey, peak = max(profiled, key=lambda c: c[2].throughput)
        return Best(key=key, runner=rkey, batch_size=peak.batch_size, throughput=peak.throughput, basis="profile")
    key, rkey, _ = min(candidates, key=lambda c: formats.preference_rank(c[0]))
    return Best(key=key, runner=rkey, basis="preference")


def outcome_code(st: Status, requested: list[str]) -> tuple[int, list[str]]:
    """Exit code (0 or 1) and the reasons of the requested targets that failed."""
    failures = []
    for key in requested:
        fs = st.formats.get(key)
        if fs is None:
            continue
        if fs.convert.status == "failed":
            failures.append(f"{key}: conversion failed: {fs.convert.reason}")
            continue
        for rkey, rs in fs.runners.items():
            if rs.verify.status == "failed":
                failures.append(f"{key} on {rkey}: verification failed: {rs.verify.reason}")
    return (1 if failures else 0), failures


# --------------------------------------------------------------------------- the run
def _save_if_possible(ctx: RunContext) -> None:
    """Save the final state; on a full disk the last saved status.yaml stays (the
    writes are atomic: it is never half-written)."""
    try:
        ctx.save()
    except OSError as e:
        log.error("status.yaml could not be saved (%s); it keeps the state of its last save", e)


@dataclass
class RunOutcome:
    workspace: Workspace
    status: Status
    exit_code: int
    failures: list[str]
    requested: list[str]
    timings: dict


class _LogFileHandler(logging.FileHandler):
    """navigator.log: a record that cannot be written (OSError: a full disk) is
    dropped silently, where logging's default prints a traceback on the console;
    other errors (a bad format string) are reported as usual."""

    def handleError(self, record) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)


def _install_log_handler(ws: Workspace) -> logging.Handler:
    ws.root.mkdir(parents=True, exist_ok=True)
    handler = _LogFileHandler(ws.log_path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    logger = logging.getLogger("navigator")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def run(model: Any, samples: Any, config: NavigatorConfig, reporter, *, verify_func=None) -> RunOutcome:
    """The whole pipeline for one model; see the module docstring."""
    t0 = time.perf_counter()
    config = config.resolved()
    device, runner_devices = resolve_device(config.device)
    ws, source, batches, meta = prepare(model, samples, config, reporter)
    targets, dropped = requested_targets(config, source, device)
    planned, unsupported = plan_formats(config, source, targets)
    try:
        ws.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:   # the workdir is a file, read-only, … : bad input, not a bug
        raise UserInputError(f"--workdir: cannot create {ws.root}: {e.strerror or e}") from None
    timings: dict = {"prepare_s": time.perf_counter() - t0}
    with WorkspaceLock(ws.lock_path):
        handler = _install_log_handler(ws)
        ctx = None
        try:
            log.info("navigator convert %s into %s (device %s)", source.path or type(source.obj).__name__, ws.root,
                     device)
            previous = resumable(ws, source, meta, config)
            st = write_workspace(ws, source, batches, meta, config, device, keep=previous is not None)
            if previous is not None:
                log.info("resuming: the model, samples and profiles are unchanged since %s", previous.updated)
                reporter.info("resuming: unchanged steps of the last run are reused (--force redoes them)")
            if source.format == "torch" and not getattr(source, "factory", None):
                from navigator import torch_support

                torch_support.LIVE[str(ws.root)] = torch_support.flat_module(source.obj, source.io)
                if source.io.memory_tree is not None:
                    torch_support.TREESPECS[str(ws.root)] = source.io.memory_tree
            ctx = RunContext(config=config, ws=ws, status=st, source=source, device=device, reporter=reporter,
                             runner_devices=runner_devices, resume_from=previous,
                             verify_func=verify_func, timings=timings)
            for t in dropped:
                log.info("default target %s left out: its packages are not installed", t)
            from navigator.converters.registry import registry

            for name, reason in registry.unavailable.items():
                log.warning("converter plugin %s is unavailable: %s", name, reason)
                reporter.warn(f"converter plugin {name} is unavailable: {reason}")
            if registry.unavailable:
                st.environment["unavailable_plugins"] = dict(registry.unavailable)
            for key in unsupported:
                k = formats.parse_key(key)
                st.formats[key] = FormatStatus(format=k.format, precision=k.precision, convert=ConvertStep(
                    status="skipped", reason=f"no converter produces {key} here (precision {k.precision})"))
            reporter.plan(ws, [p.key for p in planned], unsupported)
            run_formats(ctx, planned)
            st.best = select_best(st, no_profile=config.no_profile)
            st.state = "complete"
            ctx.save()
            if config.triton_repo:   # --triton-repo: the Triton repository of the best format (navigator.triton)
                from navigator.triton import after_convert
                after_convert(ws.root, st, config.triton_repo, reporter)
            code, failures = outcome_code(st, [t for t in targets if t in st.formats])
            timings["total_s"] = time.perf_counter() - t0
            timings["process_starts"] = ctx.process_starts
            log.info("done in %.2f s with %d worker processes", timings["total_s"], ctx.process_starts)
            return RunOutcome(ws, st, code, failures, targets, timings)
        except KeyboardInterrupt:
            if ctx is not None:
                ctx.status.state = "interrupted"
                _save_if_possible(ctx)
            raise Interrupted("interrupted; the workspace records state: interrupted") from None
        except NavigatorError:
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
