"""ONNX fp32 to fp16: weights and activations in float16 where each op's schema allows it,
inputs and outputs kept in their original types, a Cast on every edge whose types differ
(navigator.converters.fp16_graph), and the ops kept in fp32 that onnxruntime cannot run or that
lose meaning in fp16 (:data:`BLOCK_LIST`: index ties, cumulative sums, ML ops; subgraph ops).

TensorRT 11 and TensorRT-RTX build fp16 engines only from such a graph
(onnx-fp16 -> tensorrt-fp16). Creating an onnxruntime session for some fp16
graphs (attention blocks) can crash the process: the format's convert and
verify run in a worker of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register

# ops kept in fp32: non-float ML ops, index ties (TopK, NonMaxSuppression), accumulations and random
# draws that fp16 ruins, resampling whose fp16 kernels onnxruntime lacks on the CPU
BLOCK_LIST = ("ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer",
              "FeatureVectorizer", "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor", "Normalizer",
              "OneHotEncoder", "RandomUniformLike", "SVMClassifier", "SVMRegressor", "Scaler",
              "TreeEnsembleClassifier", "TreeEnsembleRegressor", "ZipMap", "NonMaxSuppression", "TopK", "RoiAlign",
              "Resize", "Range", "CumSum", "Min", "Max", "Upsample")


@dataclass(frozen=True)
class OnnxFp16Params:
    keep_io_types: bool = True            # inputs and outputs stay fp32: same feeds and references
    op_block_list: tuple = ()             # op types kept in fp32, beyond BLOCK_LIST
    node_block_list: tuple = ()           # node names kept in fp32
    min_positive_val: float = 1e-7        # smaller fp32 constants are clamped to this (fp16 underflow)
    max_finite_val: float = 1e4           # larger ones to this (fp16 overflow at 65504)
    max_retries: int = 0                  # no longer used (the casts are placed by type): accepted for old configs

    def __post_init__(self):
        object.__setattr__(self, "op_block_list", tuple(self.op_block_list))
        object.__setattr__(self, "node_block_list", tuple(self.node_block_list))


@register
class OnnxToOnnxFp16(Converter):
    """Cast the graph to fp16 by its op schemas, keeping the I/O types."""

    name = "onnx_to_onnx_fp16"
    source = "onnx"
    target = "onnx-fp16"
    requires = ("onnx",)
    devices = ("cpu", "cuda")
    Params = OnnxFp16Params

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnx

        from navigator.converters import fp16_graph
        from navigator.converters.onnx_check import check_file
        from navigator.converters.onnx_io import TWO_GB, model_size, save_onnx

        p: OnnxFp16Params = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=True)
        names = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
        model, converted, casts = fp16_graph.convert(
            model, op_block_list=BLOCK_LIST + p.op_block_list, node_block_list=p.node_block_list,
            keep_io_types=p.keep_io_types, min_positive_val=p.min_positive_val, max_finite_val=p.max_finite_val)
        if not converted:   # an fp16 format that computes in fp32 would be verified as what it is not
            inside = any(n.op_type in fp16_graph.SUBGRAPH_OPS for n in model.graph.node)
            raise RuntimeError("no node could run in fp16" + (
                ": the graph computes inside If / Loop / Scan subgraphs, which stay fp32 (export it without "
                "control flow, e.g. for one fixed sample rate)" if inside else " (every float op is blocked)"))
        after = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
        if after != names:
            raise RuntimeError(f"the fp16 conversion changed the graph's inputs/outputs: {names} -> {after}")
        ctx.log.info("fp16: %d of %d nodes in fp16, %d Cast nodes placed; ops kept in fp32: the block list%s%s",
                     converted, len(model.graph.node) - casts, casts,
                     f" and {', '.join(p.op_block_list)}" if p.op_block_list else "",
                     f"; nodes kept in fp32: {', '.join(p.node_block_list)}" if p.node_block_list else "")
        save_onnx(model, ctx.output)
        check_file(ctx.output, session=model_size(model) <= TWO_GB)
        return ConvertOutcome(exporter=f"navigator fp16 by op schema ({converted} nodes in fp16, {casts} casts)")


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxFp16))
