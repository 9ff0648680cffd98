"""Preparing a run: the device, the source, its samples and shape profiles
(:func:`prepare`, which writes nothing), then the workspace's first status.yaml
and stored samples (:func:`write_workspace`)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from navigator import deps
from navigator.config import NavigatorConfig
from navigator.errors import UserInputError
from navigator.pipeline.context import Prepared
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.layout import Workspace, check_utf8
from navigator.workspace.status import ModelInfo, SamplesInfo, Status

log = logging.getLogger(__name__)


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


def environment(device: str) -> dict:
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


def prepare(model: Any, samples: Any, config: NavigatorConfig, reporter, *, forkserver=None) -> Prepared:
    """Open the source, read its signature, pick the workspace, take or generate
    the samples and derive the shape profiles. Writes nothing into the workspace yet.
    A ``file.py:factory`` source and a Hugging Face folder are prepared in a worker
    (:func:`prepare_in_worker`): the user's code (and a model's weights) never load in the
    calling process."""
    from navigator.sources import is_factory_spec, is_hf_folder_spec, open_source, torch_file_kind

    if is_factory_spec(model):
        return prepare_in_worker(model, samples, config, reporter, forkserver=forkserver)
    if torch_file_kind(model, config.model_format):   # loading one unpickles it: never in this process
        if not Path(model).is_file():
            raise UserInputError(f"{model}: not a regular file")
        return prepare_in_worker(str(Path(model)), samples, config, reporter, forkserver=forkserver)
    if is_hf_folder_spec(model, config.model_format):
        from navigator.sources import hf_support

        if config.task is not None and config.task not in hf_support.TASKS:   # said before a worker starts
            raise UserInputError(f"--task {config.task!r} is not supported; supported tasks: {hf_support.supported()}")
        return prepare_in_worker(str(Path(model)), samples, config, reporter, forkserver=forkserver)
    source = open_source(model, config.model_format, config.signature_name, task=config.task,
                         trust_remote_code=config.trust_remote_code)
    return prepare_source(source, samples, config, reporter)


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


def write_workspace(prep: Prepared, config: NavigatorConfig, device: str, *, keep: bool = False) -> Status:
    """The workspace's status.yaml (state running) and samples: from scratch, or keeping
    the artifacts and reference outputs of an earlier run (``keep``, when resuming)."""
    from navigator._version import __version__

    ws, source = prep.ws, prep.source
    for folder in ws.scratch_dirs(keep=keep):
        shutil.rmtree(folder, ignore_errors=True)
    for stale in ws.stale_partial_files():   # left by a writer killed mid-write; we hold the lock
        stale.unlink(missing_ok=True)
    for i, batch in enumerate(prep.batches):
        npz.save(ws.sample_file("inputs", i), batch)
    for i, outputs in enumerate(prep.reference or []):
        npz.save(ws.sample_file("reference", i), outputs)
    for i, outputs in enumerate(prep.variation or []):
        if outputs is not None:
            npz.save(ws.variation_file(f"{i:03d}"), outputs)
    st = Status(
        model=ModelInfo(name=ws.name, source_format=source.format,
                        path=source.identity(), sha256=source.sha256(),
                        huggingface=getattr(source, "huggingface", None) or None),
        navigator_version=__version__, state="running", environment=environment(device),
        signature=source.signature, batch_dim=prep.batch_dim, shape_profiles=prep.profiles,
        samples=prep.samples_info, config=config.to_dict(), stateful=prep.stateful,
    )
    st.config["device"] = device
    if source.reference_runner is None:
        st.samples.reference = {"key": source.key, "runner": "torch eager fp32, cpu, calling process"}
        if prep.variation:
            st.samples.reference["variation"] = {"runner": "torch eager float64, cpu (the module and its float "
                                                           "inputs in double precision)"}
    elif config.reference in (None, source.key):
        runner = source.reference_runner
        st.samples.reference = {"key": source.key, "runner": runner.key,
                                **({"options": dict(runner.options)} if runner.options else {})}
        if source.variation_runner is not None:   # the fp32 floor: the source as the runners run it
            var = source.variation_runner
            st.samples.reference["variation"] = {"runner": var.key, **({"options": dict(var.options)}
                                                                       if var.options else {})}
    if prep.reference:   # computed in this process (torch); a worker's reference is digested when it ends
        st.samples.reference_sha256 = npz.files_sha256(ws.reference_files())
    st.created = status_mod.now()
    status_mod.save(st, ws.status_path)
    return st


# --------------------------------------------------------------------------- a factory, prepared in a worker
PREPARED_FILE = "prepared.json"


class _Collect:
    """A reporter for the prepare worker: its warnings travel back to the parent's console."""

    def __init__(self):
        self.lines: list[str] = []

    def warn(self, text: str) -> None:
        self.lines.append(text)

    def info(self, text: str) -> None:
        pass


def run_prepare(task) -> dict:
    """The prepare stage of a worker: open the factory (or Hugging Face folder), take or generate the
    samples, compute the reference, and leave them with the signature and the source's facts in
    ``task.prepare.out``."""
    import json

    from navigator.sources import open_source

    spec = task.prepare
    config = NavigatorConfig.from_dict(spec.config)
    out = Path(spec.out)
    samples = _load_staged_samples(Path(spec.samples)) if spec.samples else None
    source = open_source(spec.model, config.model_format, config.signature_name, task=config.task,
                         trust_remote_code=config.trust_remote_code)
    reporter = _Collect()
    prep = prepare_source(source, samples, config, reporter)
    for i, batch in enumerate(prep.batches):
        npz.save(out / "inputs" / f"{i:03d}.npz", batch)
    for i, outputs in enumerate(prep.reference or []):
        npz.save(out / "reference" / f"{i:03d}.npz", outputs)
    for i, outputs in enumerate(prep.variation or []):
        if outputs is not None:
            npz.save(out / "variation" / f"{i:03d}.npz", outputs)
    src = prep.source
    facts = {"signature": src.signature.to_dict(), "batch_dim": prep.batch_dim, "profiles": prep.profiles,
             "stateful": prep.stateful,
             "samples_info": prep.samples_info.to_dict(), "warnings": reporter.lines,
             "source": src.worker_facts() if hasattr(src, "worker_facts") else {
                 "name": src.name, "factory": src.factory, "io": src.io.to_json(),
                 "index_bounds": src.index_bounds, "notes": list(src.notes),
                 "generated_float": list(src.generated_float), "reference_digest": src.reference_digest,
                 "state_sha256": src.state_sha256, "file_kind": src.file_kind,
                 "default_targets": list(src.default_targets) if src.default_targets else None}}
    from navigator.workspace.atomic import write_text

    write_text(out / PREPARED_FILE, json.dumps(facts, default=str))
    return {"count": len(prep.batches)}


def _stage_samples(samples: Any, config: NavigatorConfig, folder: Path) -> None:
    """User batches given with a factory spec (the API), as npz files the prepare worker reads back:
    a dict batch keeps its keys, a tuple its positions (``__pos_<i>``), one tensor ``__single``."""
    from navigator.sources import samples as samples_mod

    iterator = samples_mod.iterate(samples)
    count = 0
    for i, batch in enumerate(iterator):
        if i >= (config.sample_count or samples_mod.DEFAULT_TAKEN):
            break
        if isinstance(batch, Mapping):   # a dict, or a tokenizer's BatchEncoding
            arrays = {str(k): samples_mod.as_array(v, f"sample {i}, input '{k}'") for k, v in batch.items()}
        elif isinstance(batch, (tuple, list)):
            arrays = {f"__pos_{j}": samples_mod.as_array(v, f"sample {i}, input {j}") for j, v in enumerate(batch)}
        else:
            arrays = {"__single": samples_mod.as_array(batch, f"sample {i}")}
        npz.save(folder / f"{i:03d}.npz", arrays)
        count += 1
    if not count:
        raise UserInputError("samples: the iterable gave no batches")


def _load_staged_samples(folder: Path) -> list:
    batches = []
    for path in sorted(folder.glob("*.npz")):
        arrays = npz.load(path)
        if "__single" in arrays:
            batches.append(arrays["__single"])
        elif arrays and all(k.startswith("__pos_") for k in arrays):
            batches.append(tuple(arrays[f"__pos_{j}"] for j in range(len(arrays))))
        else:
            batches.append(arrays)
    return batches


def prepare_in_worker(model: str, samples: Any, config: NavigatorConfig, reporter, *, forkserver=None) -> Prepared:
    """Prepare a ``file.py:factory`` source (a PyTorch model file, a Hugging Face folder) in a worker under the run's --timeout and
    --worker-memory-gb: a factory or forward that hangs, balloons, crashes or exits ends in one
    error line, never in the calling process. The worker's files live in a scratch folder of the
    workdir while it runs."""
    import json
    import tempfile

    from navigator.execution import isolation
    from navigator.execution.jobs import Job, PrepareSpec, Task
    from navigator.sources import torch_support as ts
    from navigator.sources.torch import TorchSource
    from navigator.types import ModelSignature
    from navigator.workspace.status import SamplesInfo

    workdir = check_utf8(Path(config.workdir).resolve(), "--workdir")
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"--workdir: cannot create {workdir}: {e.strerror or e}") from None
    with tempfile.TemporaryDirectory(prefix=".navigator-prepare-", dir=workdir) as tmp:
        tmp = Path(tmp)
        staged = None
        if samples is not None:
            staged = tmp / "user-samples"
            _stage_samples(samples, config, staged)
        task = Task(kind="prepare", key="prepare", artifact=model,
                    prepare=PrepareSpec(model=model, config=config.to_dict(), out=str(tmp / "out"),
                                        samples=str(staged) if staged else None))
        job = Job(workspace=str(tmp), events=str(tmp / "prepare.events.jsonl"), tasks=[task],
                  parent_pid=os.getpid())
        outcome = isolation.run_worker(job, tmp / "prepare.json", tmp / "prepare.log",
                                       stage_timeout_s=config.timeout, memory_limit_gb=config.worker_memory_gb,
                                       forkserver=forkserver)
        ended = [e for e in outcome.events if e.ended]
        if ended and ended[-1].status != "ok":      # the stage said why (an exception of the factory, bad input)
            why = ended[-1].result.get("reason") or "the prepare stage failed"
            why = why.split(": ", 1)[1] if why.startswith(("UserInputError: ", "DependencyMissing: ")) else why
            raise UserInputError(why if why.startswith(model) else f"{model}: the source could not be prepared: {why}")
        if outcome.reason or not ended:             # killed, crashed, timed out, exited before the end
            tail = [ln.strip() for ln in (outcome.log_tail or "").splitlines() if ln.strip()][-2:]
            detail = f" | log tail: {' / '.join(tail)}" if tail else ""
            raise UserInputError(f"{model}: the source could not be prepared: "
                                 f"{outcome.reason or 'the worker stopped'}{detail}")
        facts = json.loads((tmp / "out" / PREPARED_FILE).read_text())
        batches = [npz.load(p) for p in sorted((tmp / "out" / "inputs").glob("*.npz"))]
        reference = [npz.load(p) for p in sorted((tmp / "out" / "reference").glob("*.npz"))]
        found = {p.stem: npz.load(p) for p in (tmp / "out" / "variation").glob("*.npz")}
        variation = [found.get(f"{i:03d}") for i in range(len(reference))] if found else None
    s = facts["source"]
    if s.get("kind") == "huggingface":
        from navigator.sources.huggingface import HFSource

        source = HFSource.from_facts(s, ModelSignature.from_dict(facts["signature"]))
    else:
        io = ts.TorchIO.from_json(s["io"])
        source = TorchSource(format="torch", key="torch", name=s["name"], obj=None, isolated=True,
                             factory=s["factory"], signature=ModelSignature.from_dict(facts["signature"]),
                             index_bounds=s["index_bounds"], reference_runner=None, notes=s["notes"], io=io,
                             generated_float=s["generated_float"], reference_digest=s["reference_digest"],
                             state_sha256=s["state_sha256"], file_kind=s.get("file_kind"),
                             default_targets=tuple(s["default_targets"]) if s["default_targets"] else None)
    for line in facts["warnings"]:
        log.warning("%s", line)
        reporter.warn(line)
    ws = Workspace.for_model(config.workdir, config.model_name or source.name)
    return Prepared(ws=ws, source=source, batches=batches, batch_dim=facts["batch_dim"],
                    profiles=facts["profiles"], samples_info=SamplesInfo.from_dict(facts["samples_info"]),
                    warnings=[], reference=reference, variation=variation, stateful=facts.get("stateful"))
