"""onnxruntime: CPU, CUDA and TensorRT execution providers."""

from __future__ import annotations

from navigator.runners.base import Runner, RunnerUnavailable

_PROVIDERS = {
    ("cpu", None): ["CPUExecutionProvider"],
    ("cuda", None): ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cuda", "cuda"): ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cuda", "tensorrt"): ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cpu", "cpu"): ["CPUExecutionProvider"],
}

_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


class OnnxruntimeRunner(Runner):
    """Options: ``graph_optimization_level`` (disabled | basic | extended | all,
    default all), ``intra_op_num_threads``, ``trt_fp16`` (TensorRT EP)."""

    name = "onnxruntime"
    requires = ("onnxruntime",)

    def activate_impl(self) -> None:
        import onnxruntime as ort

        providers = _PROVIDERS.get((self.device, self.provider))
        if providers is None:
            raise RunnerUnavailable(f"onnxruntime has no provider {self.provider!r} on device {self.device!r}")
        available = ort.get_available_providers()
        if providers[0] not in available:
            raise RunnerUnavailable(f"{providers[0]} is not available in this onnxruntime build "
                                    f"(available: {', '.join(available)}); install onnxruntime-gpu for CUDA")
        options = ort.SessionOptions()
        level = self.options.get("graph_optimization_level", "all")
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        options.log_severity_level = 3
        if self.options.get("intra_op_num_threads"):
            options.intra_op_num_threads = int(self.options["intra_op_num_threads"])
        provider_options = []
        for p in providers:
            if p == "TensorrtExecutionProvider":
                provider_options.append({"trt_fp16_enable": bool(self.options.get("trt_fp16", False)),
                                         "trt_engine_cache_enable": True,
                                         "trt_engine_cache_path": str(self.path.parent / "ort_trt_cache")})
            else:
                provider_options.append({})
        self.session = ort.InferenceSession(str(self.path), sess_options=options, providers=providers,
                                            provider_options=provider_options)
        used = self.session.get_providers()
        if used[0] != providers[0]:
            raise RunnerUnavailable(f"onnxruntime fell back to {used[0]} instead of {providers[0]}")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def infer_impl(self, feeds: dict) -> dict:
        values = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, values))

    def deactivate_impl(self) -> None:
        del self.session
