"""PyTorch module to TorchScript: trace (default, under no_grad) or script."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register


@dataclass(frozen=True)
class TorchScriptParams:
    method: str = "trace"          # trace | script
    check_trace: bool = False      # torch.jit.trace's own re-run check (slow; we verify anyway)


def pytorch_backend_names(signature) -> dict[str, str]:
    """Triton's PyTorch backend convention: INPUT__i / OUTPUT__i by position."""
    names = {t.name: f"INPUT__{i}" for i, t in enumerate(signature.inputs)}
    names.update({t.name: f"OUTPUT__{i}" for i, t in enumerate(signature.outputs)})
    return names


@register
class TorchToTorchScript(Converter):
    """Trace the module (flat tensors in, a tuple out) and save it as TorchScript."""

    name = "torch_to_torchscript"
    source = "torch"
    target = "torchscript"
    requires = ("torch",)
    needs_live = True
    Params = TorchScriptParams

    @classmethod
    def params_from_dict(cls, data):
        params = super().params_from_dict(data)
        if params.method not in ("trace", "script"):
            from navigator.errors import UserInputError

            raise UserInputError(f"converter {cls.name}: method must be trace or script, got {params.method!r}")
        return params

    @classmethod
    def reproduce_py(cls, params, source, output, status):
        from navigator.sources.torch_support import REPRODUCE_HEAD

        call = ("torch.jit.script(live.module.inner)" if params.method == "script" else
                f"torch.jit.trace(live.module, live.example, check_trace={params.check_trace})")
        return (REPRODUCE_HEAD.format(output=output)
                + "torch.backends.cudnn.allow_tf32 = False  # traced as a constant\n"
                + f"with torch.no_grad():\n    {call}.save({output!r})\n")

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import warnings

        import torch

        live = ctx.live
        # trace on the run's device: a trace records the device of every tensor forward creates
        # (BERT's attention bias), so a CPU trace fails on CUDA; the caller's own live module stays
        # on the CPU (the calling process never initialises CUDA)
        device = "cuda" if ctx.device == "cuda" and live.rebuilt else "cpu"
        module, example = live.module.to(device), tuple(t.to(device) for t in live.example)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch.jit is deprecated in 2.9+: we know
            if ctx.params.method == "script":
                inner = live.module.inner
                if live.io.call != "positional" or len(live.io.outputs) != 1 and live.io.treespec is None:
                    raise RuntimeError("script needs a module taking tensors positionally; use method: trace")
                scripted = torch.jit.script(inner)
            else:
                # A trace records aten::_convolution with cuDNN's allow_tf32 flag as a constant
                # (True by default): fp32 means fp32, so trace with it off (TF32 cost ~2e-2 on ResNet-50)
                tf32 = torch.backends.cudnn.allow_tf32
                torch.backends.cudnn.allow_tf32 = False
                try:
                    scripted = torch.jit.trace(module, example, check_trace=ctx.params.check_trace)
                finally:
                    torch.backends.cudnn.allow_tf32 = tf32
        scripted.save(str(ctx.output))
        exporter = f"torch.jit.{ctx.params.method}" + (" (cuda)" if device == "cuda" else "")
        return ConvertOutcome(exporter=exporter, io_names=pytorch_backend_names(ctx.signature))


if __name__ == "__main__":
    raise SystemExit(main(TorchToTorchScript))
