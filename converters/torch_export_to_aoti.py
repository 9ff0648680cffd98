"""ExportedProgram to an AOTInductor package (model.pt2), compiled for the run's device."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register


@dataclass(frozen=True)
class AotiParams:
    max_autotune: bool = False
    freezing: bool | None = None   # Inductor's freezing (weights folded as constants); None: on CUDA only


@register
class TorchExportToAoti(Converter):
    """torch._inductor.aoti_compile_and_package; for cuda the program is re-exported on the GPU first and
    its weights frozen (batch norms folded into convolutions)."""

    name = "torch_export_to_aoti"
    source = "torch_export"
    target = "aoti"
    requires = ("torch",)
    Params = AotiParams

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import torch

        ep = torch.export.load(str(ctx.source))
        if ctx.device == "cuda":
            from navigator.runners.torch import on_device
            from navigator.sources.torch_support import dynamic_shapes, to_tensors
            from navigator.workspace import npz

            sample = npz.load(sorted(ctx.samples_dir.glob("*.npz"))[0])
            example = to_tensors(sample, ctx.signature.input_names, "cuda")
            profile = ctx.shape_profiles[0] if ctx.shape_profiles else None
            ep = torch.export.export(on_device(ep, "cuda").module(), example,
                                     dynamic_shapes=dynamic_shapes(ctx.signature, profile, varargs=False))
        options = {"max_autotune": True} if ctx.params.max_autotune else {}
        freezing = ctx.device == "cuda" if ctx.params.freezing is None else ctx.params.freezing
        if freezing:
            options["freezing"] = True
        with torch.no_grad():   # freezing applies to inference graphs only
            torch._inductor.aoti_compile_and_package(ep, package_path=str(ctx.output),
                                                     inductor_configs=options or None)
        return ConvertOutcome(exporter=f"aoti ({ctx.device})")


if __name__ == "__main__":
    raise SystemExit(main(TorchExportToAoti))
