"""OpenVINO on the CPU. ``openvino-cpu`` pins fp32 (the CPU plugin would otherwise pick bf16 on
CPUs that have it, which is a precision change, not a runtime); ``openvino-default`` (provider
``default``) runs with the plugin's own default, which is what Triton's OpenVINO backend serves:
it cannot ask for f32 (its only precision key is ``HINT_BF16``). On a CPU without bf16 both are
the same, and the default runner is skipped saying so.

Options (the CPU plugin's properties of the same names): ``performance_hint`` (LATENCY, the
default here, or THROUGHPUT), ``num_streams``, ``inference_num_threads``."""

from __future__ import annotations

from navigator.runners.base import Runner, RunnerError, RunnerUnavailable

_PROPERTIES = {"performance_hint": "PERFORMANCE_HINT", "num_streams": "NUM_STREAMS",
               "inference_num_threads": "INFERENCE_NUM_THREADS"}
_HINTS = ("LATENCY", "THROUGHPUT")


class OpenVINORunner(Runner):
    name = "openvino"
    requires = ("openvino",)

    def activate_impl(self) -> None:
        import openvino as ov

        from navigator import deps

        config = {"PERFORMANCE_HINT": "LATENCY"}
        for option, prop in _PROPERTIES.items():
            if self.options.get(option) is not None:
                config[prop] = str(self.options[option])
        if config["PERFORMANCE_HINT"] not in _HINTS:
            raise RunnerError(f"openvino performance_hint {config['PERFORMANCE_HINT']!r}: use {' or '.join(_HINTS)}")
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

    @classmethod
    def tuning_candidates(cls, device: str, provider: str | None, cpus: int) -> list[dict]:
        threads = sorted({1, cpus // 2} - {0, cpus}) if cpus > 1 else []
        return [{"inference_num_threads": n} for n in threads] + [{"performance_hint": "THROUGHPUT"}]

    def settings(self) -> dict:
        precision = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        out = {"INFERENCE_PRECISION_HINT": getattr(precision, "get_type_name", lambda: str(precision))(),
               "PERFORMANCE_HINT": str(self.compiled.get_property("PERFORMANCE_HINT"))}
        for option, prop in _PROPERTIES.items():
            if self.options.get(option) is not None and prop not in out:
                out[prop] = str(self.compiled.get_property(prop))
        return out

    def infer_impl(self, feeds: dict) -> dict:
        import numpy as np

        result = self.request.infer(feeds)
        out = {}
        for port, name in zip(self.compiled.outputs, self.output_names):
            out[name] = np.array(result[port], copy=True)
        return out

    def deactivate_impl(self) -> None:
        del self.request, self.compiled
