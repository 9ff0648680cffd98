"""OpenVINO on the CPU. ``openvino-cpu`` pins fp32 (the CPU plugin would otherwise pick bf16 on
CPUs that have it, which is a precision change, not a runtime); ``openvino-default`` (provider
``default``) runs with the plugin's own default, which is what Triton's OpenVINO backend serves:
it cannot ask for f32 (its only precision key is ``HINT_BF16``). On a CPU without bf16 both are
the same, and the default runner is skipped saying so."""

from __future__ import annotations

from navigator.runners.base import Runner, RunnerUnavailable


class OpenVINORunner(Runner):
    name = "openvino"
    requires = ("openvino",)

    def activate_impl(self) -> None:
        import openvino as ov

        from navigator import deps

        config = {"PERFORMANCE_HINT": "LATENCY"}
        if self.provider == "default":
            if not deps.cpu_bf16():
                raise RunnerUnavailable("OpenVINO's default inference precision on this CPU is f32, as "
                                        "openvino-cpu runs it: the served model is the verified one")
        else:
            config["INFERENCE_PRECISION_HINT"] = "f32"
        core = ov.Core()
        model = core.read_model(str(self.path))
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.input_names = [p.get_any_name() for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]

    @classmethod
    def effective_precision(cls, provider: str | None, precision: str) -> str:
        from navigator import deps

        return "bf16" if provider == "default" and precision == "fp32" and deps.cpu_bf16() else precision

    def settings(self) -> dict:
        precision = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        return {"INFERENCE_PRECISION_HINT": getattr(precision, "get_type_name", lambda: str(precision))(),
                "PERFORMANCE_HINT": str(self.compiled.get_property("PERFORMANCE_HINT"))}

    def infer_impl(self, feeds: dict) -> dict:
        import numpy as np

        result = self.request.infer(feeds)
        out = {}
        for port, name in zip(self.compiled.outputs, self.output_names):
            out[name] = np.array(result[port], copy=True)
        return out

    def deactivate_impl(self) -> None:
        del self.request, self.compiled
