"""Sources: what the user hands in, and how it becomes the first artifact.

Each source knows its format, a default model name, how to read its
signature, how to bring itself into the workspace (export) and how to
compute the reference outputs. ONNX files are handled here; the PyTorch and
TensorFlow issues add their sources beside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.types import ModelSignature

ONNX_SUFFIXES = (".onnx",)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_tree(root: Path) -> str:
    """One digest of a directory tree (a SavedModel): every file's path relative to
    ``root``, size and content sha256, in sorted order, read in 1 MiB blocks. Symlinked
    files count by their content; symlinked folders are not entered (os.walk)."""
    h = hashlib.sha256(b"navigator-tree-v1\n")
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            h.update(f"{rel}\0{path.stat().st_size}\0{sha256_file(path)}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def sha256_factory(spec: str, reference_digest: str | None) -> str:
    """The digest a ``file.py:factory`` source resumes by: the factory's name, its
    file, every other ``*.py`` file of the same folder (where its model classes
    usually live: a change there is a change of the model) and the digest of the
    reference outputs it computed on the samples (weights it loads from elsewhere,
    a package's code: whatever changes the numbers changes the digest). Code
    outside that folder that does not change the outputs on the samples goes
    unseen: --force redoes everything."""
    file, _, attr = spec.rpartition(":")
    path = Path(file).resolve()
    h = hashlib.sha256(b"navigator-factory-v1\n")
    h.update(f"{attr}\0{sha256_file(path)}\n".encode())
    for sibling in sorted(path.parent.glob("*.py")):
        if sibling != path and sibling.is_file():
            h.update(f"{sibling.name}\0{sha256_file(sibling)}\n".encode("utf-8", "surrogateescape"))
    h.update(f"reference\0{reference_digest}\n".encode())
    return h.hexdigest()


@dataclass
class Source:
    format: str                    # source format: onnx, torch, savedmodel, ...
    key: str                       # key of the first artifact
    name: str                      # default model name
    path: Path | None = None
    obj: Any = None                # live object (nn.Module, Keras model)
    signature: ModelSignature | None = None
    index_bounds: dict = field(default_factory=dict)
    isolated: bool = True          # False when exported in the calling process
    reference_runner: dict | None = None   # runner spec + options computing the reference
    digest: str | None = field(default=None, repr=False, compare=False)   # sha256(), computed once

    def sha256(self) -> str | None:
        """What resuming compares (status.yaml's model.sha256): the bytes of the
        model; None for a source that has none (a live object): it starts afresh."""
        if self.digest is None:
            self.digest = self._digest()
        return self.digest

    def _digest(self) -> str | None:
        return sha256_file(self.path) if self.path and self.path.is_file() else None

    def export(self, ws, out_path: Path) -> dict:
        raise NotImplementedError


class OnnxSource(Source):
    def export(self, ws, out_path: Path) -> dict:
        """Copy the model (and its external data, same relative names) into the workspace."""
        from navigator.signature import external_data_files, load_onnx

        out_path.parent.mkdir(parents=True, exist_ok=True)
        model = load_onnx(self.path)
        for data in external_data_files(model, self.path.parent):
            rel = os.path.relpath(data, self.path.parent)
            if rel.startswith(".."):
                raise UserInputError(f"{self.path}: external data {rel!r} lies outside the model's folder")
            dest = out_path.parent / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data, dest)
        tmp = out_path.with_name(out_path.name + ".part")
        shutil.copyfile(self.path, tmp)
        os.replace(tmp, out_path)
        return {"exporter": "copy"}


def open_onnx(path: Path) -> OnnxSource:
    from navigator.signature import check_onnx, external_data_files, index_bounds, load_onnx, onnx_signature

    model = load_onnx(path)
    missing = [p for p in external_data_files(model, path.parent) if not p.is_file()]
    if missing:
        raise UserInputError(f"{path}: external data file {missing[0].name!r} is missing beside the model")
    check_onnx(path)
    return OnnxSource(format="onnx", key="onnx", name=path.stem, path=path, signature=onnx_signature(model),
                      index_bounds=index_bounds(model),
                      reference_runner={"runner": "onnxruntime", "device": "cpu", "provider": None,
                                        "options": {"graph_optimization_level": "disabled"}})


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

    def _digest(self) -> str | None:
        if self.file_kind and self.factory:          # a .pt / .pt2 file
            return sha256_file(Path(self.factory))
        if self.factory and self.reference_digest:   # file.py:factory, once the reference is known
            return sha256_factory(self.factory, self.reference_digest)
        return None                                  # a live module: no resume

    def resolve(self, samples: Any, config, batch_dim_option: int | None, no_batching: bool):
        """(input signature, user batches as {name: ndarray} or None, batch dim)."""
        from navigator import torch_support as ts
        from navigator.types import ModelSignature, TensorSpec

        raw = None
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
            raw = [ts.user_batch_to_numpy(b, self.io, f"sample {i}") for i, b in enumerate(taken)]
        elif config.samples:
            from navigator.workspace import npz

            files = sorted(Path(config.samples).glob("*.npz")) if Path(config.samples).is_dir() else []
            if not files:
                raise UserInputError(f"--samples {config.samples}: no .npz files there")
            first = npz.load(files[0])
            self.io = ts.call_convention(self.obj, first)
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
        first = raw[0] if raw else None
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
        batch_dim = None if no_batching else (batch_dim_option if batch_dim_option is not None else 0)
        if batch_dim is not None and any(r <= batch_dim for r in ranks.values()):
            batch_dim = None
        profile = (config.shape_profiles or [None])[0] or {}
        inputs = []
        for name in self.io.inputs:
            if raw:
                seen = [b[name].shape for b in raw]
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

    def complete(self, batches: list[dict], batch_dim: int | None) -> list[dict]:
        """Run the reference; fill in the outputs' names, dtypes and dynamic dims."""
        from navigator import torch_support as ts
        from navigator.profiling import batch_of
        from navigator.types import TensorSpec

        try:
            reference, _ = ts.run_reference(self.obj, self.io, batches)
        except UserInputError:
            raise
        except Exception as e:
            hint = None
            if self.generated_float:
                hint = (f"inputs {', '.join(self.generated_float)} were generated as float32; pass --dtypes "
                        "name:int64 for index inputs")
            raise UserInputError(f"the model failed on the samples in eager mode ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:300]})", hint=hint) from None
        from navigator.samples import samples_sha256

        self.reference_digest = samples_sha256(reference)
        self.digest = None
        probe = None
        if batch_dim is not None:   # one more run at another batch size shows which output dims follow it
            size = next(iter(batches[0].values())).shape[batch_dim]
            try:
                probe, _ = ts.run_reference(self.obj, self.io, [batch_of(batches[0], batch_dim, size + 1)])
            except Exception as e:
                import logging

                logging.getLogger(__name__).warning("the model does not run at batch size %d (%s: %s); its "
                                                    "output shapes come from the samples alone", size + 1,
                                                    type(e).__name__, e)
        outputs = []
        for name in self.io.outputs:
            shapes = [r[name].shape for r in reference] + ([probe[0][name].shape] if probe else [])
            dims = [d if len({s[a] for s in shapes}) == 1 else -1 for a, d in enumerate(shapes[0])]
            outputs.append(TensorSpec(name=name, dtype=str(reference[0][name].dtype), shape=dims))
        self.signature.outputs = outputs
        return reference

    def export(self, ws, out_path: Path) -> dict:
        """Record how to rebuild the module and its I/O names (formats/torch/)."""
        import json

        from navigator import torch_support as ts
        from navigator.workspace.atomic import write_text

        out_path.parent.mkdir(parents=True, exist_ok=True)
        record = ts.source_record(self.factory, self.file_kind)
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
    from navigator import deps, torch_support as ts

    if not deps.has("torch"):
        raise UserInputError(f"{path}: a PyTorch model file needs torch", hint="pip install 'navigator[torch]'")
    module = ts.load_model_file(path, kind)
    source = TorchSource(format="torch", key="torch", name=path.stem, obj=module, isolated=True,
                         factory=str(path.resolve()), file_kind=kind, reference_runner=None)
    if kind == "torchscript":   # torch.export cannot capture a ScriptModule
        source.default_targets = ("torch", "onnx", "onnx-optimized")
    return source


def open_torch(model: Any, factory: str | None) -> TorchSource:
    from navigator import torch_support as ts

    module = ts.prepare_module(model)
    name = Path(factory.rpartition(":")[0]).stem if factory else type(model).__name__
    # A factory is rebuilt in every worker; a live object is used only in this process.
    return TorchSource(format="torch", key="torch", name=name, obj=module, isolated=factory is not None,
                       factory=factory, reference_runner=None)


def open_source(model: Any, model_format: str | None = None, signature_name: str | None = None) -> Source:
    """Recognise the model: a path (ONNX file, ...) or a live framework object."""
    if isinstance(model, str) and ":" in model and model.rpartition(":")[0].endswith(".py"):
        from navigator import deps, torch_support

        if not deps.has("torch"):
            raise UserInputError(f"{model}: a PyTorch factory needs torch", hint="pip install 'navigator[torch]'")
        return open_torch(torch_support.load_factory(model), model)
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        fmt = model_format
        if fmt is None:
            if path.suffix.lower() in ONNX_SUFFIXES:
                fmt = "onnx"
            elif path.suffix.lower() in (".pt", ".pth", ".ts") and path.is_file():
                fmt = "torchscript"
            elif path.suffix.lower() == ".pt2" and path.is_file():
                fmt = "torch_export"
            elif path.is_dir() and ((path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()):
                fmt = "savedmodel"
            elif not path.exists():
                raise UserInputError(f"{path}: no such file or directory")
            else:
                raise UserInputError(f"{path}: cannot tell the model format from the name; supported here: "
                                     ".onnx files (give --model-format)")
        if not path.exists():
            raise UserInputError(f"{path}: no such file or directory")
        if fmt == "onnx":
            if path.is_dir():
                raise UserInputError(f"{path}: is a directory, expected an .onnx file")
            return open_onnx(path)
        if fmt in ("torchscript", "torch_export"):
            return open_torch_file(path, fmt)
        if fmt == "savedmodel":
            return open_saved_model(path, signature_name)
        raise UserInputError(f"--model-format {fmt!r} is not supported; supported: onnx, torchscript, torch_export, "
                             "savedmodel")
    from navigator import tf_support

    if tf_support.is_tf_object(model):
        return open_tf_object(model, signature_name)
    from navigator import torch_support

    if torch_support.is_torch_module(model):
        return open_torch(model, None)
    raise UserInputError(f"cannot convert an object of type {type(model).__name__}; give an nn.Module, a Keras "
                         "model, a tf.Module, a path to an .onnx file or a SavedModel directory, or "
                         "path/to/file.py:factory")


@dataclass
class SavedModelSource(Source):
    """A TensorFlow SavedModel directory (CLI and API), or a Keras model / tf.Module
    (API) exported to one in the calling process (``isolated: false``). The
    signature (``serving_default`` unless ``--signature``) gives the inputs and
    outputs; the reference runs in a worker with the ``tensorflow`` runner."""

    signature_name: str | None = None
    exported: dict = field(default_factory=dict)     # exporter + name map of a live object
    tmpdir: Any = None                                # keeps the export of a live object alive

    def _digest(self) -> str | None:
        """The whole directory (saved_model.pb, variables/, assets/): retrained
        weights under the same graph are a different model."""
        if self.path and (self.path / "saved_model.pb").is_file():
            return sha256_tree(self.path)
        return None

    def resolve(self, samples: Any, config, batch_dim_option: int | None, no_batching: bool):
        """A live object: export it now (a tf.Module without input_signature uses the first sample)."""
        import tempfile

        from navigator import tf_support
        from navigator.signature import detect_batch_dim

        first = None
        if samples is not None and not isinstance(samples, (str, bytes, os.PathLike)):
            if isinstance(samples, (list, tuple)) and samples:
                first = samples[0]
            else:
                try:
                    materialised = list(samples)
                except TypeError:
                    raise UserInputError(f"samples: expected an iterable of batches, got "
                                         f"{type(samples).__name__}") from None
                first = materialised[0] if materialised else None
                samples = materialised
        self.tmpdir = tempfile.TemporaryDirectory(prefix="navigator-tf-")
        out = Path(self.tmpdir.name) / "saved_model"
        self.exported = tf_support.export_object(self.obj, out, first)
        self.path = out
        self.signature = tf_support.reorder_inputs(tf_support.saved_model_signature(out, self.signature_name),
                                                   self.exported.get("input_order") or [])
        batch_dim = detect_batch_dim(self.signature, batch_dim=batch_dim_option, no_batching=no_batching)
        return (list(samples) if samples is not None and not isinstance(samples, (str, bytes, os.PathLike))
                else None), batch_dim

    def export(self, ws, out_path: Path) -> dict:
        """Copy the SavedModel directory into formats/savedmodel/model.savedmodel/."""
        from navigator import tf_support

        tf_support.copy_tree(self.path, out_path)
        tf_support.write_name_map(out_path.parent, self.exported.get("name_map") or {})
        tf_support.write_signature_name(out_path.parent, self.signature_name)
        return {"exporter": self.exported.get("exporter") or "copy"}


def _tf_reference_runner(signature_name: str | None) -> dict:
    return {"runner": "tensorflow", "device": "cpu", "provider": None,
            "options": {"signature": signature_name or "serving_default"}}


def open_saved_model(path: Path, signature_name: str | None = None) -> SavedModelSource:
    from navigator import tf_support

    if not tf_support.is_saved_model_dir(path):
        raise UserInputError(f"{path}: not a SavedModel directory (no saved_model.pb in it)")
    sig = tf_support.saved_model_signature(path, signature_name)
    name = path.resolve().name
    if name in ("saved_model", "savedmodel", "model.savedmodel") or name.isdigit():   # .../<model>/1/
        name = path.resolve().parent.name or name
    return SavedModelSource(format="savedmodel", key="savedmodel", name=name, path=path, signature=sig,
                            signature_name=signature_name,
                            reference_runner=_tf_reference_runner(signature_name))


def open_tf_object(model: Any, signature_name: str | None = None) -> SavedModelSource:
    """A Keras model or tf.Module: exported in this process when the samples are known."""
    from navigator import deps

    if not deps.has("tensorflow"):
        raise UserInputError(f"a {type(model).__name__} needs tensorflow", hint="pip install 'navigator[tensorflow]'")
    name = getattr(model, "name", None) or type(model).__name__
    return SavedModelSource(format="savedmodel", key="savedmodel", name=str(name), obj=model, isolated=False,
                            signature_name=signature_name, reference_runner=_tf_reference_runner(signature_name))
