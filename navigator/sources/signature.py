"""Model signatures: reading an ONNX model's inputs and outputs, detecting the
batch dim, and finding the table sizes that integer inputs index."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec

log = logging.getLogger(__name__)

# Ops through which an integer input keeps its values on the way to a Gather.
_PASSTHROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Transpose", "Expand"}


def load_onnx(path: str | os.PathLike, *, load_external_data: bool = False):
    """Load an ONNX model's graph with one clear error line on bad input."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path), load_external_data=load_external_data)
    except Exception as e:  # protobuf DecodeError, truncated files, ...
        raise UserInputError(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
    if not model.graph.node and not model.graph.output:
        raise UserInputError(f"{path}: not a valid ONNX model (the graph is empty)")
    return model


def check_onnx(path: str | os.PathLike) -> None:
    """Run the ONNX checker on a file (path-based, so > 2 GB models work)."""
    import onnx

    try:
        try:
            str(path).encode("utf-8")
            target = str(path)
        except UnicodeEncodeError:   # onnx's C++ side takes UTF-8 paths only: check the model itself
            with open(path, "rb") as f:
                target = onnx.load(f, load_external_data=False)
        onnx.checker.check_model(target)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserInputError(f"{path}: the ONNX checker rejects the model ({first[:300]})") from None


def _tensor_spec(value_info) -> TensorSpec:
    import onnx

    ttype = value_info.type
    if not ttype.HasField("tensor_type"):
        raise UserInputError(f"'{value_info.name}' is not a tensor "
                             "(sequence, map and optional values are not supported)")
    elem = ttype.tensor_type.elem_type
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem).name
    except Exception:
        raise UserInputError(f"'{value_info.name}' has an unsupported element type {elem}") from None
    if elem == onnx.TensorProto.STRING:
        raise UserInputError(f"'{value_info.name}' is a string tensor: Navigator compares numbers; put the "
                             "tokenization or decoding outside the graph (navigator triton --tokenizer serves "
                             "text in front of a Hugging Face model)")
    if elem == onnx.TensorProto.BFLOAT16:
        dtype = "bfloat16"
    shape = []
    if ttype.tensor_type.HasField("shape"):
        for dim in ttype.tensor_type.shape.dim:
            shape.append(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else -1)
    return TensorSpec(name=value_info.name, dtype=dtype, shape=shape)


def onnx_signature(model) -> ModelSignature:
    """Inputs (initializers excluded) and outputs of a loaded ONNX model."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = [_tensor_spec(vi) for vi in model.graph.input if vi.name not in initializers]
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        for axis, dim in enumerate(dims):
            if vi.name not in initializers and dim.HasField("dim_value") and dim.dim_value == 0:
                raise UserInputError(f"input '{vi.name}' has a fixed dim {axis} of size 0: it never holds a value, "
                                     "so nothing the model computes from it can be verified")
    outputs = [_tensor_spec(vi) for vi in model.graph.output]
    if not inputs:
        raise UserInputError("the model has no inputs; Navigator needs at least one input to feed samples")
    if not outputs:
        raise UserInputError("the model has no outputs")
    return ModelSignature(inputs=inputs, outputs=outputs)


def detect_batch_dim(signature: ModelSignature, *, batch_dim: int | None = None,
                     no_batching: bool = False) -> int | None:
    """The batch dim: dim 0 when it is dynamic on every input, else None.

    ``batch_dim`` overrides the detection (checked against every input's rank);
    ``no_batching`` turns batching off."""
    if no_batching:
        return None
    if batch_dim is not None:
        for t in signature.inputs:
            if batch_dim >= t.rank:
                raise UserInputError(f"--batch-dim {batch_dim}: input '{t.name}' has only {t.rank} dims")
            if t.shape[batch_dim] > 0:
                log.warning("--batch-dim %d: input '%s' has static size %d there", batch_dim, t.name,
                            t.shape[batch_dim])
        return batch_dim
    if all(t.rank >= 1 and t.shape[0] < 0 for t in signature.inputs):
        return 0
    return None


def index_bounds(model) -> dict[str, int]:
    """For integer inputs that index a constant table through Gather, the table's
    row count along the gathered axis: sampled indices must stay below it."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    consts = {init.name: list(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    consts[node.output[0]] = list(numpy_helper.to_array(attr.t).shape)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    int_types = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
                 onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
    bounds: dict[str, int] = {}
    for vi in graph.input:
        if vi.name in consts or vi.type.tensor_type.elem_type not in int_types:
            continue
        best: int | None = None
        frontier, seen = [vi.name], set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            for node in consumers.get(name, []):
                if node.op_type in ("Gather", "GatherElements") and len(node.input) > 1 and node.input[1] == name:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    table = consts.get(node.input[0])
                    if table and -len(table) <= axis < len(table):
                        n = table[axis]
                        best = n if best is None else min(best, n)
                elif node.op_type in _PASSTHROUGH and node.input and node.input[0] == name:
                    frontier.extend(node.output)
        if best:
            bounds[vi.name] = best
    return bounds


_COMPARISONS = ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")


def compared_values(model) -> dict[str, tuple[float, float]]:
    """Value ranges for inputs the graph compares with a constant scalar (``sr == 16000`` in a
    voice-activity model): generated values must take the branch a real input takes, not [0, 16).
    The first such constant wins: [c, c + 1)."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    scalars = {}
    def scalar(tensor):   # a number held in the graph (external data and strings are no such constant)
        if list(tensor.dims) not in ([], [1]) or tensor.data_location == onnx.TensorProto.EXTERNAL:
            return None
        try:
            return float(numpy_helper.to_array(tensor).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            return None

    for init in graph.initializer:
        if scalar(init) is not None:
            scalars[init.name] = scalar(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and scalar(attr.t) is not None:
                    scalars[node.output[0]] = scalar(attr.t)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found: dict[str, tuple[float, float]] = {}
    for vi in graph.input:
        if vi.name in scalars:
            continue
        frontier, seen = [vi.name], set()
        while frontier and vi.name not in found:
            name = frontier.pop(0)
            if name in seen:
                continue
            seen.add(name)
            for node in consumers.get(name, []):
                if node.op_type in _COMPARISONS and len(node.input) == 2:
                    other = node.input[1] if node.input[0] == name else node.input[0]
                    if other in scalars:
                        c = scalars[other]
                        found[vi.name] = (c, c + 1.0)
                        break
                elif node.op_type in _PASSTHROUGH and node.input and node.input[0] == name:
                    frontier.extend(node.output)
    return found


def all_tensors(graph):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from all_tensors(attr.g)
            for g in attr.graphs:
                yield from all_tensors(g)


def external_data_files(model, base_dir: str | os.PathLike) -> list[Path]:
    """The external data files a model refers to (relative to its folder)."""
    import onnx

    files: list[Path] = []
    for tensor in all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    p = Path(base_dir) / entry.value
                    if p not in files:
                        files.append(p)
    return files


def short_external_data(model, base_dir: str | os.PathLike) -> str | None:
    """The first initializer whose external data reaches past the end of its file (a truncated
    copy or download), said in one line; None when every one is whole."""
    import onnx

    sizes: dict[Path, int] = {}
    for tensor in all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in tensor.external_data}
        if "location" not in entries or "length" not in entries:
            continue
        p = Path(base_dir) / entries["location"]
        if p not in sizes:
            try:
                sizes[p] = p.stat().st_size
            except OSError:
                continue   # a missing file is reported on its own
        end = int(entries.get("offset", 0) or 0) + int(entries["length"])
        if end > sizes[p]:
            return (f"external data file {p.name!r} is {sizes[p]} bytes, but initializer {tensor.name!r} needs bytes "
                    f"up to {end}: the file is truncated (an interrupted copy or download?)")
    return None
