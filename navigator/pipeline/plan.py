"""Planning a run: which targets (the source format's defaults from its record,
or ``--targets``), and which edges reach them (:mod:`navigator.converters.planner`)."""

from __future__ import annotations

from navigator import deps, formats, runners
from navigator.config import NavigatorConfig
from navigator.errors import UserInputError


def default_targets(source, device: str) -> tuple[list[str], list[str]]:
    """(the source's default targets, those among them that are optional: only when
    their packages are installed). A source may override its format's defaults
    (a TorchScript file cannot be torch.export-ed)."""
    record = formats.get(source.format) if formats.registry.has(source.format) else None
    defaults = getattr(source, "default_targets", None) or (record.default_targets if record else ()) \
        or (source.key,)
    base = [t.rstrip("?") for t in defaults]
    if device == "cuda" and record is not None:
        base += list(record.cuda_default_targets)
    optional = [t.rstrip("?") for t in (record.default_targets if record else ()) if t.endswith("?")]
    return base, optional


def requested_targets(config: NavigatorConfig, source, device: str = "cpu") -> tuple[list[str], list[str]]:
    """(targets to plan, optional defaults dropped because a package is missing)."""
    from navigator.converters.registry import registry

    if config.targets:
        base, optional = list(config.targets), []
    else:
        base, optional = default_targets(source, device)
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
            key = formats.parse_key(t) if formats.is_key(t) else None
            if key is not None and key.precision != "fp32":
                unsupported.append(t)
    if config.runners:
        known = runners.known_runners()
        keys = formats.registry.runner_keys()
        bad = [r for r in config.runners if r not in known and r not in keys]
        if bad:
            raise UserInputError(f"--runners: unknown runner {bad[0]!r}; known: {', '.join(known)} "
                                 f"(or a runner key: {', '.join(sorted(keys))})")
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
    for converter in edges:   # every converter given parameters, planned or not: a typo is found now
        if converter.name in (config.converter_params or {}):
            converter.params_from_config(config)
    for item in planned:
        if item.converter is not None:
            item.converter.params_from_config(config)
    return planned, unsupported
