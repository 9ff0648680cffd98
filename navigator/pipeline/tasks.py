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


def verify_spec(ctx: RunContext, key: str) -> VerifySpec:
    from navigator.validators.tolerances import rule_for

    k = formats.parse_key(key)
    cfg = ctx.config
    rules = {}
    for spec in ctx.status.signature.outputs:
        rule = rule_for(spec.name, spec.dtype, precision=k.precision, fmt=k.format, device=ctx.device,
                        compare=cfg.compare, atol=cfg.atol, rtol=cfg.rtol)
        rules[spec.name] = dataclasses.asdict(rule)
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
    return VerifySpec(rules=rules, allow_nan=cfg.allow_nan, error_stat=cfg.error_stat, batch_sizes=sizes,
                      batch_dim=batch_dim, corners=corners)


def _batch_in_profiles(ctx: RunContext, size: int) -> bool:
    """``size`` lies within the batch range of at least one shape profile."""
    batch_dim = ctx.status.batch_dim
    profiles = ctx.status.shape_profiles or []
    return not profiles or any(all(p[n]["min"][batch_dim] <= size <= p[n]["max"][batch_dim] for n in p)
                               for p in profiles)


def profile_spec(ctx: RunContext) -> ProfileSpec | None:
    if ctx.config.no_profile:
        return None
    settings = {"max_batch_size": ctx.config.max_batch_size, "budget_s": ctx.config.profile_budget_s}
    if ctx.config.profile_batch_sizes:
        settings["batch_sizes"] = list(ctx.config.profile_batch_sizes)
        settings["max_batch_size"] = max(settings["max_batch_size"], *ctx.config.profile_batch_sizes)
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
        task.convert = ConvertSpec(converter=conv.import_path(), source=ctx.status.formats[item.parent].path,
                                   output=fs.path, params=params_dict(conv.params_from_config(ctx.config)),
                                   device=ctx.device)
    record = formats.get(fs.format)
    for spec in runner_specs(ctx, fs.format):
        options = {"precision": fs.precision}
        if record.compiled_for_device:
            options["compiled_for"] = ctx.device
        task.runners.append(RunnerTask.of(spec, **options))
    return task


def reference_task(ctx: RunContext, artifact: str, runner: RunnerTask, *, io_names: dict | None = None) -> Task:
    """The reference outputs of every stored sample, from ``runner``; a profile-corner sample the
    model does not run is left out (``optional``), any other failure fails the task."""
    return Task(kind="reference", key="reference", artifact=artifact, io_names=dict(io_names or {}),
                reference_runner=RunnerTask.from_dict(runner.to_dict()),
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
