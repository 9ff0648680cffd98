"""TensorFlow SavedModel to ONNX with tf2onnx (``python -m tf2onnx.convert``)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register

MAX_OPSET = 18     # the highest opset tf2onnx 1.16/1.17 supports


@dataclass(frozen=True)
class SavedModelOnnxParams:
    opset: int = 17
    signature: str = "serving_default"


def onnx_io_names(onnx_names: list[str], ours: list[str]) -> dict[str, str]:
    """Our tensor name -> its name in the ONNX file: the same, ``name:0`` (tf2onnx keeps
    TensorFlow tensor names when it cannot rename), else by position."""
    mapping = {}
    for i, name in enumerate(ours):
        if name in onnx_names:
            mapping[name] = name
        elif f"{name}:0" in onnx_names:
            mapping[name] = f"{name}:0"
        elif i < len(onnx_names):
            mapping[name] = onnx_names[i]
    return mapping


@register
class SavedModelToOnnx(Converter):
    """Convert one serving signature with tf2onnx; dynamic dims stay dynamic."""

    name = "savedmodel_to_onnx"
    source = "savedmodel"
    target = "onnx"
    requires = ("tensorflow", "tf2onnx")
    devices = ("cpu", "cuda")
    Params = SavedModelOnnxParams

    @classmethod
    def options_from_config(cls, config) -> dict:
        name = getattr(config, "signature_name", None)
        return {"signature": name} if name else {}

    @classmethod
    def reproduce_notes(cls, params, source: str, output: str, status) -> list[str]:
        return [f"# equivalent: python -m tf2onnx.convert --saved-model {source} --signature_def {params.signature} "
                f"--opset {params.opset} --output {output}"]

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnx

        from navigator import deps

        p: SavedModelOnnxParams = ctx.params
        if not 7 <= p.opset <= MAX_OPSET:
            raise ValueError(f"opset {p.opset} is outside what tf2onnx supports (7..{MAX_OPSET})")
        from navigator.execution.isolation import python_command

        cmd = [*python_command("-m", "tf2onnx.convert"), "--saved-model", str(ctx.source), "--signature_def",
               p.signature, "--opset", str(p.opset), "--output", str(ctx.output)]
        ctx.log.info("%s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        for line in (proc.stdout + proc.stderr).splitlines()[-40:]:
            ctx.log.info("tf2onnx: %s", line)
        if proc.returncode != 0 or not ctx.output.is_file():
            tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
            raise RuntimeError(f"tf2onnx failed (exit {proc.returncode}): {tail[0][:300]}")
        model = onnx.load(str(ctx.output), load_external_data=False)
        sig = ctx.signature
        names = onnx_io_names([i.name for i in model.graph.input], sig.input_names)
        names.update(onnx_io_names([o.name for o in model.graph.output], sig.output_names))
        return ConvertOutcome(exporter=f"tf2onnx {deps.version('tf2onnx')} opset {p.opset} "
                                       f"(signature {p.signature})", io_names=names)


if __name__ == "__main__":
    raise SystemExit(main(SavedModelToOnnx))
