"""ExportedProgram (.pt2) to ONNX with the dynamo exporter, in a worker.

The dynamo exporter captures a module with torch.export and translates the program; given the
program itself it only translates, and the graph is the one it makes from the module (the
transformer block and the CNN of ``examples/``: the same nodes, outputs equal). A live module's
ONNX export needs the module, so it runs in the calling process, one export after another;
when the run exports an ExportedProgram anyway, its ONNX is made from that file in a worker
instead (``TorchToOnnx.via``), beside the module's other work. The program's dims keep the names
the run gave them (dynamo names them ``s0``, ``s1``, ... otherwise)."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.onnx_io import TWO_GB, remove_onnx
from navigator.converters.registry import register


@dataclass(frozen=True)
class ExportedOnnxParams:
    opset: int | None = None                        # None: the exporter's default


def _dim_names(model, signature, profile) -> None:
    """Name each symbolic dim of the graph's inputs and outputs as the module's export would
    (:func:`navigator.sources.torch_support.dim_ranges`), where the program left ``s<N>``."""
    from navigator.sources.torch_support import dim_ranges

    wanted: dict[str, dict[int, str]] = {}
    for spec, entry in zip(signature.inputs, dim_ranges(signature, profile)):
        wanted[spec.name] = {axis: name for axis, (name, _, _) in entry.items()}
    renamed: dict[str, str] = {}
    for value in model.graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            name = wanted.get(value.name, {}).get(axis)
            if name and dim.dim_param and dim.dim_param != name:
                renamed.setdefault(dim.dim_param, name)
    for value in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in renamed:
                dim.dim_param = renamed[dim.dim_param]


@register
class TorchExportToOnnx(Converter):
    """torch.onnx.export of a saved ExportedProgram (dynamo=True)."""

    name = "torch_export_to_onnx"
    source = "torch_export"
    target = "onnx"
    requires = ("torch", "onnx")
    preload = "onnxscript.function_libs.torch_lib.ops"   # torch.onnx.export's modules
    Params = ExportedOnnxParams

    @classmethod
    def reproduce_py(cls, params, source, output, status):
        opset = f", opset_version={params.opset}" if params.opset else ""
        sig = status.signature
        return ("import torch\n\n"
                f"ep = torch.export.load({source!r})\n"
                f"torch.onnx.export(ep, (), {output!r}, dynamo=True, input_names={sig.input_names!r},\n"
                f"                  output_names={sig.output_names!r}{opset})\n")

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import warnings

        import onnx
        import torch

        from navigator.converters.onnx_io import save_onnx

        ep = torch.export.load(str(ctx.source))
        big = sum(t.numel() * t.element_size() for t in ep.state_dict.values()) > TWO_GB - (64 << 20)
        kwargs = dict(input_names=ctx.signature.input_names, output_names=ctx.signature.output_names)
        if ctx.params.opset:
            kwargs["opset_version"] = ctx.params.opset
        remove_onnx(ctx.output)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(ep, (), str(ctx.output), dynamo=True, external_data=big, verbose=False, **kwargs)
        if not big:   # names of the dims as the module's export gives them (a >2 GB graph keeps dynamo's)
            model = onnx.load(str(ctx.output))
            _dim_names(model, ctx.signature, ctx.shape_profiles[0] if ctx.shape_profiles else None)
            save_onnx(model, ctx.output)
        onnx.checker.check_model(str(ctx.output))
        return ConvertOutcome(exporter="dynamo (from the ExportedProgram)")


if __name__ == "__main__":
    raise SystemExit(main(TorchExportToOnnx))
