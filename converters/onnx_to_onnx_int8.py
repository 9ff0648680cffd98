"""ONNX fp32 to int8 Q/DQ: onnxruntime's static quantization, calibrated on
the workspace's stored samples (``samples/inputs/*.npz``).

The defaults make a graph TensorRT builds as an explicitly quantized engine
(onnx-int8 -> tensorrt-int8): QDQ format, symmetric int8 activations and
weights, weights per channel, biases left in fp32 (TensorRT rejects the int32
DequantizeLinear that a quantized bias needs: measured with TensorRT-RTX 1.7).

**Which nodes are quantized** (the rule for accuracy-critical arithmetic): only the
compute-heavy ops, ``Conv``, ``MatMul`` and ``Gemm``, and every other op stays in
float. Quantizing every op type put Q/DQ pairs on the additive attention mask
(float32 min: a scale of 2.7e36, every attention score rounded to 0 or -3.4e38, BERT's
logits off by 93% of their scale), on T5's relative-position buckets (log(0) = -inf
through Q/DQ became NaN, then INT64_MIN as an index) and on detection heads' anchor
arithmetic (benchmarks/results/zoo_cpu.md, F1/F2); with the compute ops alone the same
models stay within 4-14% of the output scale. ``op_types_to_quantize`` widens it.

**This CPU.** onnxruntime's u8s8 int8 kernels can saturate on x86 CPUs without VNNI
(AVX2 only), as its quantization docs say: there ``reduce_range`` (7-bit weights) is
used unless the parameter says otherwise, and the choice is recorded in the exporter
line. TensorRT ignores it beyond the scales it produces.
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register
from navigator.errors import UserInputError

CALIBRATION_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


@dataclass(frozen=True)
class OnnxInt8Params:
    per_channel: bool = True              # per output channel weight scales (Conv, MatMul/Gemm)
    calibrate_method: str = "minmax"      # minmax | entropy | percentile
    symmetric_activations: bool = True    # zero point 0: what TensorRT supports
    quantize_bias: bool = False           # int32 bias DQ: TensorRT cannot parse it
    op_types_to_quantize: tuple = ("Conv", "MatMul", "Gemm")   # () = every op type onnxruntime quantizes
    nodes_to_exclude: tuple = ()          # node names kept in fp32
    max_calibration_batches: int | None = None   # None = every stored batch (of calibration_samples)
    # stored samples to calibrate on ("000", ...; () = all); the run sets it to a part of them and
    # verifies the graph on the others (navigator.pipeline.tasks.calibration_split)
    calibration_samples: tuple = ()
    reduce_range: bool | None = None      # 7-bit weights; None = on x86 CPUs without VNNI (see the docstring)

    def __post_init__(self):
        if self.calibrate_method not in CALIBRATION_METHODS:
            raise UserInputError(f"calibrate_method must be one of {', '.join(CALIBRATION_METHODS)}, got "
                                 f"{self.calibrate_method!r}")
        if self.max_calibration_batches is not None and (not isinstance(self.max_calibration_batches, int)
                                                         or self.max_calibration_batches < 1):
            raise UserInputError("max_calibration_batches must be >= 1")
        object.__setattr__(self, "op_types_to_quantize", tuple(self.op_types_to_quantize))
        object.__setattr__(self, "nodes_to_exclude", tuple(self.nodes_to_exclude))
        object.__setattr__(self, "calibration_samples", tuple(str(x) for x in self.calibration_samples))


def calibration_batches(samples_dir, input_names: list[str], limit: int | None = None,
                        only: tuple = ()) -> list[dict]:
    """The stored sample batches (``only`` these stems, when given) as feeds for the graph's inputs."""
    from pathlib import Path

    from navigator.workspace import npz

    files = sorted(Path(samples_dir).glob("*.npz")) if samples_dir else []
    if only:
        files = [f for f in files if f.stem in only]
    if not files:
        raise UserInputError(f"int8 calibration needs stored samples; {samples_dir}/*.npz holds none"
                             + (f" of {', '.join(only)}" if only else ""))
    batches = []
    for path in files[:limit]:
        sample = npz.load(path)
        missing = [n for n in input_names if n not in sample]
        if missing:
            raise UserInputError(f"sample {path.name} has no input {missing[0]!r} for int8 calibration")
        batches.append({n: sample[n] for n in input_names})
    return batches


def cpu_has_vnni() -> bool | None:
    """True when this x86 CPU has VNNI (AVX-512 VNNI, AVX-VNNI or AMX int8), False when it is an x86
    CPU without, None when it cannot tell (not Linux x86: the question does not apply)."""
    import platform

    from navigator.deps import cpu_flags

    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return None
    flags = cpu_flags()
    if not flags:
        return None
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)


@register
class OnnxToOnnxInt8(Converter):
    """Insert Q/DQ nodes by static quantization calibrated on the stored samples."""

    name = "onnx_to_onnx_int8"
    source = "onnx"
    target = "onnx-int8"
    requires = ("onnx", "onnxruntime")
    devices = ("cpu", "cuda")
    Params = OnnxInt8Params
    calibrates = True

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnx
        import onnxruntime
        from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)

        from navigator.converters.onnx_io import TWO_GB, model_size

        p: OnnxInt8Params = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=False)
        initializers = {i.name for i in model.graph.initializer}
        input_names = [i.name for i in model.graph.input if i.name not in initializers]
        batches = calibration_batches(ctx.samples_dir, input_names, p.max_calibration_batches, p.calibration_samples)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self._it = iter(batches)

            def get_next(self):
                return next(self._it, None)

        large = model_size(model) > TWO_GB      # counts external tensors by their recorded length
        ctx.output.parent.mkdir(parents=True, exist_ok=True)
        reduce_range = p.reduce_range if p.reduce_range is not None else cpu_has_vnni() is False
        quantize_static(
            str(ctx.source), str(ctx.output), Reader(), quant_format=QuantFormat.QDQ, per_channel=p.per_channel,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            op_types_to_quantize=list(p.op_types_to_quantize) or None,
            nodes_to_exclude=list(p.nodes_to_exclude) or None, use_external_data_format=large,
            calibrate_method=getattr(CalibrationMethod, CALIBRATION_METHODS[p.calibrate_method]),
            calibration_providers=["CPUExecutionProvider"], reduce_range=reduce_range,
            extra_options={"ActivationSymmetric": p.symmetric_activations, "WeightSymmetric": True,
                           "QuantizeBias": p.quantize_bias})
        out = onnx.load(str(ctx.output), load_external_data=False)
        qdq = sum(1 for n in out.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear"))
        if qdq == 0:
            raise RuntimeError("static quantization inserted no Q/DQ node: no op of the graph was quantized")
        ctx.log.info("int8: %d Q/DQ nodes, calibrated on %d batches (%s, per_channel=%s, reduce_range=%s, ops %s)",
                     qdq, len(batches), p.calibrate_method, p.per_channel, reduce_range,
                     ", ".join(p.op_types_to_quantize) or "all")
        onnx.checker.check_model(str(ctx.output))
        why = " (this CPU has no VNNI)" if reduce_range and p.reduce_range is None else ""
        return ConvertOutcome(exporter=f"onnxruntime {onnxruntime.__version__} quantize_static, ops "
                                       f"{'/'.join(p.op_types_to_quantize) or 'all'}, reduce_range={reduce_range}{why}")


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxInt8))
