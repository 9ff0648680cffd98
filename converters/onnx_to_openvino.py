"""ONNX to OpenVINO IR (model.xml + model.bin), fp32 weights."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

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

        with _in_place_weights(ctx) as source:
            model = ov.convert_model(str(source))
            ov.save_model(model, str(ctx.output), compress_to_fp16=ctx.params.compress_to_fp16)
            names = {p.get_any_name(): p.get_any_name() for p in list(model.inputs) + list(model.outputs)}
            del model
        return ConvertOutcome(exporter=f"openvino {ov.__version__}", io_names=names)


@contextlib.contextmanager
def _in_place_weights(ctx: ConvertContext):
    """The ONNX file to convert: for a model with external data, a copy whose MatMul weights are
    stored transposed (:func:`navigator.converters.onnx_io.pretranspose_matmul_weights`), beside the
    output and removed after, so that the conversion reads them in place; else the source itself."""
    import onnx

    from navigator.converters.onnx_io import external_tensors, pretranspose_matmul_weights, save_proto

    model = onnx.load(str(ctx.source), load_external_data=False)
    if not external_tensors(model):
        yield ctx.source
        return
    folder = Path(tempfile.mkdtemp(prefix=".pretransposed-", dir=ctx.output.parent))
    try:
        rewritten, count, size = pretranspose_matmul_weights(model, ctx.source.parent, folder, "model.onnx.data")
        if not count:
            yield ctx.source
            return
        ctx.log.info("%d MatMul weights (%.2f GiB) stored transposed for the conversion to read them in place",
                     count, size / 2**30)
        save_proto(rewritten, folder / "model.onnx")
        yield folder / "model.onnx"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOpenVINO))
