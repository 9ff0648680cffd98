"""ONNX to TensorRT and TensorRT-RTX engines (model.plan + engine.yaml).

Six edges, one builder (converters/tensorrt_builder.py):

* onnx -> tensorrt, onnx-fp16 -> tensorrt-fp16, onnx-int8 -> tensorrt-int8:
  TensorRT 10 or 11 (module tensorrt), on an NVIDIA GPU;
* onnx -> tensorrt_rtx, onnx-fp16 -> tensorrt_rtx-fp16, onnx-int8 -> tensorrt_rtx-int8:
  TensorRT-RTX (module tensorrt_rtx), which builds on a CPU too.

Reduced precision comes from the graph (fp16 casts, Q/DQ nodes): TensorRT 11
and TensorRT-RTX build only strongly typed networks; for TensorRT 10 the
matching builder flag is set as well. ``python -m
navigator.converters.onnx_to_tensorrt`` picks the edge from ``--output``
(``formats/<key>/model.plan``).
"""

from __future__ import annotations

import sys
from typing import ClassVar

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register
from navigator.converters.tensorrt_builder import TensorRTParams


class _OnnxToEngine(Converter):
    """Build an engine with one optimization profile per workspace shape profile."""

    builder: ClassVar[str] = "tensorrt"
    Params = TensorRTParams

    @classmethod
    def precision(cls) -> str:
        from navigator.formats import parse_key

        return parse_key(cls.target).precision

    @classmethod
    def options_from_config(cls, config) -> dict:
        out: dict = {}
        for option, param in (("trt_workspace_mb", "workspace_mb"), ("trt_opt_level", "opt_level"),
                              ("trt_plugins", "plugins")):
            value = getattr(config, option, None)
            if value is not None:
                out[param] = list(value) if option == "trt_plugins" else value
        if cls.builder == "tensorrt" and getattr(config, "trt_version_compatible", False):
            out["version_compatible"] = True
        return out

    @classmethod
    def reproduce_notes(cls, params, source: str, output: str, status) -> list[str]:
        from navigator.converters.tensorrt_builder import reproduce_lines, validate_profiles

        inputs = {t.name: list(t.shape) for t in status.signature.inputs}
        try:
            profiles = validate_profiles(list(status.shape_profiles or []), inputs)
        except Exception as e:   # the build reports it; reproduce.sh still gets written
            return ["", f"# no trtexec command: {e}"]
        return reproduce_lines(builder=cls.builder, onnx=source, engine=output, profiles=profiles,
                               precision=cls.precision(), params=params)

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        from navigator.converters.tensorrt_builder import build_engine

        def rel(p):
            try:
                return str(p.resolve().relative_to(ctx.workspace.resolve()))
            except ValueError:
                return str(p)

        result = build_engine(builder=self.builder, onnx_path=ctx.source, plan_path=ctx.output,
                              profiles=list(ctx.shape_profiles or []), precision=self.precision(),
                              params=ctx.params, workspace=ctx.workspace, relpath=rel)
        info = result.info
        ctx.log.info("engine.yaml: %s", {k: info[k] for k in ("builder_version", "precision", "plan_bytes",
                                                              "build_s")})
        return ConvertOutcome(exporter=f"{self.builder} {info['module_version']}")


class _TensorRT(_OnnxToEngine):
    builder = "tensorrt"
    requires = ("tensorrt",)
    devices = ("cuda",)                 # TensorRT times its kernels on the GPU it builds for


class _TensorRTRTX(_OnnxToEngine):
    builder = "tensorrt_rtx"
    requires = ("tensorrt_rtx",)
    devices = ("cpu", "cuda")


@register
class OnnxToTensorRT(_TensorRT):
    """Build a TensorRT engine (fp32; TF32 off) from the ONNX model."""

    name = "onnx_to_tensorrt"
    source = "onnx"
    target = "tensorrt"


@register
class OnnxFp16ToTensorRT(_TensorRT):
    """Build a TensorRT fp16 engine from the fp16 ONNX graph."""

    name = "onnx_fp16_to_tensorrt_fp16"
    source = "onnx-fp16"
    target = "tensorrt-fp16"


@register
class OnnxInt8ToTensorRT(_TensorRT):
    """Build a TensorRT int8 engine from the Q/DQ ONNX graph (explicit quantization)."""

    name = "onnx_int8_to_tensorrt_int8"
    source = "onnx-int8"
    target = "tensorrt-int8"


@register
class OnnxToTensorRTRTX(_TensorRTRTX):
    """Build a TensorRT-RTX engine from the ONNX model (builds on a CPU; runs on RTX GPUs)."""

    name = "onnx_to_tensorrt_rtx"
    source = "onnx"
    target = "tensorrt_rtx"


@register
class OnnxFp16ToTensorRTRTX(_TensorRTRTX):
    """Build a TensorRT-RTX fp16 engine from the fp16 ONNX graph."""

    name = "onnx_fp16_to_tensorrt_rtx_fp16"
    source = "onnx-fp16"
    target = "tensorrt_rtx-fp16"


@register
class OnnxInt8ToTensorRTRTX(_TensorRTRTX):
    """Build a TensorRT-RTX int8 engine from the Q/DQ ONNX graph."""

    name = "onnx_int8_to_tensorrt_rtx_int8"
    source = "onnx-int8"
    target = "tensorrt_rtx-int8"


EDGES = (OnnxToTensorRT, OnnxFp16ToTensorRT, OnnxInt8ToTensorRT, OnnxToTensorRTRTX, OnnxFp16ToTensorRTRTX,
         OnnxInt8ToTensorRTRTX)


def edge_for_output(output: str) -> type[Converter]:
    """The edge whose target is the key of ``formats/<key>/model.plan``."""
    from pathlib import Path

    from navigator.errors import UserInputError

    key = Path(output).parent.name
    for cls in EDGES:
        if cls.target == key:
            return cls
    raise UserInputError(f"--output {output}: expected formats/<key>/model.plan with key one of "
                         f"{', '.join(c.target for c in EDGES)}")


def _main(argv: list[str] | None = None) -> int:
    import argparse

    from navigator.errors import NavigatorError

    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--output")
    known, _ = pre.parse_known_args(argv)
    try:
        cls = edge_for_output(known.output) if known.output else OnnxToTensorRT
    except NavigatorError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    return main(cls, argv)


if __name__ == "__main__":
    raise SystemExit(_main())
