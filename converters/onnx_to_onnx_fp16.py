"""ONNX fp32 to fp16: weights and activations cast to float16, inputs and
outputs kept in their original types (a Cast at each end), with the ops
onnxruntime cannot run in fp16 kept in fp32 (onnxconverter-common's block list).

TensorRT 11 and TensorRT-RTX build fp16 engines only from such a graph
(onnx-fp16 -> tensorrt-fp16). Creating an onnxruntime session for some fp16
graphs (attention blocks) can crash the process: the format's convert and
verify run in a worker of their own.

When the converted graph fails the ONNX checker or onnxruntime's load, and the
error names a node, the conversion is repeated with that node kept in fp32, at
most ``max_retries`` times; every node so kept is recorded in ``convert.reason``
with the error that made it necessary. Known cause: onnxconverter-common 1.16
marks the output of some ``Cast(to=FLOAT)`` nodes fp16 while the node still casts
to fp32 (microsoft/onnxconverter-common#320), on Llama's position ids and T5's
relative-position buckets; keeping that node in fp32 is exact.
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
    max_retries: int = 8                  # nodes kept in fp32 after a failed check, at most

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

        from navigator.converters.onnx_check import InvalidGraph, check_file
        from navigator.converters.onnx_io import TWO_GB, model_size

        p: OnnxFp16Params = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=True)
        named = _name_unnamed_nodes(model)
        if named:   # onnxconverter-common names its casts after the consumer: an unnamed one repeats names
            ctx.log.info("fp16: %d unnamed node(s) named before the conversion", named)
        kept: list[str] = []
        blocked = list(p.node_block_list)
        while True:
            converted = self._convert_once(ctx, model, blocked)
            try:
                check_file(ctx.output, session=model_size(converted) <= TWO_GB)
                break
            except InvalidGraph as e:
                if not e.node or e.node in blocked or len(kept) >= p.max_retries:
                    raise
                blocked.append(e.node)
                kept.append(f"{e.node}" + (f" ({e.op})" if e.op else "") + f": {e.detail[:160]}")
                ctx.log.warning("fp16: keeping node %s in fp32 and converting again: %s", e.node, e.detail)
        version = importlib.metadata.version("onnxconverter-common")
        notes = [f"kept in fp32 after the fp16 graph failed its check: {'; '.join(kept)}"] if kept else []
        return ConvertOutcome(exporter=f"onnxconverter-common {version}", notes=notes)

    def _convert_once(self, ctx: ConvertContext, model, node_block_list: list[str]):
        """One conversion of ``model`` (unchanged) into ctx.output; returns the converted model."""
        import copy

        import onnx
        from onnxconverter_common import float16

        from navigator.converters.onnx_io import TWO_GB, model_size, save_onnx

        p: OnnxFp16Params = ctx.params
        names = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
        block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(p.op_block_list))
        converted = float16.convert_float_to_float16(
            copy.deepcopy(model), min_positive_val=p.min_positive_val, max_finite_val=p.max_finite_val,
            keep_io_types=p.keep_io_types, disable_shape_infer=model_size(model) > TWO_GB,
            op_block_list=block, node_block_list=node_block_list or None)
        rewired = _rewire_outputs_used_inside(converted, set(block))
        if rewired:
            ctx.log.info("fp16: %d node input(s) moved from an fp32 graph output to its fp16 value: %s",
                         len(rewired), ", ".join(rewired))
        after = ([i.name for i in converted.graph.input], [o.name for o in converted.graph.output])
        if after != names:
            raise RuntimeError(f"the fp16 conversion changed the graph's inputs/outputs: {names} -> {after}")
        casts = sum(1 for n in converted.graph.node if n.op_type == "Cast")
        ctx.log.info("fp16: %d nodes (%d Cast), ops kept in fp32: %s; nodes kept in fp32: %s",
                     len(converted.graph.node), casts, ", ".join(p.op_block_list) or "the default block list",
                     ", ".join(node_block_list) or "none")
        save_onnx(converted, ctx.output)
        onnx.checker.check_model(str(ctx.output))
        return converted


def _name_unnamed_nodes(model) -> int:
    """Give every unnamed node of the top-level graph a unique name (``<op>_<index>``)."""
    taken = {n.name for n in model.graph.node if n.name}
    count = 0
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
            count += 1
    return count


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxFp16))
