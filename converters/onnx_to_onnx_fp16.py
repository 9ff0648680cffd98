"""ONNX fp32 to fp16: weights and activations cast to float16, inputs and
outputs kept in their original types (a Cast at each end), with the ops
onnxruntime cannot run in fp16 kept in fp32 (onnxconverter-common's block list).

TensorRT 11 and TensorRT-RTX build fp16 engines only from such a graph
(onnx-fp16 -> tensorrt-fp16). Creating an onnxruntime session for some fp16
graphs (attention blocks) can crash the process: the edge is crash-prone, so
the format's convert and verify run in a worker of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register


@dataclass(frozen=True)
class OnnxFp16Params:
    keep_io_types: bool = True            # inputs and outputs stay fp32: same feeds and references
    op_block_list: tuple = ()             # op types kept in fp32, beyond the converter's default list
    node_block_list: tuple = ()           # node names kept in fp32
    min_positive_val: float = 1e-7        # smaller fp32 constants are clamped to this (fp16 underflow)
    max_finite_val: float = 1e4           # larger ones to this (fp16 overflow at 65504)

    def __post_init__(self):
        object.__setattr__(self, "op_block_list", tuple(self.op_block_list))
        object.__setattr__(self, "node_block_list", tuple(self.node_block_list))


def _rewire_outputs_used_inside(model, blocked: set[str]) -> list[str]:
    """Work around onnxconverter-common with keep_io_types: a graph output that
    other nodes also consume (logits -> Softmax) becomes ``Cast(_cast_to_logits)
    -> logits`` (fp32), but the consumers keep reading the fp32 ``logits`` while
    their own outputs were made fp16, which onnxruntime rejects ("Type
    (tensor(float16)) of output arg ... does not match"). Point such consumers
    (converted, non-Cast nodes) at the fp16 value before the Cast. Returns
    ``node:input`` for each input moved."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    fp16_of = {}
    for node in graph.node:
        if node.op_type == "Cast" and len(node.output) == 1 and node.output[0] in outputs \
                and node.input[0] == f"_cast_to_{node.output[0]}":
            fp16_of[node.output[0]] = node.input[0]
    moved = []
    for node in graph.node:
        if node.op_type == "Cast" or node.op_type in blocked:
            continue
        for i, name in enumerate(node.input):
            if name in fp16_of:
                node.input[i] = fp16_of[name]
                moved.append(f"{node.name or node.op_type}:{name}")
    return moved


@register
class OnnxToOnnxFp16(Converter):
    """Cast the graph to fp16, keeping the I/O types (onnxconverter-common)."""

    name = "onnx_to_onnx_fp16"
    source = "onnx"
    target = "onnx-fp16"
    requires = ("onnx", "onnxconverter_common")
    devices = ("cpu", "cuda")
    Params = OnnxFp16Params

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import importlib.metadata

        import onnx
        from onnxconverter_common import float16

        from navigator.converters.onnx_io import TWO_GB, model_size, save_onnx

        p: OnnxFp16Params = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=True)
        names = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
        block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(p.op_block_list))
        converted = float16.convert_float_to_float16(
            model, min_positive_val=p.min_positive_val, max_finite_val=p.max_finite_val,
            keep_io_types=p.keep_io_types, disable_shape_infer=model_size(model) > TWO_GB,
            op_block_list=block, node_block_list=list(p.node_block_list) or None)
        rewired = _rewire_outputs_used_inside(converted, set(block))
        if rewired:
            ctx.log.info("fp16: %d node input(s) moved from an fp32 graph output to its fp16 value: %s",
                         len(rewired), ", ".join(rewired))
        after = ([i.name for i in converted.graph.input], [o.name for o in converted.graph.output])
        if after != names:
            raise RuntimeError(f"the fp16 conversion changed the graph's inputs/outputs: {names} -> {after}")
        casts = sum(1 for n in converted.graph.node if n.op_type == "Cast")
        ctx.log.info("fp16: %d nodes (%d Cast), ops kept in fp32: %s", len(converted.graph.node), casts,
                     ", ".join(p.op_block_list) or "the default block list")
        save_onnx(converted, ctx.output)
        onnx.checker.check_model(str(ctx.output))
        if model_size(converted) <= TWO_GB:   # types must agree everywhere (what onnxruntime checks on load)
            onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
        version = importlib.metadata.version("onnxconverter-common")
        return ConvertOutcome(exporter=f"onnxconverter-common {version}")


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxFp16))
