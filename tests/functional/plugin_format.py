"""An out-of-tree format, as a plugin package would ship it: ONNX Runtime's ORT format.

The test copies this file into a temporary site folder whose ``entry_points.txt``
registers it in the groups ``navigator.formats`` (the Format record) and
``navigator.converters`` (the onnx -> ort edge); nothing in Navigator's tree names it.
The runner is real onnxruntime loading the ``.ort`` file; Triton serves the format
through the Python backend with this runner class (``python_loader="runner"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome
from navigator.formats import Format, RunnerSpec
from navigator.runners.base import Runner

FORMAT = Format(
    "ort", "model.ort", preference=5, precisions=("fp32",),
    runners={"cpu": (RunnerSpec("ort_format", "cpu"),), "cuda": ()},
    unverifiable={"cuda": "the plugin's ORT-format runner runs on the CPU only"},
    python_loader="runner", python_packages=("onnxruntime",),
    runner_classes={"ort_format": "navplugin_fmt:OrtFormatRunner"})


class OrtFormatRunner(Runner):
    """onnxruntime on an ORT-format model (``.ort``), CPU execution provider."""

    name = "ort_format"
    requires = ("onnxruntime",)

    def activate_impl(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.add_session_config_entry("session.load_model_format", "ORT")
        self.session = ort.InferenceSession(str(self.path), sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def infer_impl(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))

    def deactivate_impl(self) -> None:
        del self.session


@dataclass(frozen=True)
class OnnxToOrtParams:
    optimization: str = "basic"      # ORT files keep the optimisations applied when they were saved


class OnnxToOrt(Converter):
    """Save the model in ONNX Runtime's ORT format (SessionOptions.optimized_model_filepath)."""

    name = "onnx_to_ort"
    source = "onnx"
    target = "ort"
    requires = ("onnxruntime",)
    devices = ("cpu", "cuda")
    Params = OnnxToOrtParams

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(ctx.output)
        options.add_session_config_entry("session.save_model_format", "ORT")
        ort.InferenceSession(str(ctx.source), sess_options=options, providers=["CPUExecutionProvider"])
        return ConvertOutcome(exporter=f"onnxruntime {ort.__version__} (ORT format)")
