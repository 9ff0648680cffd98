"""TensorFlow SavedModel to TF-TRT (a SavedModel with TensorRT engine ops).

Written against ``tensorflow.python.compiler.tensorrt.trt_convert.
TrtGraphConverterV2`` (convert -> build(input_fn) on the stored samples ->
save). TF-TRT is legacy: TensorFlow >= 2.18 wheels are built without TensorRT
("Tensorflow has not been built with TensorRT support") and the project was
archived in 2025, so this edge is skipped with that reason wherever such a
TensorFlow is installed (everywhere navigator's CI runs). Use savedmodel ->
onnx -> tensorrt instead. Unverified: it has never run here.
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register

PRECISION_MODES = ("FP32", "FP16")


@dataclass(frozen=True)
class TfTrtParams:
    precision_mode: str = "FP32"
    workspace_mb: int = 8192
    minimum_segment_size: int = 3
    maximum_cached_engines: int = 1
    use_dynamic_shape: bool = True        # one engine per profile built from the samples' shapes


def _tf_without_tensorrt(version: str | None) -> bool:
    """TensorFlow >= 2.18 is built without TensorRT."""
    if not version:
        return False
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 18)


@register
class SavedModelToTfTrt(Converter):
    """Convert with TF-TRT's TrtGraphConverterV2 and build engines on the stored samples."""

    name = "savedmodel_to_tf_trt"
    source = "savedmodel"
    target = "tf_trt"
    requires = ("tensorflow",)
    devices = ("cpu", "cuda")             # the reasons below say where it cannot run
    Params = TfTrtParams

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        from navigator import deps

        version = deps.version("tensorflow")
        if _tf_without_tensorrt(version):
            return (f"TF-TRT is not in TensorFlow {version}: TensorFlow >= 2.18 is built without TensorRT "
                    "(the TF-TRT project was archived in 2025); use savedmodel -> onnx -> tensorrt")
        if device != "cuda" or not deps.gpu_present():
            return "TF-TRT builds TensorRT engines on an NVIDIA GPU and this run has none"
        return None

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import tensorflow as tf
        from tensorflow.python.compiler.tensorrt import trt_convert as trt

        from navigator.workspace import npz

        p: TfTrtParams = ctx.params
        if p.precision_mode not in PRECISION_MODES:
            raise ValueError(f"precision_mode must be one of {PRECISION_MODES}")
        converter = trt.TrtGraphConverterV2(
            input_saved_model_dir=str(ctx.source), precision_mode=p.precision_mode,
            max_workspace_size_bytes=int(p.workspace_mb) << 20, minimum_segment_size=p.minimum_segment_size,
            maximum_cached_engines=p.maximum_cached_engines, use_dynamic_shape=p.use_dynamic_shape)
        converter.convert()
        names = [spec.name for spec in ctx.signature.inputs]
        samples = [npz.load(f) for f in sorted(ctx.samples_dir.glob("*.npz"))]

        def input_fn():
            for sample in samples:
                yield tuple(tf.constant(sample[n]) for n in names)

        converter.build(input_fn=input_fn)
        converter.save(str(ctx.output))
        return ConvertOutcome(exporter=f"tensorflow {tf.__version__} TF-TRT (unverified)")


if __name__ == "__main__":
    raise SystemExit(main(SavedModelToTfTrt))
