"""ONNX to OpenVINO IR (model.xml + model.bin), fp32 weights."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register


@dataclass(frozen=True)
class OnnxToOpenVINOParams:
    compress_to_fp16: bool = False     # openvino.save_model compresses by default: we keep fp32


@register
class OnnxToOpenVINO(Converter):
    """Convert with openvino.convert_model; dynamic dims are kept."""

    name = "onnx_to_openvino"
    source = "onnx"
    target = "openvino"
    requires = ("openvino",)
    devices = ("cpu",)
    Params = OnnxToOpenVINOParams

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import openvino as ov

        model = ov.convert_model(str(ctx.source))
        ov.save_model(model, str(ctx.output), compress_to_fp16=ctx.params.compress_to_fp16)
        names = {p.get_any_name(): p.get_any_name() for p in list(model.inputs) + list(model.outputs)}
        return ConvertOutcome(exporter=f"openvino {ov.__version__}", io_names=names)


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOpenVINO))
