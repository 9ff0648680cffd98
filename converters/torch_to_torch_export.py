"""PyTorch module to an ExportedProgram (.pt2) with dynamic dims from the shape profile."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register


@dataclass(frozen=True)
class TorchExportParams:
    strict: bool = False
    static_fallback: bool = True    # export with static shapes when dynamic export fails


@register
class TorchToTorchExport(Converter):
    """torch.export.export with a Dim per dynamic dim; static shapes as the fallback, reason kept."""

    name = "torch_to_torch_export"
    source = "torch"
    target = "torch_export"
    requires = ("torch",)
    needs_live = True
    Params = TorchExportParams

    @classmethod
    def reproduce_py(cls, params, source, output, status):
        from navigator.sources.torch_support import REPRODUCE_HEAD, dims_source

        profile = status.shape_profiles[0] if status.shape_profiles else None
        return REPRODUCE_HEAD.format(output=output) + (
            f"{dims_source(status.signature, profile)}\n"
            f"ep = torch.export.export(live.module, live.example, strict={params.strict}, "
            "dynamic_shapes=dynamic_shapes)\n"
            f"torch.export.save(ep, {output!r})\n")

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import torch

        from navigator.sources.torch_support import dynamic_shapes

        live = ctx.live
        if isinstance(getattr(live.module, "inner", None), torch.jit.ScriptModule):
            raise RuntimeError("torch.export cannot capture a TorchScript module; export the original nn.Module "
                               "instead (file.py:factory), or use the onnx and torchscript formats")
        notes = []
        try:
            ep = torch.export.export(live.module, live.example, strict=ctx.params.strict,
                                     dynamic_shapes=dynamic_shapes(ctx.signature, live.profile))
            exporter = "torch.export"
        except Exception as e:
            if not ctx.params.static_fallback:
                raise
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:400]
            ctx.log.warning("dynamic export failed, trying static shapes: %s", reason)
            ep = torch.export.export(live.module, live.example, strict=ctx.params.strict)
            exporter = "torch.export (static shapes)"
            notes.append(f"dynamic shapes failed: {reason}")
        torch.export.save(ep, str(ctx.output))
        return ConvertOutcome(exporter=exporter, notes=notes, static_shapes=bool(notes))


if __name__ == "__main__":
    raise SystemExit(main(TorchToTorchExport))
