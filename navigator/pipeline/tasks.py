"""Building the typed tasks a worker runs (:mod:`navigator.execution.jobs`): the verify
rules per output, the profile settings, the runners of a format on this run's devices,
and the convert step of an edge."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from navigator import formats, runners
from navigator.execution.jobs import ConvertSpec, ProfileSpec, RunnerTask, Task, VerifySpec
from navigator.pipeline.context import RunContext
from navigator.workspace.status import FormatStatus

# a profile left for a later run (convert-many's build: the node measures alone after it)
DEFERRED = "deferred: measured by a later run (convert-many measures alone on the node after the build)"


def verify_rules(ctx: RunContext, key: str, precision: str | None = None) -> dict:
    """One comparison rule per output of format ``key`` (at ``precision`` when a runner computes in
    another precision than the key's)."""
    from navigator.validators.tolerances import rule_for

    k = formats.parse_key(key)
    cfg = ctx.config
    return {spec.name: dataclasses.asdict(rule_for(spec.name, spec.dtype, precision=precision or k.precision,
                                                   fmt=k.format, device=ctx.device, compare=cfg.compare,
                                                   atol=cfg.atol, rtol=cfg.rtol))
            for spec in ctx.status.signature.outputs}


def verify_spec(ctx: RunContext, key: str) -> VerifySpec:
    cfg = ctx.config
    rules = verify_rules(ctx, key)
    batch_dim = ctx.status.batch_dim
    samples = ctx.status.samples
    corners = [f"{i:03d}" for i in samples.corners]
    sizes: list[int] = []
    if batch_dim is not None:
        regular = [s for i, s in enumerate(samples.shapes) if i not in samples.corners] or samples.shapes
        full = max(s[ctx.status.signature.inputs[0].name][batch_dim] for s in regular)
        sizes = sorted(set(cfg.verify_batch_sizes or (1, full)))
        if len(sizes) < 2:
            sizes = sorted(set(sizes) | {2 if full == 1 else 1})
        if not cfg.verify_batch_sizes:   # never outside the shape profiles: an engine would refuse it
            sizes = [b for b in sizes if _batch_in_profiles(ctx, b)] or sizes
    stateful = ctx.status.stateful
    sequence = {"pairs": stateful["pairs"], "reset_at": stateful.get("reset_at")} if stateful and \
        stateful.get("pairs") else None
    return VerifySpec(rules=rules, allow_nan=cfg.allow_nan, error_stat=cfg.error_stat,
                      batch_sizes=[] if sequence else sizes, batch_dim=batch_dim, corners=corners,
                      kinds=dict(cfg.output_kinds or {}), samples_given=samples.source != "generated",
                      sequence=sequence)


def _batch_in_profiles(ctx: RunContext, size: int) -> bool:
    """``size`` lies within the batch range of at least one shape profile."""
    batch_dim = ctx.status.batch_dim
    profiles = ctx.status.shape_profiles or []
    return not profiles or any(all(p[n]["min"][batch_dim] <= size <= p[n]["max"][batch_dim] for n in p
                                   if len(p[n]["max"]) > batch_dim) for p in profiles)


def _largest_profile_batch(ctx: RunContext) -> int:
    """The largest batch size a shape profile admits (every input of that profile); unbounded
    without profiles or a batch dim. The in-process sweep never goes past it: a figure measured
    beyond the declared range is one Triton (its max_batch_size) would never serve."""
    batch_dim = ctx.status.batch_dim
    profiles = ctx.status.shape_profiles or []
    if batch_dim is None or not profiles:
        return ctx.config.max_batch_size
    limits = [min((p[n]["max"][batch_dim] for n in p if len(p[n]["max"]) > batch_dim), default=None)
              for p in profiles]
    return max((x for x in limits if x is not None), default=ctx.config.max_batch_size)


def profile_spec(ctx: RunContext) -> ProfileSpec | None:
    if ctx.config.no_profile:
        return None
    settings = {"max_batch_size": min(ctx.config.max_batch_size, _largest_profile_batch(ctx)),
                "budget_s": ctx.config.profile_budget_s}
    if ctx.config.profile_batch_sizes:
        # only sizes a shape profile admits: the artifact (an engine, a static export) takes no other
        sizes = [b for b in ctx.config.profile_batch_sizes if _batch_in_profiles(ctx, b)] or [1]
        settings["batch_sizes"] = sizes
        settings["max_batch_size"] = max(sizes)
    return ProfileSpec(batch_dim=ctx.status.batch_dim, settings=settings, race=not ctx.config.no_race)


def runner_specs(ctx: RunContext, fmt: str) -> list:
    """The format's runners on this run's devices, narrowed by ``--runners``."""
    return [spec for device in ctx.runner_devices for spec in runners.specs_for(fmt, device)
            if runners.selected(spec, ctx.config.runners)]


def params_dict(params) -> dict:
    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


def format_task(ctx: RunContext, item, fs: FormatStatus) -> Task:
    """convert (for an edge) -> verify -> profile of one planned format."""
    sig = ctx.status.signature
    task = Task(kind="format", key=item.key, artifact=fs.path, io_names=dict(fs.io_names),
                input_names=sig.input_names, output_names=sig.output_names, verify=verify_spec(ctx, item.key),
                profile=profile_spec(ctx))
    if item.converter is not None:
        conv = item.converter
        params = params_dict(conv.params_from_config(ctx.config))
        if conv.calibrates:
            calibrate, held_out = calibration_split(ctx, params.get("calibration_samples") or ())
            params["calibration_samples"] = calibrate
            task.verify.held_out, task.verify.calibrated_on = held_out, calibrate
        task.convert = ConvertSpec(converter=conv.import_path(), source=ctx.status.formats[item.parent].path,
                                   output=fs.path, params=params, device=ctx.device)
    for spec in runner_specs(ctx, fs.format):
        runner = RunnerTask.of(spec, **runners.verify_options(fs.format, fs.precision, ctx.device))
        effective = runners.runner_class(spec.runner).effective_precision(spec.provider, fs.precision)
        if effective != fs.precision:   # judged as what it computes (OpenVINO's default: bf16 on such CPUs)
            runner.rules = verify_rules(ctx, item.key, effective)
        task.runners.append(runner)
    return task


def calibration_split(ctx: RunContext, given: tuple = ()) -> tuple[list[str], list[str]]:
    """(samples to calibrate on, samples to verify on) for an edge calibrated on the stored samples:
    the first half of the regular samples calibrates (or the ones the user named), the rest and the
    profile corners verify, so a verdict never rests on the data the format was fitted to. With a
    single regular sample, it does both (the verdict then says so: inconclusive)."""
    samples = ctx.status.samples
    stems = [f"{i:03d}" for i in range(samples.count)]
    corners = {f"{i:03d}" for i in samples.corners}
    regular = [s for s in stems if s not in corners]
    if given:
        calibrate = [s for s in stems if s in set(given)]
    else:
        calibrate = regular[:max(1, (len(regular) + 1) // 2)] if len(regular) > 1 else regular
    held_out = [s for s in stems if s not in calibrate]
    return calibrate, held_out


def reference_task(ctx: RunContext, artifact: str, runner: RunnerTask, *, io_names: dict | None = None) -> Task:
    """The reference outputs of every stored sample, from ``runner``; a profile-corner sample the
    model does not run is left out (``optional``), any other failure fails the task."""
    variation = getattr(ctx.source, "variation_runner", None) if runner is getattr(ctx.source, "reference_runner",
                                                                                          None) else None
    return Task(kind="reference", key="reference", artifact=artifact, io_names=dict(io_names or {}),
                reference_runner=RunnerTask.from_dict(runner.to_dict()),
                variation_runner=RunnerTask.from_dict(variation.to_dict()) if variation else None,
                verify=verify_spec(ctx, ctx.source.key),   # the sizes to vary at, a stateful model's sequence
                optional=[f"{i:03d}" for i in ctx.status.samples.corners])


def sys_path_for(cls) -> list[str]:
    """Folders a worker needs on sys.path to import ``cls`` (plugins defined outside site-packages)."""
    if cls is None:
        return []
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file or cls.__module__.startswith("navigator."):
        return []
    root = Path(file).resolve().parent
    for _ in range(cls.__module__.count(".")):
        root = root.parent
    return [str(root)]


def converted_task(ctx: RunContext, item, task: Task) -> Task:
    """The verify/profile task of a format converted earlier: no convert step, the
    artifact's names as converted, samples' shapes only when exported static."""
    task = task.without_convert()
    task.io_names = dict(ctx.status.formats[item.key].io_names)
    return task.static() if item.key in ctx.book.static_keys else task
