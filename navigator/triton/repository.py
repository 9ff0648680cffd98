"""The Triton model repository: plan every model from the workspace, check it, then
write it atomically next to whatever the repository already holds.

Layout (Triton's): ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/``
with the artifact (or ``model.py`` + the artifact for the Python backend),
``<repo>/<model>/warmup/<input>`` raw warm-up tensors, and for Python-backend
models ``README.md`` + ``pack_env.sh``.

Model names: the served model is ``<model>`` (``--model-name``, default the
workspace's model name) for ``--formats best`` or a single key; with
``--formats all`` or several keys every format is its own model
``<model>_<key>`` (``-`` becomes ``_``). With ``--preprocess``/``--postprocess``
the ensemble is ``<model>`` and its steps are ``<model>_preprocess``,
``<model>_<key>`` and ``<model>_postprocess``.

Versions: ``--model-version N`` or the next free number (one number for every
model written together). Other models and versions are never touched; an
existing version N is replaced only with ``--force``. config.pbtxt is shared by
all versions of a model, so a new version whose interface (backend, batching,
tensors) differs from the existing config is refused unless ``--force``.

Atomicity: every model is first written in full into a temporary folder beside
the repository, checked (each config.pbtxt parsed back as ModelConfig), then
moved in with renames: a new model appears whole; for an existing model the
version folder is renamed in and config.pbtxt replaced last. A failure undoes
the renames already made.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from navigator import formats as formats_mod
from navigator.errors import UserInputError
from navigator.triton import backends, config as cfg_mod, python_backend
from navigator.triton.config import ModelPlan, TensorPlan, Warmup
from navigator.triton.options import TritonOptions

log = logging.getLogger(__name__)

_NEAR_PEAK = 0.9     # preferred batch sizes: profiled sizes within 10% of the peak throughput


@dataclass
class EmittedModel:
    name: str
    version: int
    role: str                  # model | preprocess | postprocess | ensemble
    key: str | None
    backend: str               # backend or platform as config.pbtxt says
    python: bool
    path: Path


@dataclass
class EmitResult:
    repo: Path
    version: int
    models: list[EmittedModel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def served(self) -> list[str]:
        """The models clients call (the ensemble when there is one)."""
        top = [m.name for m in self.models if m.role == "ensemble"]
        return top or [m.name for m in self.models if m.role == "model"]

    def lines(self) -> list[str]:
        out = [f"Triton repository {self.repo} (version {self.version})"]
        for m in self.models:
            what = f"format {m.key}" if m.key else m.role
            via = "python backend" if m.python else m.backend
            out.append(f"  {m.name}/{m.version}: {what} via {via}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out


@dataclass
class _Emission:
    plan: ModelPlan
    version_files: dict[str, Path | str | bytes] = field(default_factory=dict)   # rel path in <version>/
    model_files: dict[str, Path | str | bytes] = field(default_factory=dict)     # rel path in <model>/
    executable: set[str] = field(default_factory=set)
    expected: tuple[list, list] | None = None   # (inputs, outputs) as (name, dtype, dims) from the signature
    config: object = None
    text: str = ""


# --------------------------------------------------------------------------- entry
def emit(workspace, options: TritonOptions | None = None, *, status=None, lock: bool = True) -> EmitResult:
    """Write the Triton repository for a workspace (see the module docstring). ``status``:
    the workspace's record when the caller has it; ``lock=False`` when the caller already
    holds the workspace lock (``navigator convert --triton-repo``)."""
    from navigator.workspace.layout import Workspace
    from navigator.workspace.lock import WorkspaceLock

    ws = Workspace(Path(workspace)) if status is not None else Workspace.find(workspace)
    if not lock:
        return _emit(ws, options or TritonOptions(), status)
    with WorkspaceLock(ws.lock_path):      # no convert may rewrite the artifacts while they are copied
        return _emit(ws, options or TritonOptions(), status)


def _emit(ws, opts: TritonOptions, status) -> EmitResult:
    from navigator.workspace import status as status_mod

    st = status if status is not None else status_mod.load(ws.status_path)
    repo = Path(opts.repo).expanduser() if opts.repo else ws.triton_dir
    repo = repo.resolve()
    if repo.exists() and not repo.is_dir():
        raise UserInputError(f"--repo {repo}: exists and is not a folder")
    records = [ws.root / sub for sub in ("formats", "samples", "jobs")]
    if repo == ws.root or any(r == repo or r in repo.parents for r in records):
        raise UserInputError(f"--repo {repo}: inside the workspace's own records; use {ws.triton_dir} or a "
                             "folder outside the workspace")
    notes: list[str] = []
    keys = select_formats(st, opts.formats)
    base = triton_name(opts.model_name or st.model.name)
    ensemble = bool(opts.preprocess or opts.postprocess)
    if ensemble and len(keys) != 1:
        raise UserInputError("--preprocess/--postprocess wrap one format in an ensemble; choose one with "
                             "--formats best or --formats KEY")
    several = opts.formats == ("all",) or len(keys) > 1 or ensemble
    emissions = []
    for key in keys:
        name = f"{base}_{key.replace('-', '_')}" if several else base
        emissions.append(_plan_format(ws, st, key, name, opts, notes, top=not ensemble))
    if ensemble:   # steps first, the ensemble last: it goes live once everything it runs is in place
        around = _plan_ensemble(ws, st, emissions[0], base, opts, notes)
        emissions = [e for e in around if e.plan.role != "ensemble"] + emissions + \
            [e for e in around if e.plan.role == "ensemble"]
    names = [e.plan.name for e in emissions]
    if len(set(names)) != len(names):
        raise UserInputError(f"two Triton models would share a name ({', '.join(names)}); choose another "
                             "--model-name")
    for e in emissions:
        _build_config(e)
    if ensemble:
        from navigator.triton import ensemble as ens_mod

        top = next(e for e in emissions if e.plan.role == "ensemble")
        ens_mod.raise_if_invalid(top.config, {e.plan.name: e.config for e in emissions if e is not top})
    version = _choose_version(repo, names, opts)
    _check_existing(repo, emissions, version, opts, notes)
    _commit(repo, emissions, version, opts.force)
    _verify_written(repo, emissions)
    result = EmitResult(repo=repo, version=version, notes=notes)
    for e in emissions:
        p = e.plan
        result.models.append(EmittedModel(name=p.name, version=version, role=p.role, key=p.key,
                                          backend=p.platform or p.backend, python=p.python, path=repo / p.name))
    log.info("triton repository %s: %s (version %d)", repo, ", ".join(names), version)
    return result


# --------------------------------------------------------------------------- choosing formats
def select_formats(st, requested: tuple[str, ...]) -> list[str]:
    """Format keys to serve: ``best`` (status.best), ``all`` (every verified, servable format)
    or the given keys (each must be converted and verified)."""
    if requested == ("best",):
        if st.best is None:
            raise UserInputError("this workspace has no best format (nothing was verified); name one with "
                                 "--formats KEY")
        return [st.best.key]
    if requested == ("all",):
        keys = [k for k, fs in st.formats.items() if fs.verified and backends.servable(fs.format)]
        if not keys:
            raise UserInputError("this workspace has no verified format to serve")
        return keys
    for key in requested:
        fs = st.formats.get(key)
        if fs is None:
            raise UserInputError(f"--formats: no format {key!r} in this workspace; have: "
                                 f"{', '.join(st.formats) or 'none'}")
        if fs.convert.status != "ok":
            raise UserInputError(f"--formats: {key} was not converted ({fs.convert.reason})")
        if not fs.verified:
            failed = [f"{r}: {rs.verify.status}" for r, rs in fs.runners.items()]
            raise UserInputError(f"--formats: {key} was not verified ({', '.join(failed) or 'no runner'}); "
                                 "Triton would serve an unchecked model")
    return list(requested)


def triton_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("._-")
    if not name:
        raise UserInputError(f"model name {text!r} has no usable characters for Triton; pass --model-name")
    return name


# --------------------------------------------------------------------------- one format
def _batching(st, fs_format: str, opts: TritonOptions, key: str, notes: list[str]) -> int:
    """max_batch_size for the model (0 = no batching)."""
    sig = st.signature
    tensors = sig.inputs + sig.outputs
    can = st.batch_dim == 0 and all(t.rank >= 1 and t.shape[0] < 0 for t in tensors)
    if not can:
        if opts.max_batch_size:
            why = ("its batch dim is " + str(st.batch_dim) + ", and Triton batches along dim 0 only"
                   if st.batch_dim not in (None, 0) else
                   "it has no batch dim" if st.batch_dim is None else "not every input and output has a dynamic dim 0")
            raise UserInputError(f"--max-batch-size {opts.max_batch_size}: {key} cannot batch ({why})")
        if st.batch_dim not in (None, 0):
            notes.append(f"{key}: the batch dim is {st.batch_dim}; Triton batches along dim 0 only, so it is served "
                         "without batching (max_batch_size 0, full dims)")
        return 0
    if opts.max_batch_size == 0:
        return 0
    profile_max = None
    for profile in st.shape_profiles or []:
        for t in sig.inputs:
            if t.name in profile:
                m = int(profile[t.name]["max"][0])
                profile_max = m if profile_max is None else max(profile_max, m)
    if opts.max_batch_size is not None:
        if formats_mod.get(fs_format).fixed_batch and profile_max is not None and opts.max_batch_size > profile_max:
            raise UserInputError(f"--max-batch-size {opts.max_batch_size}: the {fs_format} artifact {key} was built "
                                 f"for batches up to {profile_max}; convert again with a larger --max-batch-size")
        return opts.max_batch_size
    return profile_max or int(st.config.get("max_batch_size") or 64)


def _names(st, fs, serving: backends.Serving, notes: list[str], key: str) -> tuple[dict, dict]:
    """(our name -> Triton name, our name -> name inside the artifact)."""
    sig = st.signature
    io = dict(fs.io_names or {})
    artifact = {t.name: io.get(t.name, t.name) for t in sig.inputs + sig.outputs}
    if serving.name_convention == "artifact":
        return dict(artifact), artifact
    if serving.name_convention == "ours":
        return {n: n for n in artifact}, artifact
    ins, gen_in = backends.pytorch_names(sig.input_names, [artifact[n] for n in sig.input_names], "INPUT")
    outs, gen_out = backends.pytorch_names(sig.output_names, [artifact[n] for n in sig.output_names], "OUTPUT")
    if gen_in or gen_out:
        notes.append(f"{key}: the PyTorch backend binds tensors by <name>__<index>; the workspace records no such "
                     f"names, so they were generated from the signature order: "
                     + ", ".join(f"{a} -> {b}" for a, b in zip(sig.input_names + sig.output_names, ins + outs)))
    return dict(zip(sig.input_names + sig.output_names, ins + outs)), artifact


def _compiled_device(fs) -> str | None:
    """The device a compiled package (aoti) was built for: from its exporter, else where it verified."""
    m = re.search(r"\((cpu|cuda)\)", fs.convert.exporter or "")
    if m:
        return m.group(1)
    devices = {rs.device for rs in fs.runners.values() if rs.verify.status == "ok"}
    return devices.pop() if len(devices) == 1 else None


def _instance_kind(fmt: str, fs, serving: backends.Serving, opts: TritonOptions, key: str) -> str:
    record = formats_mod.get(fmt)
    devices = set(record.python_devices if serving.backend == "python" else serving.devices)
    if record.compiled_for_device:
        compiled = _compiled_device(fs)
        devices = {"gpu"} if compiled == "cuda" else {"cpu"} if compiled == "cpu" else devices
    wanted = opts.kind
    if wanted != "auto" and wanted not in devices:
        raise UserInputError(f"--kind {wanted}: {key} runs on {' or '.join(sorted(devices))} only under Triton "
                             f"({serving.backend} backend)")
    if wanted == "auto" and len(devices) == 1:
        wanted = devices.pop()
    return {"cpu": "KIND_CPU", "gpu": "KIND_GPU", "auto": "KIND_AUTO"}[wanted]


def _preferred(fs, kind: str, max_batch_size: int) -> list[int]:
    """Profiled batch sizes within 10% of the peak throughput of the runner that matches the
    instance kind (CUDA runners for GPU instances, CPU ones for CPU)."""
    candidates = []
    for rs in fs.runners.values():
        if rs.verify.status != "ok" or rs.profile.status != "ok" or not rs.profile.results:
            continue
        candidates.append(rs)
    want = {"KIND_GPU": ("cuda",), "KIND_CPU": ("cpu",)}.get(kind, ("cuda", "cpu"))
    for device in want:
        matching = [rs for rs in candidates if rs.device == device]
        if matching:
            best = max(matching, key=lambda rs: rs.profile.peak().throughput)
            peak = best.profile.peak().throughput
            return sorted({r.batch_size for r in best.profile.results
                           if r.throughput >= _NEAR_PEAK * peak and r.batch_size <= max_batch_size})
    return []


def _engine_launch_notes(ws, key: str) -> list[str]:
    """How tritonserver must be started for a TensorRT engine (plugins, version
    compatibility), from the engine.yaml its build wrote."""
    import yaml

    path = ws.format_dir(key) / "engine.yaml"
    if not path.is_file():
        return []
    triton = (yaml.safe_load(path.read_text()) or {}).get("triton") or {}
    out = [f"{key}: start tritonserver with --backend-config={cfg}" for cfg in triton.get("backend_config") or []]
    if triton.get("ld_preload"):
        out.append(f"{key}: the engine needs its plugin libraries: LD_PRELOAD={triton['ld_preload']} tritonserver …")
    return out


def _plan_format(ws, st, key: str, name: str, opts: TritonOptions, notes: list[str], *, top: bool) -> _Emission:
    fs = st.formats[key]
    fmt = fs.format
    serving = backends.serving_for(fmt, python_backend=opts.python_backend, aoti_native=opts.aoti_native)
    if serving.note:
        notes.append(f"{key}: {serving.note}")
    notes.extend(_engine_launch_notes(ws, key))
    mbs = _batching(st, fmt, opts, key, notes)
    batching = mbs > 0
    triton_names, artifact_names = _names(st, fs, serving, notes, key)
    kind = _instance_kind(fmt, fs, serving, opts, key)
    python = serving.backend == "python"
    plan = ModelPlan(name=name, role="model", backend=serving.backend, platform=serving.platform,
                     key=key, format=fmt, python=python, max_batch_size=mbs, instance_kind=kind,
                     instance_count=opts.instances, rate_limit=opts.rate_limit_resources,
                     rate_limit_priority=opts.rate_limit_priority)
    plan.default_model_filename = serving.default_file
    expected_in, expected_out = [], []
    for specs, tensors, expected in ((st.signature.inputs, plan.inputs, expected_in),
                                     (st.signature.outputs, plan.outputs, expected_out)):
        for t in specs:
            dims, reshape = cfg_mod.expected_dims(t.shape, batching)
            tensors.append(TensorPlan(name=triton_names[t.name], source=t.name, feed=artifact_names[t.name],
                                      dtype=t.dtype, dims=dims, reshape=reshape))
            expected.append((triton_names[t.name], t.dtype, dims))
    emission = _Emission(plan=plan, expected=(expected_in, expected_out))
    _options_for_format(plan, fs, serving, opts, key, top=top)
    if plan.python and opts.execution_env and Path(opts.execution_env).is_file():
        emission.model_files[os.path.basename(opts.execution_env)] = Path(opts.execution_env)
    _artifact_files(ws, fs, key, serving, emission, notes, st.environment.get("packages") or {})
    if opts.warmup:
        _warmup(ws, plan, emission, batching)
    if top and opts.labels:
        _labels(plan, emission, opts.labels)
    return emission


def _options_for_format(plan: ModelPlan, fs, serving: backends.Serving, opts: TritonOptions, key: str,
                        *, top: bool) -> None:
    gpu = plan.instance_kind == "KIND_GPU"
    native_onnx = serving.platform == "onnxruntime_onnx"
    plan_file = serving.platform == "tensorrt_plan"
    if plan.max_batch_size > 0 and opts.dynamic_batching or opts.priority_levels or opts.queue_policy:
        db = {}
        if plan.max_batch_size > 0:
            sizes = list(opts.preferred_batch_sizes) if opts.preferred_batch_sizes else \
                _preferred(fs, plan.instance_kind, plan.max_batch_size)
            bad = [s for s in sizes if s > plan.max_batch_size]
            if bad:
                raise UserInputError(f"--preferred-batch-sizes: {bad[0]} exceeds max_batch_size "
                                     f"{plan.max_batch_size} of {key}")
            db["preferred"] = sizes
            db["max_queue_delay_us"] = opts.max_queue_delay_us
        if opts.priority_levels:
            db["priority_levels"] = opts.priority_levels
            db["default_priority_level"] = opts.default_priority_level or opts.priority_levels
        db["queue_policy"] = opts.queue_policy
        plan.dynamic_batching = db
    if opts.cuda_graphs:
        if not gpu:
            raise UserInputError(f"--cuda-graphs needs GPU instances: add --kind gpu ({key} would get "
                                 f"{plan.instance_kind})")
        if plan_file:
            plan.cuda_graphs = True
        elif native_onnx and not opts.ort_trt_precision:
            plan.gpu_accelerators.append(("cuda", {"enable_cuda_graph": "1"}))
        elif not native_onnx:
            raise UserInputError(f"--cuda-graphs: Triton applies CUDA graphs to TensorRT plans and to ONNX Runtime "
                                 f"on GPU; {key} is served by the {serving.backend} backend")
    if opts.ort_trt_precision:
        if not native_onnx:
            raise UserInputError(f"--ort-trt-precision sets ONNX Runtime's TensorRT accelerator; {key} is served "
                                 f"by the {serving.backend} backend, not onnxruntime")
        if not gpu:
            raise UserInputError(f"--ort-trt-precision needs GPU instances: add --kind gpu ({key} would get "
                                 f"{plan.instance_kind})")
        params = {"precision_mode": opts.ort_trt_precision.upper()}
        if opts.cuda_graphs:
            params["trt_cuda_graph_enable"] = "1"
        plan.gpu_accelerators.append(("tensorrt", params))
    if top and opts.response_cache:
        plan.response_cache = True
    if plan.python and opts.execution_env:
        plan.parameters[python_backend.ENV_PARAMETER] = "$$TRITON_MODEL_DIRECTORY/" + \
            os.path.basename(opts.execution_env)


# --------------------------------------------------------------------------- files
def _onnx_external(path: Path) -> list[Path]:
    from navigator.sources.signature import external_data_files, load_onnx

    return external_data_files(load_onnx(path), path.parent)


def _artifact_files(ws, fs, key: str, serving: backends.Serving, emission: _Emission, notes: list[str],
                    packages: dict) -> None:
    plan = emission.plan
    fmt = fs.format
    if not fs.path:
        raise UserInputError(f"{key}: status.yaml records no artifact path")
    src = ws.abs(fs.path)
    if not src.exists():
        raise UserInputError(f"{key}: the artifact {fs.path} is missing from the workspace; run navigator convert "
                             "again")
    files = emission.version_files
    artifact_name = src.name
    if fmt == "onnx":
        external = _onnx_external(src)
        missing = [p for p in external if not p.is_file()]
        if missing:
            raise UserInputError(f"{key}: external data {missing[0].name} is missing beside {fs.path}")
        if external and not plan.python:
            # Triton's layout for external data: a folder model.onnx/ holding model.onnx and its data
            files["model.onnx/model.onnx"] = src
            for p in external:
                files[f"model.onnx/{os.path.relpath(p, src.parent)}"] = p
        else:
            files["model.onnx"] = src
            for p in external:
                files[os.path.relpath(p, src.parent)] = p
        artifact_name = "model.onnx"
    elif src.is_dir():
        files[serving.default_file if not plan.python else src.name] = src
    else:
        record = formats_mod.get(fmt)
        target = serving.default_file if not plan.python else record.artifact
        files[target] = src
        artifact_name = target
        for companion in record.companions:   # openvino: model.bin beside model.xml
            if not (src.parent / companion).is_file():
                raise UserInputError(f"{key}: {fs.path} has no {companion} beside it")
            files[companion] = src.parent / companion
    if plan.python:
        settings = python_backend.settings_for(fmt, artifact_name, plan.inputs, plan.outputs, key=key)
        files["model.py"] = python_backend.render_model_py(settings)
        _python_docs(emission, fmt, notes, packages)


def _python_docs(emission: _Emission, kind: str, notes: list[str], packages: dict) -> None:
    """README.md and pack_env.sh beside a Python-backend model (its environment recipe)."""
    plan = emission.plan
    env = plan.parameters.get(python_backend.ENV_PARAMETER)
    archive = env.rsplit("/", 1)[1] if env else None
    reqs = python_backend.requirements(kind, packages)
    emission.model_files["README.md"] = python_backend.readme(plan.name, kind, reqs, archive)
    emission.model_files["pack_env.sh"] = python_backend.pack_env_script(plan.name, reqs)
    emission.executable.add("pack_env.sh")
    if kind != "function":
        if archive:
            notes.append(f"{plan.name}: Python backend; EXECUTION_ENV_PATH names {archive} in the model folder")
        else:
            notes.append(f"{plan.name}: Python backend; stock Triton containers lack {', '.join(reqs[1:])}: "
                         f"build env.tar.gz with {plan.name}/pack_env.sh and pass --execution-env env.tar.gz")


def _warmup(ws, plan: ModelPlan, emission: _Emission, batching: bool) -> None:
    """Warm-up from the first stored sample: one row per input (the whole tensor without
    batching) as raw bytes in <model>/warmup/, referenced by input_data_file."""
    import numpy as np

    from navigator.workspace import npz

    path = ws.sample_file("inputs", 0)
    if not path.is_file():
        return
    sample = npz.load(path)
    inputs: dict[str, tuple[str, list[int], str]] = {}
    used: set[str] = set()
    for t in plan.inputs:
        arr = sample.get(t.source)
        if arr is None:
            return
        row = np.ascontiguousarray((arr[:1] if batching else arr).astype(t.dtype, copy=False))
        dims = list(row.shape[1:] if batching else row.shape)
        if t.reshape is not None:
            dims = [1]
        file_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", t.name).strip(".") or "input"
        while file_name in used:
            file_name += "_"
        used.add(file_name)
        emission.model_files[f"warmup/{file_name}"] = row.tobytes()
        inputs[t.name] = (t.dtype, dims, file_name)
    plan.warmup.append(Warmup(name="sample_batch_1", batch_size=1, inputs=inputs))
    if batching and plan.max_batch_size > 1:
        plan.warmup.append(Warmup(name=f"sample_batch_{plan.max_batch_size}", batch_size=plan.max_batch_size,
                                  inputs=inputs))


def _labels(plan: ModelPlan, emission: _Emission, spec: str) -> None:
    """``--labels FILE`` (the first output) or ``--labels OUTPUT=FILE``."""
    target = plan.outputs[0] if plan.outputs else None
    path_text = spec
    if "=" in spec and not Path(spec).is_file():
        out_name, _, path_text = spec.partition("=")
        target = next((t for t in plan.outputs if out_name in (t.name, t.source)), None)
        if target is None:
            raise UserInputError(f"--labels {spec}: no output {out_name!r}; outputs: "
                                 f"{', '.join(t.source or t.name for t in plan.outputs)}")
    path = Path(path_text)
    if not path.is_file():
        raise UserInputError(f"--labels {path}: no such file")
    labels = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not labels:
        raise UserInputError(f"--labels {path}: the file holds no labels (one per line)")
    if target.dims and target.dims[-1] > 0 and len(labels) != target.dims[-1]:
        raise UserInputError(f"--labels {path}: {len(labels)} labels, but output {target.name!r} has "
                             f"{target.dims[-1]} classes")
    file_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name)
    target.label_filename = file_name
    emission.model_files[file_name] = path.read_bytes()


# --------------------------------------------------------------------------- ensembles
def _plan_ensemble(ws, st, core: _Emission, base: str, opts: TritonOptions, notes: list[str]) -> list[_Emission]:
    from navigator.triton import ensemble as ens_mod
    from navigator.workspace import npz

    sample = npz.load(ws.sample_file("inputs", 0)) if ws.sample_file("inputs", 0).is_file() else {}
    ref_path = ws.reference_dir / "000.npz"
    reference = npz.load(ref_path) if ref_path.is_file() else {}
    if opts.postprocess and not reference:
        raise UserInputError("--postprocess: the workspace has no reference outputs (samples/reference/000.npz) "
                             "to probe it with")
    plans = ens_mod.plan(core.plan, name=base, preprocess=opts.preprocess, postprocess=opts.postprocess,
                         sample=sample, reference=reference, instance_count=opts.instances)
    out = []
    for p in plans:
        e = _Emission(plan=p)
        if p.role == "ensemble":
            if opts.response_cache:
                p.response_cache = True
            if opts.labels:
                _labels(p, e, opts.labels)
            e.expected = ([(t.name, t.dtype, t.dims) for t in p.inputs],
                          [(t.name, t.dtype, t.dims) for t in p.outputs])
        else:
            user_file = opts.preprocess if p.role == ens_mod.PRE else opts.postprocess
            e.version_files["step.py"] = Path(user_file)
            settings = python_backend.settings_for("function", "step.py", p.inputs, p.outputs, function=p.role)
            e.version_files["model.py"] = python_backend.render_model_py(settings)
            _python_docs(e, "function", notes, st.environment.get("packages") or {})
        out.append(e)
    notes.append(f"{base}: an ensemble of " + " -> ".join(s.model_name for s in plans[-1].steps))
    return out


# --------------------------------------------------------------------------- configs
def _build_config(e: _Emission) -> None:
    e.config = cfg_mod.build(e.plan)
    problems = cfg_mod.problems(e.config)
    if problems:
        raise UserInputError(f"Triton would refuse the config of {e.plan.name}: {problems[0]}")
    if e.expected is not None:
        mismatch = cfg_mod.signature_problems(e.config, *e.expected)
        if mismatch:   # a builder bug: the config must say what the workspace verified
            raise RuntimeError(f"config of {e.plan.name} does not match the workspace signature: {mismatch[0]}")
    e.text = cfg_mod.to_text(e.config)


# --------------------------------------------------------------------------- versions
def existing_versions(model_dir: Path) -> list[int]:
    """Numeric version folders Triton would load (no leading zeros)."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p.name == "0" or not p.name.startswith("0")))


def _choose_version(repo: Path, names: list[str], opts: TritonOptions) -> int:
    if opts.model_version is not None:
        return opts.model_version
    found = [v for n in names for v in existing_versions(repo / n)]
    return max(found, default=0) + 1


def _check_existing(repo: Path, emissions: list[_Emission], version: int, opts: TritonOptions,
                    notes: list[str]) -> None:
    for e in emissions:
        model_dir = repo / e.plan.name
        if model_dir.exists() and not model_dir.is_dir():
            raise UserInputError(f"{model_dir} exists and is not a folder; Triton model {e.plan.name} cannot go there")
        vdir = model_dir / str(version)
        if vdir.exists() and not opts.force:
            free = max(existing_versions(model_dir), default=0) + 1
            raise UserInputError(f"{vdir} exists: Triton model {e.plan.name} already has version {version}; leave "
                                 f"--model-version out for the next free one ({free}), or --force to replace it")
        config_path = model_dir / "config.pbtxt"
        others = [v for v in existing_versions(model_dir) if v != version]
        if config_path.is_file() and others:
            old = cfg_mod.parse(config_path.read_text(encoding="utf-8"), source=str(config_path))
            diffs = cfg_mod.io_differences(old, e.config)
            if diffs and not opts.force:
                raise UserInputError(f"Triton model {e.plan.name} in {repo} has version(s) "
                                     f"{', '.join(map(str, others))} with another interface ({diffs[0]}); "
                                     "config.pbtxt is shared by all versions, so this one would break them: choose "
                                     "another --model-name, or --force to replace the config")
            if diffs:
                notes.append(f"{e.plan.name}: --force replaced config.pbtxt with another interface ({diffs[0]}); "
                             f"version(s) {', '.join(map(str, others))} may no longer load with it")


# --------------------------------------------------------------------------- writing
def _write_entry(root: Path, rel: str, value, executable: bool) -> None:
    dest = root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, Path):
        if value.is_dir():
            shutil.copytree(value, dest)
        else:
            shutil.copyfile(value, dest)
    elif isinstance(value, bytes):
        dest.write_bytes(value)
    else:
        dest.write_text(value, encoding="utf-8")
    mode = 0o755 if executable else 0o644
    if not dest.is_dir():
        os.chmod(dest, mode)


def _stage(stage: Path, e: _Emission, version: int) -> Path:
    model = stage / e.plan.name
    vdir = model / str(version)
    vdir.mkdir(parents=True)
    for rel, value in e.version_files.items():
        _write_entry(vdir, rel, value, False)
    for rel, value in e.model_files.items():
        _write_entry(model, rel, value, rel in e.executable)
    (model / "config.pbtxt").write_text(e.text, encoding="utf-8")
    # the staged text must read back exactly as the message (what Triton will parse)
    if cfg_mod.parse((model / "config.pbtxt").read_text(encoding="utf-8")) != e.config:
        raise RuntimeError(f"staged config.pbtxt of {e.plan.name} does not read back as written")
    return model


def _stage_root(repo: Path) -> Path:
    """A temporary folder on the repository's filesystem, outside it when possible (Triton's
    repository poller would otherwise see it), so renames into the repository are atomic."""
    repo.mkdir(parents=True, exist_ok=True)
    parent = repo.parent
    try:
        same_fs = os.stat(parent).st_dev == os.stat(repo).st_dev and os.access(parent, os.W_OK)
    except OSError:
        same_fs = False
    return Path(tempfile.mkdtemp(prefix=f".{repo.name}.navigator-", dir=parent if same_fs else repo))


def _commit(repo: Path, emissions: list[_Emission], version: int, force: bool) -> None:
    stage = _stage_root(repo)
    done: list[tuple[str, Path, Path]] = []      # (action, from, to) for the undo
    try:
        staged = [(e, _stage(stage, e, version)) for e in emissions]
        for e, model in staged:
            target = repo / e.plan.name
            if not target.exists():
                os.rename(model, target)
                done.append(("rename", model, target))
                continue
            vdir = target / str(version)
            if vdir.exists():                       # --force (checked before)
                old = stage / f"{e.plan.name}.replaced-{version}"
                os.rename(vdir, old)
                done.append(("rename", vdir, old))
            for rel in e.model_files:               # model-level files (warm-up, labels, docs)
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    keep = stage / f"{e.plan.name}.previous" / rel
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(dest, keep)
                    done.append(("restore", keep, dest))
                else:
                    done.append(("remove", dest, dest))
                os.replace(model / rel, dest)
            os.rename(model / str(version), vdir)
            done.append(("rename", model / str(version), vdir))
            config = target / "config.pbtxt"
            if config.exists():
                keep = stage / f"{e.plan.name}.previous" / "config.pbtxt"
                keep.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(config, keep)
                done.append(("restore", keep, config))
            else:
                done.append(("remove", config, config))
            os.replace(model / "config.pbtxt", config)   # last: the new config goes live at once
    except BaseException:
        for action, a, b in reversed(done):
            try:
                if action == "rename":
                    os.rename(b, a)
                elif action == "restore":
                    os.replace(a, b)
                elif action == "remove" and b.exists():
                    b.unlink()
            except OSError as undo_error:   # keep undoing the rest
                log.error("could not undo %s %s -> %s: %s", action, a, b, undo_error)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _verify_written(repo: Path, emissions: list[_Emission]) -> None:
    """Every config.pbtxt now in the repository parses as ModelConfig and is the one planned."""
    for e in emissions:
        path = repo / e.plan.name / "config.pbtxt"
        if cfg_mod.parse(path.read_text(encoding="utf-8"), source=str(path)) != e.config:
            raise RuntimeError(f"{path} changed while it was written")
