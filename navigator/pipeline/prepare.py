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
from navigator.execution.prepare_job import PREPARED_FILE
from navigator.sources.prepare import Prepared, prepare_source
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.layout import Workspace, check_utf8
from navigator.workspace.status import ModelInfo, Status

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


def write_workspace(prep: Prepared, config: NavigatorConfig, device: str, *, keep: bool = False) -> Status:
    """The workspace's status.yaml (state running) and samples: from scratch, or keeping
    the artifacts and reference outputs of an earlier run (``keep``, when resuming)."""
    from navigator._version import __version__

    ws, source = prep.ws, prep.source
    for folder in ws.scratch_dirs(keep=keep):
        shutil.rmtree(folder, ignore_errors=True)
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


def prepare_in_worker(model: str, samples: Any, config: NavigatorConfig, reporter, *, forkserver=None) -> Prepared:
    """Prepare a ``file.py:factory`` source (a PyTorch model file, a Hugging Face folder) in a worker under the run's
    --timeout and --worker-memory-gb: a factory or forward that hangs, balloons, crashes or exits ends in one
    error line, never in the calling process. The worker's files live in a scratch folder of the
    workdir while it runs."""
    import json
    import tempfile

    from navigator.execution import isolation
    from navigator.execution.jobs import Job, PrepareSpec, Task
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
    from navigator.sources.huggingface import HFSource

    source_class = HFSource if s.get("kind") == "huggingface" else TorchSource
    source = source_class.from_facts(s, ModelSignature.from_dict(facts["signature"]))
    for line in facts["warnings"]:
        log.warning("%s", line)
        reporter.warn(line)
    ws = Workspace.for_model(config.workdir, config.model_name or source.name)
    return Prepared(ws=ws, source=source, batches=batches, batch_dim=facts["batch_dim"],
                    profiles=facts["profiles"], samples_info=SamplesInfo.from_dict(facts["samples_info"]),
                    warnings=[], reference=reference, variation=variation, stateful=facts.get("stateful"))
