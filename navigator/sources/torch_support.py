"""PyTorch sources: the live module, its calling convention, flat I/O names.

Every torch artifact Navigator writes takes flat positional tensors and
returns a flat tuple of tensors: ``flat_module`` wraps the user's module so
that tensor / tuple / dict inputs and tensor / tuple / list / dict /
namedtuple outputs all become that shape, and ``io.json`` in
``formats/torch/`` records the names and the output tree so results can be
handed back in the original structure. torch is imported inside functions
only: importing this module costs nothing.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError

FORMAT = "torch"   # the format of a PyTorch source (its record in navigator.formats.builtin)


def record_dir(ws) -> Path:
    """``formats/torch/`` of a workspace: how to rebuild a PyTorch source (source.json, io.json)."""
    return ws.format_dir(FORMAT)

log = logging.getLogger(__name__)


def is_torch_module(obj: Any) -> bool:
    """True for an ``nn.Module`` instance, without importing torch."""
    return any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module" for c in type(obj).__mro__)


@dataclass
class TorchIO:
    """How to call the module and what its flat inputs/outputs are named."""

    call: str                                   # positional | kwargs | dict
    inputs: list[str]
    outputs: list[str] = field(default_factory=list)
    treespec: str | None = None                 # torch.utils._pytree.treespec_dumps of the outputs

    memory_tree = None                          # the TreeSpec when it cannot be serialized (this process only)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "TorchIO":
        return cls(**json.loads(text))


# ------------------------------------------------------------------ loading sources
def load_factory(spec: str):
    """``path/to/file.py:factory`` -> the module the factory returns (in eval mode)."""
    path_text, sep, attr = spec.rpartition(":")
    if not sep or not path_text or not attr:
        raise UserInputError(f"{spec!r}: expected path/to/file.py:factory")
    from navigator.userfile import import_file

    path = Path(path_text)
    module = import_file(path, what=f"model factory {spec!r}:")
    factory = getattr(module, attr, None)
    if factory is None:
        have = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise UserInputError(f"{path} has no {attr!r}; callables there: {', '.join(have) or 'none'}")
    try:
        model = factory() if callable(factory) and not is_torch_module(factory) else factory
    except SystemExit as e:   # sys.exit() in a factory ends nothing of ours silently
        raise UserInputError(f"{spec}: the factory called sys.exit({e.code!r})") from None
    except Exception as e:
        raise UserInputError(f"{spec}: the factory raised {type(e).__name__}: {e}") from None
    if not is_torch_module(model):
        raise UserInputError(f"{spec}: the factory returned {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


# ------------------------------------------------------------------ calling convention
def forward_parameters(module) -> list[str]:
    """The names of forward()'s tensor parameters (TorchScript: from its schema)."""
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:
        return [a.name for a in schema.arguments if a.name != "self"]
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def call_convention(module, batch: Any) -> TorchIO:
    """How a user batch maps onto ``forward``: one tensor or a tuple -> positional,
    a dict whose keys are forward's parameters -> kwargs, another dict -> one dict argument."""
    params = forward_parameters(module)
    if isinstance(batch, dict):
        keys = [str(k) for k in batch]
        if params and set(keys) <= set(params):
            return TorchIO(call="kwargs", inputs=[p for p in params if p in keys])
        return TorchIO(call="dict", inputs=keys)
    if isinstance(batch, (tuple, list)):
        names = [params[i] if i < len(params) else f"input_{i}" for i in range(len(batch))]
        return TorchIO(call="positional", inputs=names)
    return TorchIO(call="positional", inputs=[params[0] if params else "input"])


def batch_as_dict(batch: Any, io: TorchIO) -> dict:
    """A user batch as ``{input name: tensor}`` in the convention's order."""
    if isinstance(batch, dict):
        return {name: batch[name] for name in io.inputs}
    if isinstance(batch, (tuple, list)):
        return dict(zip(io.inputs, batch))
    return {io.inputs[0]: batch}


def output_names(outputs: Any) -> tuple[list[str], str | None, Any]:
    """Stable names for the leaves of a tensor / tuple / list / dict / namedtuple output,
    the serialized tree to rebuild it, and the tree itself when it cannot be serialized
    (a namedtuple or custom container: usable in this process only)."""
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten_with_path(outputs)
    names = []
    for path, leaf in leaves:
        if not hasattr(leaf, "shape"):
            raise UserInputError(f"the model returns a non-tensor ({type(leaf).__name__}) at "
                                 f"{pytree.keystr(path) or 'the top'}; only tensors can be served")
        parts = []
        for entry in path:
            for attr in ("key", "name", "idx"):
                if hasattr(entry, attr):
                    parts.append(str(getattr(entry, attr)))
                    break
        if not parts:
            name = "output"
        elif all(isinstance(getattr(e, "idx", None), int) for e in path) and len(path) == 1:
            name = f"output_{parts[0]}"
        else:
            name = ".".join(parts)
        names.append(name)
    if len(set(names)) != len(names):
        names = [f"output_{i}" for i in range(len(names))]
    spec = pytree.tree_structure(outputs)
    try:
        return names, pytree.treespec_dumps(spec), None
    except Exception:  # a namedtuple or custom container: kept in memory for this process only
        return names, None, spec


def unflatten(outputs: dict, io: TorchIO, memory_tree: Any = None):
    """Outputs by name back in the module's original structure (a tensor, dict, tuple,
    namedtuple …); flat when the structure could not be recorded. ``memory_tree``: the
    tree kept in the calling process when it could not be serialized."""
    from torch.utils import _pytree as pytree

    if io.treespec is not None:
        spec = pytree.treespec_loads(io.treespec)
    elif memory_tree is not None:
        spec = memory_tree
    else:
        return outputs
    return pytree.tree_unflatten([outputs[n] for n in io.outputs], spec)


def flat_module(module, io: TorchIO):
    """The user's module behind flat positional tensors in and a flat tuple out."""
    import torch
    from torch.utils import _pytree as pytree

    names = list(io.inputs)
    call = io.call

    class FlatModule(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            if call == "kwargs":
                out = self.inner(**dict(zip(names, args)))
            elif call == "dict":
                out = self.inner(dict(zip(names, args)))
            else:
                out = self.inner(*args)
            return tuple(pytree.tree_leaves(out))

    flat = FlatModule(module)
    flat.training = False   # not .eval(): an ExportedProgram's module refuses train()/eval()
    return flat


def cast_module(module, dtype: str):
    """``module`` computing in ``dtype`` (float16 / bfloat16) with float32 I/O kept."""
    import copy

    import torch

    target = getattr(torch, dtype)
    inner = copy.deepcopy(module).to(target)

    class CastIO(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            args = tuple(a.to(target) if a.is_floating_point() else a for a in args)
            return tuple(o.float() if o.is_floating_point() else o for o in self.inner(*args))

    wrapped = CastIO(inner)
    wrapped.training = False
    return wrapped


def dim_ranges(signature, profile: dict | None) -> list[dict[int, tuple[str, int, int]]]:
    """Per input, ``{axis: (symbol, min, max)}`` for its dynamic dims, bounded by the shape
    profile; the same axis with the same range shares a symbol across inputs (the batch)."""
    symbols: dict[tuple[int, int, int], str] = {}
    per_input = []
    for spec in signature.inputs:
        entry = {}
        for axis, d in enumerate(spec.shape):
            if d >= 0:
                continue
            lo, hi = 1, 1 << 16
            if profile and spec.name in profile:
                lo = max(1, int(profile[spec.name]["min"][axis]))
                hi = max(lo + 1, int(profile[spec.name]["max"][axis]))
            key = (axis, lo, hi)
            symbols.setdefault(key, f"d{axis}_{len(symbols)}")
            entry[axis] = (symbols[key], lo, hi)
        per_input.append(entry)
    return per_input


def dynamic_shapes(signature, profile: dict | None, *, varargs: bool = True):
    """torch.export dynamic shapes: one ``Dim`` per symbol of :func:`dim_ranges`.
    ``varargs``: for the flat module (``forward(*args)``); False for a module with one
    positional parameter per input (an ExportedProgram's ``module()``)."""
    import torch

    dims: dict[str, Any] = {}
    per_input = []
    for entry in dim_ranges(signature, profile):
        for name, lo, hi in entry.values():
            dims.setdefault(name, torch.export.Dim(name, min=lo, max=hi))
        per_input.append({axis: dims[name] for axis, (name, _, _) in entry.items()} or None)
    return (tuple(per_input),) if varargs else tuple(per_input)


def to_tensors(sample: dict, names: list[str], device: str = "cpu") -> tuple:
    import torch

    return tuple(torch.from_numpy(sample[n]).to(device) for n in names)


def to_numpy(outputs: tuple | list, names: list[str]) -> dict:
    out = {}
    for name, t in zip(names, outputs):
        t = t.detach().to("cpu")
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        out[name] = t.numpy()
    return out


def write_io(folder: Path, io: TorchIO) -> None:
    from navigator.workspace.atomic import write_text

    write_text(folder / "io.json", io.to_json())


def read_io(folder: Path) -> TorchIO:
    p = folder / "io.json"
    if not p.is_file():
        raise UserInputError(f"{p}: missing; the torch source was not recorded")
    return TorchIO.from_json(p.read_text())


def source_record(spec: str | None, file_kind: str | None = None) -> dict:
    """How a worker rebuilds the module: a factory spec, a model file (TorchScript or
    ExportedProgram), or only in the calling process (a live object)."""
    if file_kind:
        return {"kind": file_kind, "file": os.path.abspath(spec)}
    if spec:
        path, _, attr = spec.rpartition(":")
        return {"kind": "factory", "file": os.path.abspath(path), "factory": attr}
    return {"kind": "live"}


def load_model_file(path: str | os.PathLike, kind: str):
    """A TorchScript file (``torchscript``) or an ExportedProgram (``torch_export``) as a
    module on the CPU, in eval mode where that applies."""
    import warnings

    import torch

    import logging
    import zipfile

    path = Path(path)
    what = "TorchScript" if kind == "torchscript" else "ExportedProgram (.pt2)"
    if not zipfile.is_zipfile(path):   # both are zip archives; torch would log a traceback first
        raise UserInputError(f"{path}: not a loadable {what} (not a zip archive)")
    if kind != "torchscript":   # torch.export.load unpickles with Python's full unpickler: read its pickles first
        from navigator.sources.pickle_guard import check_archive

        check_archive(path)
    quiet = logging.getLogger("torch.export")
    level = quiet.level
    try:
        quiet.setLevel(logging.CRITICAL)   # its fallback logs the first attempt's traceback as a warning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "torchscript":
                return torch.jit.load(str(path), map_location="cpu").eval()
            return torch.export.load(str(path)).module()
    except Exception as e:
        raise UserInputError(f"{path}: not a loadable {what} ({type(e).__name__}: {' '.join(str(e).split())[:200]})") \
            from None
    finally:
        quiet.setLevel(level)


def state_digest(module) -> str:
    """One digest of a module's parameters and buffers (names, dtypes, shapes, bytes)."""
    import hashlib

    import torch

    h = hashlib.sha256(b"navigator-state-v1\n")
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def rebuild(record: dict, io: TorchIO):
    """The flat module described by a source record (in a worker or a reproducer). A factory must
    build the same weights every time: the digest recorded when the reference was computed is
    checked, and a factory that is not seeded is one clear error instead of every format failing."""
    if record["kind"] == "factory":
        inner = prepare_module(load_factory(f"{record['file']}:{record['factory']}"))
        if record.get("state_sha256") and state_digest(inner) != record["state_sha256"]:
            raise UserInputError(f"{record['file']}:{record['factory']} built other weights than when the "
                                 "reference was computed: the factory is not deterministic",
                                 hint="seed it (torch.manual_seed) or load a checkpoint in the factory")
    elif record["kind"] in ("torchscript", "torch_export"):
        inner = load_model_file(record["file"], record["kind"])
    elif record["kind"] == "huggingface":   # a save_pretrained folder (navigator.sources.huggingface)
        from navigator.sources import hf_support

        inner = hf_support.rebuild(record)
    else:
        return None
    return flat_module(inner, io)


def prepare_module(module):
    """A CPU fp32 copy in eval mode when the module lives elsewhere; the module itself
    otherwise (the user's object is never changed in place)."""
    import copy

    import torch

    params = list(module.parameters()) + list(module.buffers())
    needs_copy = any(p.device.type != "cpu" or (p.is_floating_point() and p.dtype != torch.float32) for p in params)
    if needs_copy:
        module = copy.deepcopy(module).to("cpu").float()
    return module.eval()



# ------------------------------------------------------------------ the module for converters and runners
class LiveModuleUnavailable(UserInputError):
    """The source is a live module of another process: a runner here cannot run it (``skipped``)."""


@dataclass
class LiveModel:
    """What an export needs: the flat module, its I/O, an example input, the profile."""

    module: Any
    io: TorchIO
    example: tuple
    signature: Any
    profile: dict | None
    rebuilt: bool = False   # rebuilt from its record here (a worker, a reproducer), not the caller's live object


def workspace_module(ws_root: Path, live: Any = None):
    """The flat module of a workspace's torch source: rebuilt from ``formats/torch/source.json``
    (a factory or a model file), else ``live``, the module of a live source, which exists only
    in the calling process (in-process jobs hand it over). Also returns its TorchIO."""
    from navigator.workspace.layout import Workspace

    folder = record_dir(Workspace(Path(ws_root)))
    io = read_io(folder)
    record = json.loads((folder / "source.json").read_text())
    module = rebuild(record, io)
    if module is None:
        module = live
    if module is None:
        raise LiveModuleUnavailable("the source was a live nn.Module that exists only in the process that called "
                                    "navigator.convert; re-run it from there, or pass path/to/file.py:factory")
    return module, io, record


def live_from_workspace(ws_root: Path, signature, profiles: list, live: Any = None) -> LiveModel:
    """The module of a workspace (see :func:`workspace_module`) with its first stored sample."""
    from navigator.workspace import npz
    from navigator.workspace.layout import Workspace

    module, io, _ = workspace_module(ws_root, live)
    example = to_tensors(npz.load(Workspace(Path(ws_root)).input_files()[0]), io.inputs)
    return LiveModel(module=module, io=io, example=example, signature=signature,
                     profile=profiles[0] if profiles else None, rebuilt=module is not live)


REPRODUCE_HEAD = '''"""Rebuilds {output} of this workspace with plain PyTorch calls (run it from the
workspace folder). The module comes back the way the workers rebuild it: from
formats/torch/source.json (a factory or a model file); a live nn.Module from a
script cannot be rebuilt here: call navigator.convert from that script again."""
import torch

from navigator.sources.torch_support import live_from_workspace
from navigator.workspace import status

st = status.load("status.yaml")
live = live_from_workspace(".", st.signature, st.shape_profiles)   # .module takes flat tensors, .example is sample 0
'''


def dims_source(signature, profile: dict | None) -> str:
    """The dynamic_shapes argument of :func:`dynamic_shapes` as Python source, for reproduce.py."""
    ranges = dim_ranges(signature, profile)
    lines = [f"{name} = torch.export.Dim({name!r}, min={lo}, max={hi})"
             for name, lo, hi in dict.fromkeys(v for entry in ranges for v in entry.values())]
    per_input = ["{" + ", ".join(f"{axis}: {name}" for axis, (name, _, _) in entry.items()) + "}" if entry
                 else "None" for entry in ranges]
    return "\n".join(lines + ["dynamic_shapes = ((" + ", ".join(per_input) + ("," if len(per_input) == 1 else "")
                               + "),)"])
