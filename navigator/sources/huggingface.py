"""Hugging Face models: a folder written by ``save_pretrained`` (``config.json`` + weights,
optionally a tokenizer) or a live ``PreTrainedModel`` passed to ``navigator.convert``.

Such a source is a PyTorch source (format ``torch``) whose module is the checkpoint loaded
for its task behind named inputs, returning the task's output fields by name (``logits``,
``start_logits``, ``last_hidden_state`` …). What a user of a plain module must spell out,
the folder already says: the task (``config.architectures``, ``--task`` to override), the
inputs with their dtypes, bounds and dynamic dims (:mod:`~navigator.sources.hf_inputs`),
informative samples, the shape profile. Workers rebuild the module from the folder
(``formats/torch/source.json`` kind ``huggingface``), as they do a ``file.py:factory``;
a live model stays in the calling process. transformers is imported only when such a
source is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.sources.torch import FORMAT, TorchSource


@dataclass
class HFSource(TorchSource):
    model: Any = None                  # the PreTrainedModel, float32, eval, on the CPU
    folder: Any = None                 # its HFFolder (None for a live model)
    task: Any = None                   # hf_support.Task
    inputs_plan: list = field(default_factory=list)      # hf_inputs.HFInput per input the task takes
    fixed: dict = field(default_factory=dict)            # keyword arguments of every call (use_cache=False)
    output_fields: list = field(default_factory=list)
    trust_remote_code: bool = False
    huggingface: dict = field(default_factory=dict)      # status.yaml model.huggingface
    keep: set = field(default_factory=set)                # inputs the user gave value ranges for

    def identity(self) -> str | None:
        return str(self.folder.path.resolve()) if self.folder is not None else None

    def _digest(self) -> str | None:
        if self.folder is None:
            return None                  # a live model: no resume
        import hashlib

        return hashlib.sha256(f"{self.folder.sha256()}\0{self.task.name}".encode()).hexdigest()

    # -------------------------------------------------------------- prepared in a worker
    def worker_facts(self) -> dict:
        """What the calling process keeps of a folder prepared in a worker (JSON-safe): enough to
        write source.json and status.yaml; the model itself stays in the worker."""
        return {"kind": "huggingface", "name": self.name, "folder": str(self.folder.path), "task": self.task.name,
                "io": self.io.to_json(), "outputs": list(self.output_fields), "fixed": dict(self.fixed),
                "trust_remote_code": self.trust_remote_code, "huggingface": dict(self.huggingface),
                "index_bounds": dict(self.index_bounds), "notes": list(self.notes)}

    @classmethod
    def from_facts(cls, facts: dict, signature) -> "HFSource":
        from navigator.sources import hf_support as hs
        from navigator.sources import torch_support as ts
        from navigator.sources.hf_folder import read_folder

        folder = read_folder(facts["folder"])
        return cls(format=FORMAT, key=FORMAT, name=facts["name"], path=folder.path, isolated=True,
                   reference_runner=None, signature=signature, index_bounds=facts["index_bounds"],
                   notes=facts["notes"], io=ts.TorchIO.from_json(facts["io"]), folder=folder,
                   task=hs.TASKS[facts["task"]], fixed=facts["fixed"], output_fields=facts["outputs"],
                   trust_remote_code=facts["trust_remote_code"], huggingface=facts["huggingface"])

    # -------------------------------------------------------------- inputs
    def resolve(self, samples: Any, config, batch_dim_option: int | None, no_batching: bool):
        """(input signature, user batches or None, batch dim 0). Without samples the inputs are the
        task's (:mod:`navigator.sources.hf_inputs`); with samples, the keys they hold, each one a
        parameter of the model's forward."""
        from navigator.sources import hf_support as hs
        from navigator.sources import torch_support as ts
        from navigator.types import ModelSignature, TensorSpec

        if no_batching or batch_dim_option not in (None, 0):
            raise UserInputError("a Hugging Face model batches on dim 0; --batch-dim and --no-batching do not apply")
        raw = None
        params = hs.forward_parameters(self.model)
        planned = {i.name: i for i in self.inputs_plan}
        if samples is not None:
            raw = [self._user_batch(b, f"sample {i}") for i, b in enumerate(_take(samples, config.sample_count))]
            given = list(raw[0])
        elif config.samples:
            from navigator.workspace import npz

            files = sorted(Path(config.samples).glob("*.npz")) if Path(config.samples).is_dir() else []
            if not files:
                raise UserInputError(f"--samples {config.samples}: no .npz files there")
            first = npz.load(files[0])
            given = list(first)
        else:
            given = list(planned)
        unknown = [n for n in given if n not in params]
        if unknown:
            raise UserInputError(f"samples: input {unknown[0]!r} is not a parameter of {type(self.model).__name__}."
                                 f"forward ({', '.join(p for p in params if p != 'kwargs')})")
        main = self.model.main_input_name
        if main not in given:
            raise UserInputError(f"samples: no {main!r}, the model's main input (they hold {', '.join(given)})")
        names = [p for p in params if p in given]
        self.io = ts.TorchIO(call="positional", inputs=names)
        self.obj = hs.task_module(self.model, names, self.output_fields, self.fixed)
        ranges = config.value_ranges or {}
        self.keep = set(ranges)
        dtypes = dict(config.dtypes or {})
        specs = []
        for name in names:
            plan = planned.get(name)
            if raw:
                example = raw[0][name]
            elif config.samples:
                example = first[name]
            else:
                example = None
            dtype = str(example.dtype) if example is not None else dtypes.get(name, plan.dtype)
            rank = example.ndim if example is not None else len(plan.dims) + 1
            dims = [-1]
            for axis in range(1, rank):
                if plan is not None and axis - 1 < len(plan.dims):
                    d = plan.dims[axis - 1]
                    dims.append(-1 if isinstance(d, (list, tuple)) else int(d))
                else:   # an input the task does not plan (position_ids …): dynamic where the samples vary
                    seen = {b[name].shape[axis] for b in raw} if raw else {example.shape[axis]}
                    dims.append(-1 if len(seen) > 1 else next(iter(seen)))
            specs.append(TensorSpec(name=name, dtype=dtype, shape=dims))
            if plan is not None and plan.bound and name not in ranges:
                self.index_bounds[name] = plan.bound
            if plan is not None and plan.value_range:
                self.value_ranges[name] = tuple(plan.value_range)
        self.signature = ModelSignature(inputs=specs, outputs=[])
        return raw, 0

    def _user_batch(self, batch: Any, where: str) -> dict:
        from navigator.sources.samples import as_array

        if isinstance(batch, Mapping):   # a dict, or a tokenizer's BatchEncoding
            items = {str(k): v for k, v in batch.items()}
        elif isinstance(batch, (tuple, list)):
            items = dict(zip([i.name for i in self.inputs_plan], batch))
        else:
            items = {self.model.main_input_name: batch}
        return {k: as_array(v, f"{where}, input '{k}'") for k, v in items.items()}

    # -------------------------------------------------------------- samples and profile
    def generate(self, signature, *, shapes, count, value_ranges, dtypes, bounds, batch_dim, seed=0):
        """The task's sample shapes (or ``shapes``), made to look like real inputs."""
        from navigator.sources import hf_inputs
        from navigator.sources import samples as samples_mod

        planned = [i for i in self.inputs_plan if i.name in signature.input_names]
        if not shapes and len(planned) == len(signature.inputs):
            shapes = [{i.name: (i.samples[k][0], *i.samples[k][1]) for i in planned}
                      for k in range(len(planned[0].samples))]
        batches = samples_mod.generate(signature, shapes=shapes, count=count, value_ranges=value_ranges,
                                       dtypes=dtypes, bounds=bounds, batch_dim=batch_dim, seed=seed)
        pad = getattr(self.model.config, "pad_token_id", None)
        side = (self.folder.tokenizer_config.get("padding_side") if self.folder is not None else None) or "right"
        return [hf_inputs.fill(b, planned, seed=seed + k, keep=self.keep, pad_id=pad if isinstance(pad, int) else 0,
                               padding_side=side) for k, b in enumerate(batches)]

    def derive_profile(self, signature, batches: list[dict], *, batch_dim, max_batch_size: int):
        """The samples' profile, with every dim the model takes at other sizes widened to the range it
        takes (a sequence from 1 to the longest): the corners then exercise both ends."""
        from navigator.sources import samples as samples_mod

        profile, warnings = samples_mod.derive_profile(signature, batches, batch_dim=batch_dim,
                                                       max_batch_size=max_batch_size)
        for plan in self.inputs_plan:
            if plan.name not in profile:
                continue
            for axis, (lo, hi) in plan.dynamic_axes().items():
                entry = profile[plan.name]
                entry["min"][axis] = min(lo, entry["min"][axis])
                entry["max"][axis] = max(hi, entry["max"][axis])
                warnings = [w for w in warnings if not w.startswith(f"input '{plan.name}' dim {axis} ")]
        return profile, warnings

    # -------------------------------------------------------------- the first artifact
    def record(self) -> dict:
        """formats/torch/source.json: how a worker rebuilds the module (a live model cannot be)."""
        if self.folder is None:
            return {"kind": "live"}
        return {"kind": "huggingface", "folder": str(self.folder.path.resolve()), "task": self.task.name,
                "inputs": list(self.io.inputs), "outputs": list(self.output_fields), "fixed": dict(self.fixed),
                "trust_remote_code": self.trust_remote_code}

    def export(self, ws, out_path: Path) -> dict:
        import json

        from navigator.sources import torch_support as ts
        from navigator.workspace.atomic import write_text

        out_path.parent.mkdir(parents=True, exist_ok=True)
        write_text(out_path, json.dumps(self.record(), indent=1) + "\n")
        ts.write_io(out_path.parent, self.io)
        return {"exporter": f"transformers {self.task.auto_class}" + ("" if self.folder is not None else " (live)")}


def _take(samples: Any, count: int | None) -> list:
    from navigator.sources.samples import iterate

    iterator = iterate(samples)
    taken = []
    for i, batch in enumerate(iterator):
        if i >= (count or 10):
            break
        taken.append(batch)
    if not taken:
        raise UserInputError("samples: the iterable gave no batches")
    return taken


def _need_packages(what: str) -> None:
    from navigator import deps

    for module in ("torch", "transformers"):
        if not deps.has(module):
            raise UserInputError(f"{what}: a Hugging Face model needs {module}",
                                 hint="pip install 'navigator[torch,hf]'")


def open_hf_folder(path: Path, task: str | None = None, trust_remote_code: bool = False) -> HFSource:
    """A ``save_pretrained`` folder, loaded for its task (``task`` overrides)."""
    from navigator.sources import hf_support as hs
    from navigator.sources.hf_folder import read_folder

    _need_packages(str(path))
    folder = read_folder(path)
    chosen, how = hs.detect_task(folder.config, task, str(path))
    model, info = hs.load_model(folder, chosen, trust_remote_code)
    return _source(model, chosen, how, info, folder=folder, trust_remote_code=trust_remote_code,
                   name=path.resolve().name)


def open_hf_model(model: Any, task: str | None = None) -> HFSource:
    """A live ``PreTrainedModel`` (API): converted in the calling process, for its own head."""
    from navigator.sources import hf_support as hs
    from navigator.sources import torch_support as ts

    _need_packages(type(model).__name__)
    arch = type(model).__name__
    if task is None:
        found, how = hs.detect_task({"architectures": [arch]}, None, arch)
    else:
        found, how = hs.detect_task({}, task, arch)
        try:
            own, _ = hs.detect_task({"architectures": [arch]}, None, arch)
        except UserInputError:   # a class no task lists (remote code): --task says what it is
            own = found
        if own.name != found.name:
            raise UserInputError(f"--task {task}: a live {arch} is converted for its own head ({own.name}); "
                                 "save it with save_pretrained and convert the folder to load another head")
    dtype = str(next((p.dtype for p in model.parameters()), "torch.float32")).removeprefix("torch.")
    module = ts.prepare_module(model)
    return _source(module, found, how, {"dtype": dtype, "missing": []}, folder=None, trust_remote_code=False,
                   name=arch)


def _source(model, task, how: str, info: dict, *, folder, trust_remote_code: bool, name: str) -> HFSource:
    from navigator.sources import hf_inputs
    from navigator.sources import hf_support as hs

    where = str(folder.path) if folder is not None else name
    hs.check_model(model, task, where)
    notes: list[str] = []
    if info["missing"]:
        shown = ", ".join(info["missing"][:3]) + (" …" if len(info["missing"]) > 3 else "")
        notes.append(f"{len(info['missing'])} weights of {type(model).__name__} are not in the checkpoint and were "
                     f"initialised at random ({shown})" + (f": --task {task.name} added a new, untrained head"
                                                           if how == "--task" else ""))
    if info["dtype"] != "float32":
        model = model.float()
        notes.append(f"the weights were saved as {info['dtype']}; the reference computes in float32 "
                     f"(--target-precisions {'bf16' if info['dtype'] == 'bfloat16' else 'fp16'} adds formats in "
                     "that precision on a GPU)")
    fixed = hs.fixed_arguments(model)
    plan = hf_inputs.plan(model, folder, fixed, where, notes)
    fields = hs.output_fields(model, task, hf_inputs.nominal_feeds(plan), fixed, where)
    record = {"task": task.name, "chosen_by": how, "architecture": type(model).__name__,
              "model_type": getattr(model.config, "model_type", None), "dtype": info["dtype"],
              "weights": list(folder.weights) if folder is not None else None,
              "tokenizer": folder.tokenizer if folder is not None else None,
              "trust_remote_code": trust_remote_code}
    return HFSource(format=FORMAT, key=FORMAT, name=name, path=folder.path if folder is not None else None,
                    isolated=folder is not None, reference_runner=None, notes=notes, model=model, folder=folder,
                    task=task, inputs_plan=plan, fixed=fixed, output_fields=fields,
                    trust_remote_code=trust_remote_code, huggingface=record)
