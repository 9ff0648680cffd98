"""onnxruntime: CPU, CUDA and TensorRT execution providers."""

from __future__ import annotations

from navigator.runners.base import Runner, RunnerError, RunnerUnavailable

_PROVIDERS = {
    ("cpu", None): ["CPUExecutionProvider"],
    ("cuda", None): ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cuda", "cuda"): ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cuda", "cuda_nhwc"): ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cuda", "tensorrt"): ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    ("cpu", "cpu"): ["CPUExecutionProvider"],
}

_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}
_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
# how long an idle pool thread spins before it sleeps, in Navigator's worker processes (None: onnxruntime's
# default): back-to-back calls keep spinning as they would in a server, while a session measured right
# after another's last call no longer shares the cores with that one's threads, which spin on for tens of
# milliseconds by default (a race's and a tuning's interleaved windows; benchmarks/results/speed_cpu.md)
MEASURING_SPIN_US: int | None = None


def cuda_provider_options(provider: str | None, device_id: int = 0) -> dict:
    """The CUDA execution provider's options for a runner variant: TF32 off (an fp32 graph is
    held to fp32 tolerances, as the torch runners do); ``cuda_nhwc`` also prefers NHWC
    kernels (tensor-core convolutions without layout transposes around each one)."""
    options = {"device_id": device_id, "use_tf32": 0}
    if provider == "cuda_nhwc":
        options["prefer_nhwc"] = 1
    return options


def load_cuda_libraries() -> None:
    """Make the CUDA and cuDNN libraries of the NVIDIA pip packages loadable before a CUDA
    session is made. onnxruntime-gpu dlopens them by soname; torch, when installed, loads the
    same ones (its import is the documented way); else ``preload_dlls`` from the folders of
    the ``nvidia`` packages (its default folder is wrong when onnxruntime is installed apart
    from them, as with ``pip install --target``)."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (loads libcudart, cuBLAS, cuDNN …)
        return
    import onnxruntime as ort

    spec = importlib.util.find_spec("nvidia")
    if spec is None or not hasattr(ort, "preload_dlls"):
        return
    from pathlib import Path

    for root in spec.submodule_search_locations or []:
        for sub, kinds in (("cu13/lib", {"cudnn": False}), ("cudnn/lib", {"cuda": False})):
            folder = Path(root) / sub
            if folder.is_dir():
                ort.preload_dlls(msvc=False, directory=str(folder), **kinds)


class OnnxruntimeRunner(Runner):
    """Options: ``graph_optimization_level`` (disabled | basic | extended | all,
    default all), ``intra_op_num_threads`` / ``inter_op_num_threads`` (0: onnxruntime's default),
    ``execution_mode`` (sequential | parallel), ``trt_fp16`` (TensorRT EP), ``device_id`` (CUDA).
    Providers: ``cpu``; ``cuda``; ``cuda_nhwc`` (the CUDA provider with ``prefer_nhwc``);
    ``tensorrt``.

    On CUDA, TF32 is off (:func:`cuda_provider_options`), a silent fall-back to the CPU is
    refused, and profiling binds the inputs and outputs on the GPU once (I/O binding,
    ``io: device``), so the figure is the model's, not the PCIe copies'."""

    name = "onnxruntime"
    requires = ("onnxruntime",)
    # its threads' idle spin is capped at 1 ms where it is measured (MEASURING_SPIN_US): 5 ms reads the
    # ratios 20 ms did (benchmarks/tuning_rewarm.py)
    rewarm_s = 0.005

    def activate_impl(self) -> None:
        import onnxruntime as ort

        providers = _PROVIDERS.get((self.device, self.provider))
        if providers is None:
            raise RunnerUnavailable(f"onnxruntime has no provider {self.provider!r} on device {self.device!r}")
        if "CUDAExecutionProvider" in providers:
            load_cuda_libraries()
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
        if self.options.get("inter_op_num_threads"):
            options.inter_op_num_threads = int(self.options["inter_op_num_threads"])
        mode = self.options.get("execution_mode", "sequential")
        if mode not in _MODES:
            raise RunnerError(f"onnxruntime execution_mode {mode!r}: use {' or '.join(_MODES)}")
        options.execution_mode = getattr(ort.ExecutionMode, _MODES[mode])
        if MEASURING_SPIN_US is not None and self.device == "cpu":   # a key older releases ignore
            for pool in ("intra_op", "inter_op"):
                options.add_session_config_entry(f"session.{pool}.spin_duration_us", str(MEASURING_SPIN_US))
        provider_options = []
        for p in providers:
            if p == "TensorrtExecutionProvider":
                provider_options.append({"trt_fp16_enable": bool(self.options.get("trt_fp16", False)),
                                         "trt_engine_cache_enable": True,
                                         "trt_engine_cache_path": str(self.path.parent / "ort_trt_cache")})
            elif p == "CUDAExecutionProvider":
                provider_options.append(cuda_provider_options(self.provider, int(self.options.get("device_id", 0))))
            else:
                provider_options.append({})
        self.session = ort.InferenceSession(str(self.path), sess_options=options, providers=providers,
                                            provider_options=provider_options)
        used = self.session.get_providers()
        if used[0] != providers[0]:
            raise RunnerUnavailable(f"onnxruntime fell back to {used[0]} instead of {providers[0]}")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    @classmethod
    def tuning_candidates(cls, device: str, provider: str | None, cpus: int) -> list[dict]:
        if device != "cpu":
            return []
        threads = sorted({1, cpus // 2} - {0, cpus}) if cpus > 1 else []
        return [{"intra_op_num_threads": n} for n in threads] + [{"execution_mode": "parallel"}]

    def settings(self) -> dict:
        out = {"graph_optimization_level": self.options.get("graph_optimization_level", "all"),
               "providers": self.session.get_providers()}
        for key in ("intra_op_num_threads", "inter_op_num_threads", "execution_mode"):
            if self.options.get(key):
                out[key] = self.options[key]
        cuda = self.session.get_provider_options().get("CUDAExecutionProvider")
        if cuda:
            out["cuda"] = {k: cuda[k] for k in ("use_tf32", "prefer_nhwc") if k in cuda}
        return out

    def infer_impl(self, feeds: dict) -> dict:
        values = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, values))

    def profiling_infer(self):
        """``(infer, io)`` for the profiler. On CUDA: each feeds dict is copied to the GPU once
        and bound with the outputs on the GPU (I/O binding); every call runs on those buffers
        (``run_with_iobinding`` returns when the GPU is done) and nothing is copied back
        (``io: device``). Elsewhere: :meth:`infer` itself (``io: host``)."""
        if self.device != "cuda":
            return self.infer, "host"
        import numpy as np
        import onnxruntime as ort

        device_id = int(self.options.get("device_id", 0))
        held: dict = {}

        def infer(feeds: dict) -> None:
            if held.get("feeds") is not feeds:
                binding = self.session.io_binding()
                values = {}
                for name in self.input_names:
                    values[name] = ort.OrtValue.ortvalue_from_numpy(np.require(feeds[name], requirements="C"), "cuda",
                                                                    device_id)
                    binding.bind_ortvalue_input(name, values[name])
                for name in self.output_names:
                    binding.bind_output(name, "cuda", device_id)
                held.update(feeds=feeds, binding=binding, values=values)   # the values outlive the binding
            self.session.run_with_iobinding(held["binding"])

        return infer, "device"

    def deactivate_impl(self) -> None:
        del self.session
