"""Checking an ONNX artifact before its convert step may say ok.

Every ONNX graph a conversion produces goes through :func:`check_artifact` (the
``check`` of the onnx format's record, run by the worker right after the
converter): the full ONNX checker with strict shape inference, a search for ops no
ONNX opset defines, and an onnxruntime session (graph optimisations off: a load,
not a tuning). A failure fails *convert* with the node and op it names, never
verify with a raw runtime error.

Exporter gaps that have an exact rewrite are repaired first and said so in
``convert.reason`` (:data:`REPAIRS`): tf2onnx emits ``Erfc`` for Keras' exact
gelu, an op ONNX does not define; ``Erfc(x) = 1 - Erf(x)`` exactly.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

SESSION_MAX_BYTES = 1 << 30    # larger models (external data) are not loaded into a session: memory


class InvalidGraph(Exception):
    """The ONNX graph is invalid or cannot be loaded; ``node`` / ``op`` where the error names them."""

    def __init__(self, message: str, node: str | None = None, op: str | None = None):
        where = (f"node {node!r}" + (f" (op {op})" if op else "") + ": ") if node else ""
        super().__init__(where + message)
        self.node, self.op, self.detail = node, op, message


# --------------------------------------------------------------------------- exact repairs
def _erfc(model, node) -> list:
    """Erfc(x) -> Sub(1, Erf(x)), with a scalar 1 of the input's float type."""
    from onnx import helper

    x, y = node.input[0], node.output[0]
    one = f"{node.name or y}_one"
    erf = f"{node.name or y}_erf"
    dtype = _elem_type(model, x)
    return [helper.make_node("Constant", [], [one], value=helper.make_tensor(one, dtype, [], [1.0]),
                             name=f"{node.name or y}/one"),
            helper.make_node("Erf", [x], [erf], name=f"{node.name or y}/erf"),
            helper.make_node("Sub", [one, erf], [y], name=f"{node.name or y}/sub")]


def _elem_type(model, name: str) -> int:
    """The element type of tensor ``name`` (float32 when shape inference does not know it)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        for vi in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
            if vi.name == name and vi.type.tensor_type.elem_type:
                return vi.type.tensor_type.elem_type
    except Exception:   # noqa: BLE001 - best effort: float32 is what exporters emit Erfc for
        pass
    return onnx.TensorProto.FLOAT


# op type -> rewrite(model, node) -> replacement nodes; only exact identities belong here
REPAIRS = {"Erfc": _erfc}


def _defined(op_type: str, domain: str) -> bool:
    import onnx

    if domain not in ("", "ai.onnx"):
        return True        # a custom domain (com.microsoft, plugins): onnxruntime or the runtime decides
    return onnx.defs.has(op_type)


def unknown_ops(model) -> list[tuple[str, str]]:
    """(node name, op type) of the nodes whose op no ONNX opset defines (top-level graph)."""
    return [(n.name, n.op_type) for n in model.graph.node if not _defined(n.op_type, n.domain)]


def repair(model) -> list[str]:
    """Rewrite undefined ops that have an exact equivalent; returns one note per op type repaired."""
    done: dict[str, int] = {}
    nodes = []
    for node in model.graph.node:
        rewrite = REPAIRS.get(node.op_type) if not _defined(node.op_type, node.domain) else None
        if rewrite is None:
            nodes.append(node)
            continue
        nodes.extend(rewrite(model, node))
        done[node.op_type] = done.get(node.op_type, 0) + 1
    if done:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return [f"repaired {n} {op} node(s) that no ONNX opset defines with an exact rewrite "
            f"({'Erfc(x) = 1 - Erf(x)' if op == 'Erfc' else op})" for op, n in done.items()]


# --------------------------------------------------------------------------- checks
_NODE_PATTERNS = (
    re.compile(r"Name: (\S+) OpType: (\w+)"),                # checker: Bad node spec for node. Name: n OpType: Op
    re.compile(r"node name: ([^)\]]+)\)"),                  # [ShapeInferenceError] (op_type:Gather, node name: n)
    re.compile(r'In Node, \("([^"]*)", (\w+)'),              # onnxruntime: In Node, ("n", Gather, "", -1)
    re.compile(r"of node \(([^)]*)\)"),                      # Type Error: ... of node (n) does not match
    re.compile(r"Node \(([^)]*)\)"),                         # Node (n) has input size ...
)
_OP_PATTERN = re.compile(r"op_type:(\w+)|Op \((\w+)\)")


def failing_node(message: str) -> tuple[str | None, str | None]:
    """(node name, op type) that an ONNX or onnxruntime error message names, where it names them."""
    node = op = None
    for pattern in _NODE_PATTERNS:
        m = pattern.search(message)
        if m:
            node = m.group(1).strip()
            if m.lastindex and m.lastindex > 1:
                op = m.group(2)
            break
    m = _OP_PATTERN.search(message)
    if m and op is None:
        op = m.group(1) or m.group(2)
    return node or None, op


def _first_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text[:400] or type(e).__name__


def check_file(path: str | Path, *, session: bool = True) -> None:
    """Raise :class:`InvalidGraph` unless the ONNX file at ``path`` is valid and loads."""
    import onnx

    from navigator import deps
    from navigator.converters.onnx_io import model_size

    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    unknown = unknown_ops(model)
    if unknown:
        node, op = unknown[0]
        raise InvalidGraph(f"uses op {op}, which no ONNX opset defines ({len(unknown)} such node(s))", node, op)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:
        node, op = failing_node(str(e))
        raise InvalidGraph(f"the ONNX checker rejects the graph: {_first_line(e)}", node, op) from None
    if not session or not deps.has("onnxruntime"):
        return
    if model_size(model) > SESSION_MAX_BYTES:
        log.info("%s: %.1f GiB, not loaded into an onnxruntime session for the check", path,
                 model_size(model) / 2**30)
        return
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as e:
        node, op = failing_node(str(e))
        raise InvalidGraph(f"onnxruntime cannot load the graph: {_first_line(e)}", node, op) from None


def check_artifact(path: str | Path) -> list[str]:
    """The onnx format's artifact check: repair exact exporter gaps (the file is rewritten), then
    :func:`check_file`. Returns notes for convert.reason; raises :class:`InvalidGraph`."""
    import onnx

    from navigator.converters.onnx_io import external_tensors, save_proto

    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    notes = []
    if unknown_ops(model) and not external_tensors(model):
        notes = repair(model)
        if notes:
            save_proto(model, path)
            log.warning("%s: %s", path.name, "; ".join(notes))
    check_file(path)
    return notes


# --------------------------------------------------------------------------- precision in name only
# a reduced-precision graph whose heavy ops' weights are mostly not in its precision is not that
# precision (an fp16 conversion that kept an If node -- the whole network -- in fp32 held no fp16)
_PRECISION_TYPES = {"fp16": ("FLOAT16",), "bf16": ("BFLOAT16",), "int8": ("INT8", "UINT8"),
                    "fp8": ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")}
_COMPUTE_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger", "ConvInteger", "QLinearConv",
                "QLinearMatMul"}
_PASS_THROUGH = {"DequantizeLinear", "QuantizeLinear", "Cast", "Transpose", "Reshape", "Identity"}   # weight -> op


def _graphs(graph):
    """A graph and every subgraph in it."""
    from onnx import AttributeProto

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def data_files(path: str | Path) -> list[Path]:
    """The external data files a graph names, beside it (whether they exist or not)."""
    from navigator.sources.signature import external_data_files, load_onnx

    return external_data_files(load_onnx(path), Path(path).parent)


def precision_share(path, precision: str) -> float | None:
    """The share of the weight bytes of a graph's heavy ops (convolutions, matrix products; in
    subgraphs too) held in ``precision``'s types, following a weight through DequantizeLinear, Cast
    and reshapes to its initializer; None for a precision this does not measure or no such weight."""
    import math

    import onnx
    from onnx import TensorProto

    wanted = _PRECISION_TYPES.get(precision)
    if wanted is None:
        return None
    model = onnx.load(str(path), load_external_data=False)
    total = held = 0
    graphs = list(_graphs(model.graph))
    # names are unique across scopes: a subgraph's op may take an initializer of the graph around it
    tensors = {t.name: t for graph in graphs for t in graph.initializer}
    for graph in graphs:
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
                tensors[node.output[0]] = node.attribute[0].t
    producer = {out: node for graph in graphs for node in graph.node for out in node.output}
    seen: set[str] = set()
    for graph in graphs:
        for node in graph.node:
            if node.op_type not in _COMPUTE_OPS:
                continue
            for name in node.input:
                # the weight as the op computes with it: a QuantizeLinear or a Cast to the precision on the
                # way quantizes an fp32 initializer at load (ORT's QDQ of some graphs; TensorRT's explicit form)
                converted = False
                while name not in tensors and name in producer and producer[name].op_type in _PASS_THROUGH:
                    step = producer[name]
                    converted |= step.op_type == "QuantizeLinear" and precision == "int8" or (
                        step.op_type == "Cast" and TensorProto.DataType.Name(
                            next((a.i for a in step.attribute if a.name == "to"), 0)) in wanted)
                    name = step.input[0]
                t = tensors.get(name)
                if t is None or name in seen or not t.dims:
                    continue
                seen.add(name)
                size = math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
                total += size
                held += size if converted or TensorProto.DataType.Name(t.data_type) in wanted else 0
    return held / total if total else None
