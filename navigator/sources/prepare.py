"""An opened source made ready to convert: its samples taken or generated (and corner
samples added), the batch dimension and shape profiles derived, the reference computed
where it must be (torch), and its state pairs found. Writes nothing: the pipeline
(:mod:`navigator.pipeline.prepare`) writes the workspace, and a worker
(:mod:`navigator.execution.prepare_job`) runs this for a factory file or a folder."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from navigator.config import NavigatorConfig
from navigator.errors import UserInputError
from navigator.workspace.layout import Workspace
from navigator.workspace.status import SamplesInfo

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """The source opened, its samples taken or generated and its shape profiles derived
    (:func:`prepare_source`; :func:`navigator.pipeline.prepare.prepare` for every kind of source); nothing written
    yet."""

    ws: Workspace
    source: Any                                   # navigator.sources.Source
    batches: list[dict]
    batch_dim: int | None
    profiles: list[dict]
    samples_info: SamplesInfo
    warnings: list[str] = field(default_factory=list)
    reference: list[dict] | None = None           # reference outputs computed in this process (torch)
    variation: list[dict] | None = None           # the same in float64: the source's own variation (torch)
    stateful: dict | None = None                  # state pairs, steps (navigator.sources.state); None: stateless



def prepare_source(source, samples: Any, config: NavigatorConfig, reporter) -> Prepared:
    """:func:`prepare` once the source is open (in the calling process, or in a prepare worker)."""
    from navigator.sources import samples as samples_mod
    from navigator.sources.signature import detect_batch_dim

    name = config.model_name or source.name
    ws = Workspace.for_model(config.workdir, name)
    if source.signature is None:   # a framework object: its inputs come from the samples (or --shapes)
        raw, batch_dim = source.resolve(samples, config, config.batch_dim, config.no_batching)
        if raw is not None:
            samples = raw
    else:
        batch_dim = detect_batch_dim(source.signature, batch_dim=config.batch_dim, no_batching=config.no_batching)
    sig = source.signature
    stateful = _stateful(sig, config) if sig is not None else None
    ranges = {**source.value_ranges, **(config.value_ranges or {})}   # the flags win over the source's
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
        note = samples_mod.folder_note(config.samples, config.sample_count)
        if note:
            log.warning("%s", note)
            reporter.warn(note)
    else:
        shapes = list(config.shapes or []) or None
        if stateful and not shapes:   # one stream: a sequence id's state holds one row
            shapes = [{t.name: [d if d > 0 else 1 for d in t.shape] for t in sig.inputs}]
            log.info("stateful model: generated steps use 1 for every dynamic dim (one stream); "
                     "--shapes sets another step shape")
        batches = source.generate(sig, shapes=shapes,
                                  count=config.sample_count or (STATEFUL_STEPS if stateful else
                                                                samples_mod.DEFAULT_GENERATED),
                                  value_ranges=ranges, dtypes=config.dtypes,
                                  bounds=source.index_bounds, batch_dim=batch_dim, seed=config.seed)
        info.source = "generated"
        info.value_ranges = {spec.name: list(samples_mod.value_range(spec, ranges,
                                                                      source.index_bounds,
                                                                      (config.dtypes or {}).get(spec.name)))
                             for spec in sig.inputs}
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
        profile, warnings = source.derive_profile(sig, batches, batch_dim=batch_dim,
                                                  max_batch_size=config.max_batch_size)
        profiles = [profile]
    for w in warnings + list(source.notes):
        log.warning("%s", w)
        reporter.warn(w)
    if stateful:   # the samples are the steps of one sequence; it starts from a zero state unless given
        import numpy as np

        if info.source == "generated":
            for batch in batches:
                for pair in stateful["pairs"]:
                    batch[pair["input"]] = np.zeros_like(batch[pair["input"]])
        _same_state_shapes(batches, stateful["pairs"])
        stateful["steps"] = len(batches)
        stateful["reset_at"] = len(batches) // 2 if len(batches) > 1 else None
    # a sequence has no corners: its steps follow one another
    corners = [] if stateful else _add_corners(batches, sig, profiles, batch_dim, source, config, info, ranges)
    reference = None
    if hasattr(source, "complete"):   # the reference is computed here (torch); a corner it refuses is dropped
        reference, refused = source.complete(batches, batch_dim, corners=corners,
                                             value_ranges=info.value_ranges or {})
        drop_corners(batches, info, corners, refused, reporter)
    _describe(info, batches, corners)
    _check_output_options(config, sig)
    variation = getattr(source, "variation", None) if reference is not None else None
    return Prepared(ws=ws, source=source, batches=batches, batch_dim=batch_dim, profiles=profiles,
                    samples_info=info, warnings=warnings, reference=reference, variation=variation,
                    stateful=stateful)


STATEFUL_STEPS = 8   # generated steps of a stateful model's sequence


def _same_state_shapes(batches: list[dict], pairs: list[dict]) -> None:
    """The steps of one sequence are one stream: an input other than the state keeps the first step's
    dims but its last (a chunk or a token count may vary; the batch, which the carried state was made
    for, may not). A state input of a later step is replaced by the state carried, so it may grow."""
    states = {p["input"] for p in pairs}
    first = batches[0] if batches else {}
    for k, batch in enumerate(batches[1:], 1):
        for name in first:
            a, b = first[name], batch[name]
            if name not in states and a.ndim and (a.ndim != b.ndim or a.shape[:-1] != b.shape[:-1]):
                raise UserInputError(f"sample {k:03d}: input {name!r} is {list(b.shape)}, step 000 {list(a.shape)}: "
                                     "the steps of a stateful model are one stream, whose state was made for one "
                                     "batch (only the last dim may vary from step to step)")


def _stateful(sig, config: NavigatorConfig) -> dict | None:
    """The state pairs of a model (declared with --state, else found by name), or None."""
    from navigator.sources.state import declared_pairs, find_pairs

    if config.state:
        pairs, found_by = declared_pairs(sig, config.state), "declared"
    else:
        pairs, found_by = find_pairs(sig), "names"
    if not pairs:
        return None
    return {"pairs": [p.to_dict() for p in pairs], "found_by": found_by}


def _add_corners(batches: list[dict], sig, profiles: list[dict], batch_dim, source, config, info,
                 ranges: dict) -> list[int]:
    """Samples at each shape profile's min / max corner that the samples do not cover
    (navigator.sources.samples.corner_shapes), appended to ``batches``; returns their indices.
    The user's own samples are cropped or repeated to a corner's shape (their structure kept);
    generated samples get more of the source's own draw (a Hugging Face model's padding masks)."""
    from navigator.sources import samples as samples_mod

    shapes = samples_mod.corner_shapes(sig, profiles, batches, batch_dim)
    given = info.source != "generated"
    corners = []
    for k, shape in enumerate(shapes):
        if given:
            batch = samples_mod.resize_sample(batches[0], shape)
        else:
            (batch,) = source.generate(sig, shapes=[shape], count=1, value_ranges=ranges, dtypes=config.dtypes,
                                       bounds=source.index_bounds, batch_dim=batch_dim,
                                       seed=(config.seed or 0) + 1000 + k)
        corners.append(len(batches))
        batches.append(batch)
    if corners and not given and not info.value_ranges:   # what the corners were generated in
        info.value_ranges = {spec.name: list(samples_mod.value_range(spec, ranges, source.index_bounds,
                                                                      (config.dtypes or {}).get(spec.name)))
                             for spec in sig.inputs}
    if corners:
        log.info("samples at the shape profiles' corners: %s",
                 ", ".join(str({n: list(a.shape) for n, a in batches[i].items()}) for i in corners))
    return corners


def drop_corners(batches: list[dict], info: SamplesInfo, corners: list[int], refused: dict[int, str],
                 reporter) -> None:
    """Take the corner samples the model refused out of ``batches`` / ``corners`` (in place), saying why."""
    for i in sorted(refused, reverse=True):
        shapes = {n: list(a.shape) for n, a in batches[i].items()}
        why = f"the model does not run at the profile corner {shapes}: {refused[i]}; it is left out of verification"
        log.warning("%s", why)
        reporter.warn(why)
        del batches[i]
        corners[:] = [c if c < i else c - 1 for c in corners if c != i]


def _describe(info: SamplesInfo, batches: list[dict], corners: list[int]) -> None:
    from navigator.sources import samples as samples_mod

    info.count = len(batches)
    info.shapes = [{k: list(v.shape) for k, v in b.items()} for b in batches]
    info.corners = list(corners)
    info.sha256 = samples_mod.samples_sha256(batches)


def _inside(profile: dict, batch: dict) -> bool:
    return all(all(lo <= d <= hi for lo, d, hi in zip(profile[n]["min"], a.shape, profile[n]["max"]))
               for n, a in batch.items() if n in profile)


# what a task rule or kind needs of an output: a float tensor of at least this rank
_NEEDS = {"detections": 3, "probabilities": 2, "logits": 2, "embedding": 2, "scores": 1, "top1": 2, "cosine": 1,
          "mask": 1}


def _check_output_options(config: NavigatorConfig, sig) -> None:
    outputs = set(sig.output_names)
    for option, values in (("--compare", config.compare), ("--atol", config.atol), ("--rtol", config.rtol),
                           ("--output-kinds", config.output_kinds)):
        for name in values or {}:
            if name not in ("", "*") and name not in outputs:
                raise UserInputError(f"{option}: unknown output {name!r}; the model's outputs are "
                                     f"{', '.join(repr(n) for n in sig.output_names)}")
    specs = {t.name: t for t in sig.outputs}
    wanted = [("--output-kinds", n, k) for n, k in (config.output_kinds or {}).items() if k != "tensor"]
    wanted += [("--compare", n, mode) for n, (mode, _) in (config.compare or {}).items() if mode in _NEEDS]
    for option, name, what in wanted:
        for spec in ([specs[name]] if name in specs else sig.outputs if name in ("", "*") else []):
            if not spec.dtype.startswith(("float", "bfloat")):
                raise UserInputError(f"{option}: {spec.name}:{what}: output {spec.name!r} is {spec.dtype}; "
                                     f"{what} applies to float outputs")
            if spec.rank < _NEEDS[what]:
                raise UserInputError(f"{option}: {spec.name}:{what}: output {spec.name!r} has rank {spec.rank} "
                                     f"{spec.shape}; {what} needs rank {_NEEDS[what]} or more"
                                     + (" ([batch, 4 + classes, anchors])" if what == "detections" else ""))
