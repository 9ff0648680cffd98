"""OpenVINO on the CPU, in fp32 (the CPU plugin would otherwise pick bf16 on
CPUs that have it, which is a precision change, not a runtime)."""

from __future__ import annotations

from navigator.runners.base import Runner


class OpenVINORunner(Runner):
    name = "openvino"
    requires = ("openvino",)

    def activate_impl(self) -> None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(self.path))
        config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.input_names = [p.get_any_name() for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]

    def infer_impl(self, feeds: dict) -> dict:
        import numpy as np

        result = self.request.infer(feeds)
        out = {}
        for port, name in zip(self.compiled.outputs, self.output_names):
            out[name] = np.array(result[port], copy=True)
        return out

    def deactivate_impl(self) -> None:
        del self.request, self.compiled
