"""ExportedProgram (.pt2) to Torch-TensorRT, saved as TorchScript ``model.pt``
for Triton's PyTorch backend (platform pytorch_libtorch; the server needs
Torch-TensorRT's runtime library loaded).

Written against Torch-TensorRT's dynamo API (``torch_tensorrt.compile(ep,
ir="dynamo", inputs=[torch_tensorrt.Input(min_shape, opt_shape, max_shape,
dtype)])``, ``torch_tensorrt.save(..., output_format="torchscript")``). It
needs torch-tensorrt, which pins its torch and TensorRT, and a GPU: it has
not run on navigator's CPU machines, where the edge is skipped with that
reason. Unverified: no runner executes torch_tensorrt artifacts yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register

_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int64": "int64",
                 "int32": "int32", "int8": "int8", "uint8": "uint8", "bool": "bool", "float64": "float64"}


@dataclass(frozen=True)
class TorchTensorRTParams:
    workspace_mb: int | None = 8192       # TensorRT builder workspace limit
    opt_level: int | None = None          # builder optimisation level 0-5
    min_block_size: int | None = None     # Torch-TensorRT's default (5) when None
    enable_autocast: bool = False         # precision stays the model's (fp32): the tolerances assume it


@register
class TorchExportToTorchTensorRT(Converter):
    """Compile the ExportedProgram with Torch-TensorRT (dynamo) and save it as TorchScript."""

    name = "torch_export_to_torch_tensorrt"
    source = "torch_export"
    target = "torch_tensorrt"
    requires = ("torch", "torch_tensorrt")
    devices = ("cuda",)
    Params = TorchTensorRTParams

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        from navigator import deps

        if not deps.gpu_present():
            return "Torch-TensorRT compiles TensorRT engines on an NVIDIA GPU and none is visible"
        return None

    @classmethod
    def options_from_config(cls, config) -> dict:
        out = {}
        if getattr(config, "trt_workspace_mb", None) is not None:
            out["workspace_mb"] = config.trt_workspace_mb
        if getattr(config, "trt_opt_level", None) is not None:
            out["opt_level"] = config.trt_opt_level
        return out

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import torch
        import torch_tensorrt

        from navigator.workspace import npz

        p: TorchTensorRTParams = ctx.params
        ep = torch.export.load(str(ctx.source))
        profile = (ctx.shape_profiles or [{}])[0]
        inputs = []
        for spec in ctx.signature.inputs:
            dims = profile.get(spec.name) or {k: list(spec.shape) for k in ("min", "opt", "max")}
            inputs.append(torch_tensorrt.Input(min_shape=tuple(dims["min"]), opt_shape=tuple(dims["opt"]),
                                               max_shape=tuple(dims["max"]),
                                               dtype=getattr(torch, _TORCH_DTYPES.get(spec.dtype, "float32")),
                                               name=spec.name))
        options = {"enable_autocast": p.enable_autocast} if p.enable_autocast else {}
        if p.workspace_mb is not None:
            options["workspace_size"] = int(p.workspace_mb) << 20
        if p.opt_level is not None:
            options["optimization_level"] = int(p.opt_level)
        if p.min_block_size is not None:
            options["min_block_size"] = int(p.min_block_size)
        trt_module = torch_tensorrt.compile(ep, ir="dynamo", inputs=inputs, **options)
        first = sorted(ctx.samples_dir.glob("*.npz"))[0]
        sample = npz.load(first)
        example = [torch.from_numpy(sample[spec.name]).cuda() for spec in ctx.signature.inputs]
        try:
            torch_tensorrt.save(trt_module, str(ctx.output), output_format="torchscript", arg_inputs=example)
        except TypeError:   # releases before arg_inputs= took inputs=
            torch_tensorrt.save(trt_module, str(ctx.output), output_format="torchscript", inputs=example)
        return ConvertOutcome(exporter=f"torch_tensorrt {torch_tensorrt.__version__} (dynamo, unverified)")


if __name__ == "__main__":
    raise SystemExit(main(TorchExportToTorchTensorRT))
