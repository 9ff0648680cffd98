"""Planning a Triton model repository from a workspace: which formats, and for each
the backend, batching, tensor names and dims, instance kind, dynamic batching,
accelerators, artifact files, warm-up and labels; ensembles around one format.
Nothing is written here (:mod:`navigator.triton.repository` writes)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from navigator import formats as formats_mod
from navigator.errors import UserInputError
from navigator.triton import backends, config as cfg_mod, python_backend
from navigator.triton.config import ModelPlan, TensorPlan, Warmup
from navigator.triton.options import TritonOptions
from navigator.triton.served import options_for_format

log = logging.getLogger("navigator.triton.repository")


@dataclass
class Emission:
    plan: ModelPlan
    version_files: dict[str, Path | str | bytes] = field(default_factory=dict)   # rel path in <version>/
    model_files: dict[str, Path | str | bytes] = field(default_factory=dict)     # rel path in <model>/
    executable: set[str] = field(default_factory=set)
    expected: tuple[list, list] | None = None   # (inputs, outputs) as (name, dtype, dims) from the signature
    config: object = None
    text: str = ""


# --------------------------------------------------------------------------- choosing formats
def select_formats(st, requested: tuple[str, ...], notes: list[str] | None = None) -> list[str]:
    """Format keys to serve: ``best`` (status.best), ``all`` (every verified, servable format)
    or the given keys (each must be converted and verified, and served as verified)."""
    if requested == ("best",):
        if st.best is None:
            raise UserInputError("this workspace has no best format (nothing was verified); name one with "
                                 "--formats KEY")
        refusal = formats_mod.serving_refusal(st.best.key, st.formats[st.best.key])
        if refusal:
            raise UserInputError(f"the best format, {refusal}")
        return [st.best.key]
    if requested == ("all",):
        keys = [k for k, fs in st.formats.items() if fs.verified and backends.servable(fs.format)]
        refused = {k: formats_mod.serving_refusal(k, st.formats[k]) for k in keys}
        for _k, why in refused.items():
            if why and notes is not None:
                notes.append(f"left out: {why}")
        keys = [k for k in keys if not refused[k]]
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
        refusal = formats_mod.serving_refusal(key, fs)
        if refusal:
            raise UserInputError(f"--formats: {refusal}")
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
    from navigator.config import DEFAULT_MAX_BATCH_SIZE

    return profile_max or int(st.config.get("max_batch_size") or DEFAULT_MAX_BATCH_SIZE)


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


def plan_format(ws, st, key: str, name: str, opts: TritonOptions, notes: list[str], *, top: bool) -> Emission:
    fs = st.formats[key]
    fmt = fs.format
    serving = backends.serving_for(fmt, python_backend=opts.python_backend, aoti_native=opts.aoti_native)
    if serving.note:
        notes.append(f"{key}: {serving.note}")
    notes.extend(_engine_launch_notes(ws, key))
    static = _static_shapes(ws, st, fs)
    if static:   # exported at the samples' shapes only: Triton must send exactly those
        if opts.max_batch_size:
            raise UserInputError(f"--max-batch-size {opts.max_batch_size}: {key} was exported with static shapes "
                                 f"(its convert.exporter says why) and runs at one batch size only")
        mbs = 0
        notes.append(f"{key}: exported with static shapes, so served without batching at the shapes it was "
                     f"verified at ({', '.join(f'{n} {list(v)}' for n, v in static.items())})")
    else:
        mbs = _batching(st, fmt, opts, key, notes)
    pairs = [(p["input"], p["output"]) for p in (st.stateful or {}).get("pairs") or []]
    rank0 = [i for i, _ in pairs if not _state_spec(st, i).shape]
    if pairs and (not serving.implicit_state or rank0):   # the state stays model I/O: the client carries it
        why = (f"Triton's {serving.backend} backend keeps no implicit state" if not serving.implicit_state else
               f"state {rank0[0]!r} is a scalar, and Triton's implicit state needs a dim")
        notes.append(f"{key}: stateful, but {why}: the state ({', '.join(i for i, _ in pairs)}) stays an input "
                     "and an output, each request sending the state the previous one returned")
        pairs = []
    if pairs and mbs and any(_state_spec(st, i).shape[:1] != [-1] for i, _ in pairs):
        if opts.max_batch_size:   # Triton batches along dim 0, and a state's batch dim is elsewhere
            raise UserInputError(f"--max-batch-size {opts.max_batch_size}: {key}'s state "
                                 f"{[i for i, _ in pairs][0]!r} does not hold its batch at dim 0: the sequence "
                                 "batcher can only run it one sequence step at a time (max_batch_size 0)")
        mbs = 0
        notes.append(f"{key}: its state does not hold the batch at dim 0: served without batching, one sequence "
                     "step per request")
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
    state_names = {name for pair in pairs for name in pair}   # the sequence batcher holds them, not the client
    for specs, tensors, expected in ((st.signature.inputs, plan.inputs, expected_in),
                                     (st.signature.outputs, plan.outputs, expected_out)):
        for t in specs:
            if t.name in state_names:
                continue
            dims, reshape = cfg_mod.expected_dims(list(static.get(t.name, t.shape)) if static else t.shape, batching)
            tensors.append(TensorPlan(name=triton_names[t.name], source=t.name, feed=artifact_names[t.name],
                                      dtype=t.dtype, dims=dims, reshape=reshape))
            expected.append((triton_names[t.name], t.dtype, dims))
    emission = Emission(plan=plan, expected=(expected_in, expected_out))
    if pairs:
        from navigator.triton.clients import sequence_client

        plan.sequence = _sequence_plan(ws, st, pairs, triton_names, batching, opts, key, notes)
        for state in plan.sequence.states:
            if state.initial is not None:
                emission.model_files[f"initial_state/{state.initial_file}"] = state.initial
        emission.model_files["client_sequence.py"] = sequence_client(
            plan.name, [(t.name, t.source, cfg_mod.triton_dtype(t.dtype)[len("TYPE_"):], t.dims) for t in plan.inputs],
            [(t.name, t.source) for t in plan.outputs], [i for i, _ in pairs])
        emission.executable.add("client_sequence.py")
    options_for_format(plan, fs, serving, opts, key, notes, top=top)
    if plan.python and opts.execution_env and Path(opts.execution_env).is_file():
        emission.model_files[os.path.basename(opts.execution_env)] = Path(opts.execution_env)
    _artifact_files(ws, fs, key, serving, emission, notes, st.environment.get("packages") or {})
    if opts.warmup and plan.sequence is None:   # a warm-up request is no sequence step
        _warmup(ws, plan, emission, batching)
    if top and opts.labels:
        _labels(plan, emission, opts.labels)
    return emission


def _state_spec(st, name: str):
    return next(t for t in st.signature.inputs if t.name == name)


def _sequence_plan(ws, st, pairs, triton_names: dict, batching: bool, opts: TritonOptions, key: str,
                   notes: list[str]):
    """The sequence batcher of a stateful model: one implicit state per pair, zeros at the start of
    each sequence (Triton leaves a state uninitialised otherwise), its dims those of the first stored
    step (an initial state needs fixed dims), less the batch dim when batching."""
    from navigator.triton.config import SequencePlan, StatePlan
    from navigator.workspace import npz

    sample = npz.load(ws.sample_file("inputs", 0)) if ws.sample_file("inputs", 0).is_file() else {}
    states = []
    for i, o in pairs:
        spec = _state_spec(st, i)
        shape = list(sample[i].shape) if i in sample else list(spec.shape)
        dims = shape[1:] if batching else shape
        if any(d < 0 for d in dims):
            raise UserInputError(f"{key}: state {i!r} has no fixed shape ({spec.shape}) and no stored sample gives "
                                 "one: the sequence batcher's initial state needs fixed dims")
        initial = None
        if i in sample and sample[i].any():   # the sequence was verified from this state: it is served from it
            value = sample[i][:1] if batching else sample[i]
            if batching and (sample[i] != value).any():
                raise UserInputError(f"{key}: the stored steps start from another state in each row of {i!r}; "
                                     "Triton starts every sequence from one initial state")
            initial = value.astype(spec.dtype).tobytes()
        states.append(StatePlan(input_name=triton_names.get(i, i), output_name=triton_names.get(o, o),
                                dtype=spec.dtype, dims=dims, initial=initial))
    start = ", ".join(f"{s.input_name} from initial_state/{s.initial_file}" for s in states if s.initial) or "zeros"
    notes.append(f"{key}: stateful ({', '.join(f'{i} -> {o}' for i, o in pairs)}): served by the sequence batcher "
                 f"({opts.sequence_strategy}) with implicit state, {start} at each sequence start; a client sends "
                 "each step with its sequence id (and start / end flags), never the state; no dynamic batcher "
                 "or warm-up beside the sequence batcher; "
                 f"the state is sized for steps shaped as the stored ones "
                 f"({', '.join(f'{n} {list(a.shape)}' for n, a in sample.items() if n not in dict(pairs))})")
    return SequencePlan(states=states, strategy=opts.sequence_strategy,
                        max_candidate_sequences=opts.max_candidate_sequences, idle_us=opts.sequence_idle_us)


def _static_shapes(ws, st, fs) -> dict | None:
    """{tensor: shape} of an artifact exported with static shapes (a torch.export fallback): the first
    stored sample's inputs and reference outputs, the shapes it was verified at; None otherwise."""
    if "static shapes" not in (fs.convert.exporter or ""):
        return None
    from navigator.workspace import npz

    inputs, refs = ws.input_files(), ws.reference_files()
    if not inputs or not refs:
        return None
    return {n: tuple(a.shape) for part in (npz.load(inputs[0]), npz.load(refs[0])) for n, a in part.items()}


# --------------------------------------------------------------------------- files
def _artifact_files(ws, fs, key: str, serving: backends.Serving, emission: Emission, notes: list[str],
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
    record = formats_mod.get(fmt)
    if record.data_files and src.is_file():
        from navigator.dotted import resolve

        external = resolve(record.data_files)(src)
        missing = [p for p in external if not p.is_file()]
        if missing:
            raise UserInputError(f"{key}: external data {missing[0].name} is missing beside {fs.path}")
        artifact_name = serving.default_file if not plan.python else record.artifact
        # Triton's layout for external data: a folder named as the default file, holding it and its data
        folder = f"{artifact_name}/" if external and not plan.python else ""
        files[folder + artifact_name] = src
        for p in external:
            files[folder + os.path.relpath(p, src.parent)] = p
    elif src.is_dir():
        files[serving.default_file if not plan.python else src.name] = src
    else:
        target = serving.default_file if not plan.python else record.artifact
        files[target] = src
        artifact_name = target
        for companion in record.companions:   # openvino: model.bin beside model.xml
            if not (src.parent / companion).is_file():
                raise UserInputError(f"{key}: {fs.path} has no {companion} beside it")
            files[companion] = src.parent / companion
    if plan.python:
        settings = python_backend.settings_for(fmt, artifact_name, plan.inputs, plan.outputs, key=key,
                                               device=plan.instance_kind)
        files["model.py"] = python_backend.render_model_py(settings)
        _python_docs(emission, fmt, notes, packages)


def _python_docs(emission: Emission, kind: str, notes: list[str], packages: dict, step_files=()) -> None:
    """README.md and pack_env.sh beside a Python-backend model (its environment recipe)."""
    plan = emission.plan
    env = plan.parameters.get(python_backend.ENV_PARAMETER)
    archive = env.rsplit("/", 1)[1] if env else None
    found: list[str] = []
    reqs = python_backend.requirements(kind, packages, step_files, found)
    notes.extend(f"{plan.name}: {n}" for n in found)
    ran = (packages or {}).get("numpy")
    emission.model_files["README.md"] = python_backend.readme(plan.name, kind, reqs, archive)
    emission.model_files["pack_env.sh"] = python_backend.pack_env_script(
        plan.name, reqs, numpy_note=f" (the workspace ran numpy {ran})" if ran else "")
    emission.executable.add("pack_env.sh")
    if kind != "function":
        if archive:
            notes.append(f"{plan.name}: Python backend; EXECUTION_ENV_PATH names {archive} in the model folder")
        else:
            notes.append(f"{plan.name}: Python backend; stock Triton containers lack {', '.join(reqs[1:])}: "
                         f"build env.tar.gz with {plan.name}/pack_env.sh and pass --execution-env env.tar.gz")


def _warmup(ws, plan: ModelPlan, emission: Emission, batching: bool) -> None:
    """Warm-up from the first stored sample: one row per input (the whole tensor without
    batching) as raw bytes in <model>/warmup/, referenced by input_data_file; at batch 1 and
    at the preferred batch sizes (the sizes the batcher forms under load), never at
    max_batch_size: a large warm-up batch makes a CPU model slow to load for no gain."""
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
    preferred = (plan.dynamic_batching or {}).get("preferred") or []
    for size in sorted({p for p in preferred if 1 < p <= plan.max_batch_size}) if batching else ():
        plan.warmup.append(Warmup(name=f"sample_batch_{size}", batch_size=size, inputs=inputs))


def _labels(plan: ModelPlan, emission: Emission, spec: str) -> None:
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
def plan_ensemble(ws, st, core: Emission, base: str, opts: TritonOptions, notes: list[str]) -> list[Emission]:
    from navigator.triton import ensemble as ens_mod
    from navigator.workspace import npz

    limit = ens_mod.MAX_EXAMPLES
    samples = [npz.load(p) for p in ws.input_files()[:limit]]
    references = [npz.load(ws.reference_file(p.stem)) for p in ws.input_files()[:limit]
                  if ws.reference_file(p.stem).is_file()]
    plans = ens_mod.plan(core.plan, name=base, preprocess=opts.preprocess, postprocess=opts.postprocess,
                         samples=samples, references=references, instance_count=opts.instances, notes=notes)
    out = []
    for p in plans:
        e = Emission(plan=p)
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
            _python_docs(e, "function", notes, st.environment.get("packages") or {}, step_files=(user_file,))
        out.append(e)
    notes.append(f"{base}: an ensemble of " + " -> ".join(s.model_name for s in plans[-1].steps))
    return out


# --------------------------------------------------------------------------- configs
def build_config(e: Emission) -> None:
    e.config = cfg_mod.build(e.plan)
    problems = cfg_mod.problems(e.config)
    if problems:
        raise UserInputError(f"Triton would refuse the config of {e.plan.name}: {problems[0]}")
    if e.expected is not None:
        mismatch = cfg_mod.signature_problems(e.config, *e.expected)
        if mismatch:   # a builder bug: the config must say what the workspace verified
            raise RuntimeError(f"config of {e.plan.name} does not match the workspace signature: {mismatch[0]}")
    e.text = cfg_mod.to_text(e.config)
