"""PyTorch module to ONNX: the dynamo exporter first, the legacy exporter as the fallback."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.onnx_io import TWO_GB, remove_onnx
from navigator.converters.registry import register


@dataclass(frozen=True)
class TorchOnnxParams:
    opset: int | None = None                        # None: the exporter's default
    strategies: tuple = ("dynamo", "legacy")        # tried in this order


@dataclass
class Attempt:
    """One capture strategy's record: the strategy, and its error if it failed."""

    strategy: str
    error: str | None = None


def _dynamic_axes(signature) -> dict:
    axes = {}
    for t in signature.inputs + signature.outputs:
        dyn = {a: f"{t.name}_dim{a}" for a, d in enumerate(t.shape) if d < 0}
        if dyn:
            axes[t.name] = dyn
    return axes


def _export(strategy: str, ctx: ConvertContext, params: TorchOnnxParams) -> None:
    import warnings

    import torch

    from navigator.sources.torch_support import dynamic_shapes

    live = ctx.live
    sig = ctx.signature
    module = live.module
    if isinstance(getattr(module, "inner", None), torch.jit.ScriptModule) and live.io.call == "positional":
        module = module.inner   # a TorchScript source: the legacy exporter takes it as is, not inside a wrapper
    big = sum(p.numel() * p.element_size() for p in module.parameters()) > TWO_GB - (64 << 20)
    kwargs = dict(input_names=sig.input_names, output_names=sig.output_names)
    if params.opset:
        kwargs["opset_version"] = params.opset
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if strategy == "dynamo":
            torch.onnx.export(module, live.example, str(ctx.output), dynamo=True, external_data=big, verbose=False,
                              dynamic_shapes=dynamic_shapes(sig, live.profile), **kwargs)
        elif strategy == "legacy":
            torch.onnx.export(module, live.example, str(ctx.output), dynamo=False,
                              dynamic_axes=_dynamic_axes(sig), **kwargs)
        else:
            raise ValueError(f"unknown ONNX export strategy {strategy!r}")


@register
class TorchToOnnx(Converter):
    """torch.onnx.export: strategies in order; the first that works is recorded as `exporter`."""

    name = "torch_to_onnx"
    source = "torch"
    target = "onnx"
    requires = ("torch", "onnx")
    preload = "onnxscript.function_libs.torch_lib.ops"   # torch.onnx.export's modules
    needs_live = True
    via = "torch_export"    # a run that exports the program converts it in a worker (torch_export_to_onnx)
    Params = TorchOnnxParams

    @classmethod
    def reproduce_py(cls, params, source, output, status):
        from navigator.sources.torch_support import REPRODUCE_HEAD, dims_source

        sig = status.signature
        profile = status.shape_profiles[0] if status.shape_profiles else None
        names = f"input_names={sig.input_names!r}, output_names={sig.output_names!r}"
        return REPRODUCE_HEAD.format(output=output) + (
            f"{dims_source(sig, profile)}\n"
            "# the dynamo exporter first; the legacy exporter is the fallback Navigator tries next\n"
            f"torch.onnx.export(live.module, live.example, {output!r}, dynamo=True, external_data=False,\n"
            f"                  dynamic_shapes=dynamic_shapes, {names})\n"
            f"# torch.onnx.export(live.module, live.example, {output!r}, dynamo=False,\n"
            f"#                   dynamic_axes={_dynamic_axes(sig)!r}, {names})\n")

    @classmethod
    def via_allowed(cls, params) -> bool:
        return tuple(params.strategies[:1]) == ("dynamo",)   # the program is what the dynamo exporter captures

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnx

        attempts: list[Attempt] = []
        for strategy in ctx.params.strategies:
            remove_onnx(ctx.output)
            try:
                _export(strategy, ctx, ctx.params)
                onnx.checker.check_model(str(ctx.output))
                attempts.append(Attempt(strategy))
                break
            except Exception as e:
                attempts.append(Attempt(strategy, " ".join(f"{type(e).__name__}: {e}".split())[:600]))
                ctx.log.warning("ONNX export with the %s exporter failed: %s", strategy, attempts[-1].error)
        else:
            raise RuntimeError(f"every ONNX exporter failed; first: {attempts[0].error}")
        notes = [f"{a.strategy} failed: {a.error}" for a in attempts if a.error]
        return ConvertOutcome(exporter=attempts[-1].strategy, notes=notes)


if __name__ == "__main__":
    raise SystemExit(main(TorchToOnnx))
