"""PyTorch sources: a live ``nn.Module`` (API), ``file.py:factory`` (CLI), a
TorchScript file (.pt) or an ExportedProgram (.pt2). torch is imported inside
functions only (:mod:`navigator.sources.torch_support`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.sources.base import Source, sha256_factory, sha256_file
from navigator.sources.torch_support import FORMAT, record_dir

__all__ = ["TorchSource", "open_torch", "open_torch_file", "FORMAT", "record_dir"]


@dataclass
class TorchSource(Source):
    """A live ``nn.Module`` (API) or ``file.py:factory`` (CLI). Its signature comes
    from the samples (or --shapes); the reference is eager fp32 on the CPU, run in
    the calling process, which also exports the module (``isolated: false``)."""

    factory: str | None = None         # file.py:factory, or the path of a .pt / .pt2 file
    file_kind: str | None = None       # torchscript | torch_export for a model file
    io: Any = None
    default_targets: tuple | None = None
    generated_float: list = field(default_factory=list)   # inputs generated as float32 by default
    reference_digest: str | None = None   # of the reference outputs complete() computed
    state_sha256: str | None = None       # a factory's weights when the reference was computed

    # -------------------------------------------------------------- prepared in a worker
    def worker_facts(self) -> dict:
        """What the calling process keeps of a source prepared in a worker (JSON-safe)."""
        return {"name": self.name, "factory": self.factory, "io": self.io.to_json(),
                "index_bounds": self.index_bounds, "notes": list(self.notes),
                "generated_float": list(self.generated_float), "reference_digest": self.reference_digest,
                "state_sha256": self.state_sha256, "file_kind": self.file_kind,
                "default_targets": list(self.default_targets) if self.default_targets else None}

    @classmethod
    def from_facts(cls, facts: dict, signature) -> TorchSource:
        from navigator.sources import torch_support as ts

        return cls(format=FORMAT, key=FORMAT, name=facts["name"], obj=None, isolated=True,
                   factory=facts["factory"], signature=signature, index_bounds=facts["index_bounds"],
                   reference_runner=None, notes=facts["notes"], io=ts.TorchIO.from_json(facts["io"]),
                   generated_float=facts["generated_float"], reference_digest=facts["reference_digest"],
                   state_sha256=facts["state_sha256"], file_kind=facts.get("file_kind"),
                   default_targets=tuple(facts["default_targets"]) if facts["default_targets"] else None)

    def live_callable(self) -> Any:
        """The live module flattened to tensors in, tensors out, as in-process jobs call it."""
        from navigator.sources import torch_support

        return None if self.obj is None else torch_support.flat_module(self.obj, self.io)

    def rebuild_lines(self, key: str, artifact: str, given: str | None) -> list[str] | None:
        """A PyTorch source's artifact is its record (source.json names the factory or file)."""
        import shlex

        what = f"rebuilt from {given}" if given else "a live nn.Module of the process that called navigator.convert"
        return [f"# {key} is the source model, {what}: {artifact} records how workers rebuild it",
                "cat " + shlex.quote(artifact)]

    def identity(self) -> str | None:
        if self.file_kind and self.factory:          # a .pt / .pt2 file
            return str(Path(self.factory).resolve())
        if self.factory:                             # file.py:factory
            file, _, attr = self.factory.rpartition(":")
            return f"{Path(file).resolve()}:{attr}"
        return None

    def _digest(self) -> str | None:
        if self.file_kind and self.factory:          # a .pt / .pt2 file
            return sha256_file(Path(self.factory))
        if self.factory and self.reference_digest:   # file.py:factory, once the reference is known
            return sha256_factory(self.factory, self.reference_digest)
        return None                                  # a live module: no resume

    def resolve(self, samples: Any, config, batch_dim_option: int | None, no_batching: bool):
        """(input signature, user batches as {name: ndarray} or None, batch dim)."""
        from navigator.sources import torch_reference as tr, torch_support as ts
        from navigator.types import ModelSignature, TensorSpec

        raw = folder = None
        if samples is not None:
            if isinstance(samples, (str, bytes, os.PathLike)):
                raise UserInputError("samples: a path was given where batches were expected; use --samples DIR")
            try:
                iterator = iter(samples)
            except TypeError:
                raise UserInputError(f"samples: expected an iterable of batches, got {type(samples).__name__}") \
                    from None
            taken = []
            for i, batch in enumerate(iterator):
                if i >= (config.sample_count or 10):
                    break
                taken.append(batch)
            if not taken:
                raise UserInputError("samples: the iterable gave no batches")
            self.io = ts.call_convention(self.obj, taken[0])
            raw = [tr.user_batch_to_numpy(b, self.io, f"sample {i}") for i, b in enumerate(taken)]
        elif config.samples:
            from navigator.workspace import npz

            files = sorted(Path(config.samples).glob("*.npz")) if Path(config.samples).is_dir() else []
            if not files:
                raise UserInputError(f"--samples {config.samples}: no .npz files there")
            folder = [npz.load(f) for f in files[: config.sample_count or 10]]   # their ranks, dtypes and dims
            self.io = ts.call_convention(self.obj, folder[0])
        else:
            shapes = (config.shapes or [None])[0] or {}
            if not shapes:
                raise UserInputError("a PyTorch model needs samples or --shapes (e.g. --shapes x:8x3x224x224) "
                                     "to know its inputs")
            names = list(shapes)
            params = ts.forward_parameters(self.obj)
            if names == params[: len(names)]:
                self.io = ts.TorchIO(call="positional", inputs=names)
            elif set(names) <= set(params):
                self.io = ts.TorchIO(call="kwargs", inputs=[p for p in params if p in names])
            else:
                raise UserInputError(f"--shapes names {', '.join(repr(n) for n in names)} do not match forward()'s "
                                     f"parameters ({', '.join(params)})")
        given = raw or folder   # the batches the signature is read from (a --samples folder's are loaded later)
        first = given[0] if given else None
        ranks = {}
        dtypes = dict(config.dtypes or {})
        shape_sets = list(config.shapes or [])
        for name in self.io.inputs:
            if first is not None:
                ranks[name] = first[name].ndim
                dtypes.setdefault(name, str(first[name].dtype))
            elif shape_sets:
                ranks[name] = len(shape_sets[0][name])
            if name not in dtypes:
                dtypes[name] = "float32"
                self.generated_float.append(name)
        self._find_index_inputs(config, raw, shape_sets, dtypes)
        batch_dim = None if no_batching else (batch_dim_option if batch_dim_option is not None else 0)
        if batch_dim is not None and any(r <= batch_dim for r in ranks.values()):
            batch_dim = None
        profile = (config.shape_profiles or [None])[0] or {}
        inputs = []
        for name in self.io.inputs:
            if given:
                seen = [b[name].shape for b in given if name in b]
            elif shape_sets:
                seen = [tuple(s[name]) for s in shape_sets if name in s]
            else:
                seen = []
            dims = []
            for axis in range(ranks.get(name, 0)):
                values = {s[axis] for s in seen}
                dynamic = axis == batch_dim or len(values) > 1
                if name in profile and profile[name]["min"][axis] != profile[name]["max"][axis]:
                    dynamic = True
                dims.append(-1 if dynamic or not values else next(iter(values)))
            inputs.append(TensorSpec(name=name, dtype=dtypes[name], shape=dims))
        self.signature = ModelSignature(inputs=inputs, outputs=[])
        return raw, batch_dim

    def _find_index_inputs(self, config, raw: list | None, shape_sets: list, dtypes: dict) -> None:
        """The embedding tables the inputs index (their row counts become the generated integers'
        bounds, as Gather tables do for ONNX sources) and the inputs that must be integers though
        nothing said so: ``dtypes`` and ``index_bounds`` are updated, each change said in a warning."""
        import logging

        from navigator.sources import torch_reference as tr

        if raw:
            shapes = {n: raw[0][n].shape for n in self.io.inputs}
        elif shape_sets and all(n in shape_sets[0] for n in self.io.inputs):
            shapes = {n: tuple(shape_sets[0][n]) for n in self.io.inputs}
        elif config.samples:
            from navigator.workspace import npz

            first = npz.load(sorted(Path(config.samples).glob("*.npz"))[0])
            shapes = {n: first[n].shape for n in self.io.inputs if n in first}
        else:
            return
        if len(shapes) != len(self.io.inputs):
            return
        bounds, now_int = tr.find_index_inputs(self.obj, self.io, shapes, dtypes)
        given = set((config.value_ranges or {}))
        for name in now_int:
            if name in self.generated_float:
                self.generated_float.remove(name)
                dtypes[name] = "int64"
        for name, rows in bounds.items():
            if name not in given:
                self.index_bounds[name] = rows
            if not raw:
                msg = (f"input {name!r} indexes an embedding table of {rows} rows: "
                       + ("generated as int64" if name in now_int else "generated") + f" in [0, {rows})")
                logging.getLogger(__name__).info("%s", msg)
                if name in now_int:
                    self.notes.append(msg + " (--dtypes / --value-ranges change it)")

    def complete(self, batches: list[dict], batch_dim: int | None, *, corners: list[int] = (),
                 value_ranges: dict | None = None) -> tuple[list[dict], dict[int, str]]:
        """Run the reference on every batch and fill in the outputs' names, dtypes and dynamic dims
        (a dim that differs between any two batches, the profile corners and a probe at another
        batch size included, is -1). Returns (reference per kept batch, {corner index: why refused}):
        a corner batch the model does not run is refused, any other failure is an error.
        ``value_ranges``: embeddings' indices are checked against their tables."""
        from navigator.execution.profiling import batch_of
        from navigator.sources import torch_reference as tr
        from navigator.types import TensorSpec

        corners = set(corners)
        checked = {k: tuple(v) for k, v in (value_ranges or {}).items()}
        regular = [b for i, b in enumerate(batches) if i not in corners]
        try:
            outputs, _ = tr.run_reference(self.obj, self.io, regular, checked)
        except UserInputError:
            raise
        except Exception as e:
            hint = None
            if self.generated_float:
                hint = (f"inputs {', '.join(self.generated_float)} were generated as float32; pass --dtypes "
                        "name:int64 for index inputs")
            raise UserInputError(f"the model failed on the samples in eager mode ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:300]})", hint=hint) from None
        if regular:
            self._refuse_hidden_state(regular[0], outputs[0], checked)
        by_index = dict(zip([i for i in range(len(batches)) if i not in corners], outputs))
        names = list(self.io.outputs)
        refused: dict[int, str] = {}
        for i in sorted(corners):
            try:
                (by_index[i],), _ = tr.run_reference(self.obj, self.io, [batches[i]], checked)
            except Exception as e:   # noqa: BLE001 - a corner the model does not accept is left out
                refused[i] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            self.io.outputs = names
        reference = [by_index[i] for i in range(len(batches)) if i not in refused]
        kept = [b for i, b in enumerate(batches) if i not in refused]
        self.variation = tr.run_float64(self.obj, self.io, kept, reference)
        from navigator.sources.samples import samples_sha256

        self.reference_digest = samples_sha256(reference)
        self.digest = None
        probe = None
        if batch_dim is not None:   # one more run at another batch size shows which output dims follow it
            size = next(iter(batches[0].values())).shape[batch_dim]
            try:
                probe, _ = tr.run_reference(self.obj, self.io, [batch_of(batches[0], batch_dim, size + 1)])
            except Exception as e:
                import logging

                logging.getLogger(__name__).warning("the model does not run at batch size %d (%s: %s); its "
                                                    "output shapes come from the samples alone", size + 1,
                                                    type(e).__name__, e)
            self.io.outputs = names
        outputs = []
        for name in self.io.outputs:
            shapes = [r[name].shape for r in reference] + ([probe[0][name].shape] if probe else [])
            dims = [d if len({s[a] for s in shapes}) == 1 else -1 for a, d in enumerate(shapes[0])]
            outputs.append(TensorSpec(name=name, dtype=str(reference[0][name].dtype), shape=dims))
        self.signature.outputs = outputs
        return reference, refused

    def _refuse_hidden_state(self, batch: dict, first: dict, checked: dict) -> None:
        """The first sample run again after all the others must give what it gave first: a module
        that keeps state inside (its buffers change on every call) answers otherwise, and no
        format-by-format comparison can judge it (UserInputError)."""
        from navigator.sources import torch_reference as tr
        from navigator.sources.state import hidden_state

        names = list(self.io.outputs)
        (again,), _ = tr.run_reference(self.obj, self.io, [batch], checked)
        self.io.outputs = names
        why = hidden_state(first, again)
        if why:
            raise UserInputError(
                f"{why} (or draws random numbers in eval mode): its formats cannot be compared call by call; "
                "export it with its state as an input and an output (navigator then verifies it over a "
                "sequence; --state IN=OUT names the pair), or reset the state inside forward()")

    def export(self, ws, out_path: Path) -> dict:
        """Record how to rebuild the module and its I/O names (formats/torch/)."""
        import json

        from navigator.sources import torch_support as ts
        from navigator.workspace.atomic import write_text

        out_path.parent.mkdir(parents=True, exist_ok=True)
        record = ts.source_record(self.factory, self.file_kind)
        if self.state_sha256 and record["kind"] == "factory":
            record["state_sha256"] = self.state_sha256
        if self.file_kind:   # keep a copy of the model file in the workspace: the record points at it
            import shutil

            copy = out_path.parent / ("model.pt" if self.file_kind == "torchscript" else "model.pt2")
            shutil.copyfile(self.factory, copy)
            record["file"] = str(copy)
        write_text(out_path, json.dumps(record, indent=1) + "\n")
        ts.write_io(out_path.parent, self.io)
        return {"exporter": self.file_kind or ("factory" if self.factory else "live")}


def open_torch_file(path: Path, kind: str) -> TorchSource:
    """A TorchScript file (.pt) or an ExportedProgram (.pt2): loaded here for the
    reference, reloaded from the workspace's copy in every worker."""
    from navigator import deps
    from navigator.sources import torch_support as ts

    if not deps.has("torch"):
        raise UserInputError(f"{path}: a PyTorch model file needs torch", hint="pip install 'navigator[torch]'")
    module = ts.load_model_file(path, kind)
    source = TorchSource(format=FORMAT, key=FORMAT, name=path.stem, obj=module, isolated=True,
                         factory=str(path.resolve()), file_kind=kind, reference_runner=None)
    if kind == "torchscript":   # torch.export cannot capture a ScriptModule
        source.default_targets = ("torch", "onnx", "onnx-optimized")
    return source


def open_torch(model: Any, factory: str | None) -> TorchSource:
    from navigator.sources import torch_support as ts

    module = ts.prepare_module(model)
    name = Path(factory.rpartition(":")[0]).stem if factory else type(model).__name__
    # A factory is rebuilt in every worker (its weights checked against these); a live object is
    # used only in this process.
    return TorchSource(format=FORMAT, key=FORMAT, name=name, obj=module, isolated=factory is not None,
                       factory=factory, reference_runner=None,
                       state_sha256=ts.state_digest(module) if factory else None)
