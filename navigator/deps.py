"""Which optional packages are installed, without importing them.

``has("tensorrt")`` uses :func:`importlib.util.find_spec` and the
distribution metadata, never ``import``: probing must not pay torch's or
TensorFlow's import time, nor trigger their side effects.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os

# module name -> distributions that provide it (first installed one wins)
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-cu11"),
    "tensorrt_rtx": ("tensorrt-rtx-cu13", "tensorrt-rtx-cu12", "tensorrt-rtx"),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"),
    "torch": ("torch",),
    "torch_tensorrt": ("torch-tensorrt", "torch_tensorrt"),
    "onnx": ("onnx",),
    "onnx_graphsurgeon": ("onnx-graphsurgeon", "onnx_graphsurgeon"),
    "onnxslim": ("onnxslim",),
    "onnxscript": ("onnxscript",),
    "openvino": ("openvino",),
    "polygraphy": ("polygraphy",),
    "tf2onnx": ("tf2onnx",),
    "tritonclient": ("tritonclient",),
    "numpy": ("numpy",),
    "yaml": ("pyyaml", "PyYAML"),
    "google.protobuf": ("protobuf",),
    "rich": ("rich",),
    "transformers": ("transformers",),
    "tokenizers": ("tokenizers",),
    "safetensors": ("safetensors",),
}

# The packages whose versions go into status.yaml's environment.
RECORDED = ("numpy", "onnx", "onnxruntime", "onnx_graphsurgeon", "onnxslim", "polygraphy", "openvino",
            "torch", "onnxscript", "tensorflow", "tf2onnx", "tensorrt", "tensorrt_rtx", "google.protobuf",
            "transformers", "tokenizers")


@functools.lru_cache(maxsize=None)
def has(module: str) -> bool:
    """True when ``module`` can be imported (found on sys.path), without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        # find_spec of "a.b" imports "a"; a broken parent counts as missing.
        return False


@functools.lru_cache(maxsize=None)
def version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module``, or None."""
    if not has(module):
        return None
    for dist in _DISTRIBUTIONS.get(module, (module,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def versions(modules: tuple[str, ...] = RECORDED) -> dict[str, str]:
    """Versions of the installed ones among ``modules`` (display names, e.g. protobuf)."""
    out = {}
    for module in modules:
        v = version(module)
        if v is not None:
            out[display_name(module)] = v
    return out


def display_name(module: str) -> str:
    """The name :func:`versions` records ``module`` under (its first distribution's)."""
    return _DISTRIBUTIONS.get(module, (module,))[0]


def missing(requires: tuple[str, ...]) -> list[str]:
    """The modules of ``requires`` that are not installed."""
    return [m for m in requires if not has(m)]


def tensorrt_module() -> str | None:
    """The TensorRT flavour to build engines with: ``tensorrt`` when installed, else
    ``tensorrt_rtx``, else None. ``NAVIGATOR_TENSORRT=tensorrt_rtx`` forces RTX."""
    forced = os.environ.get("NAVIGATOR_TENSORRT")
    if forced in ("tensorrt", "tensorrt_rtx"):
        return forced if has(forced) else None
    for module in ("tensorrt", "tensorrt_rtx"):
        if has(module):
            return module
    return None


def gpu_present() -> bool:
    """True when the NVIDIA driver reports a GPU. Reads /proc; never initialises CUDA."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return os.path.exists("/dev/nvidia0")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere or when unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_bf16() -> bool:
    """The CPU computes bf16 natively (AVX512_BF16 or AMX): OpenVINO's CPU plugin then defaults to
    bf16 inference, and Triton's OpenVINO backend cannot ask it for f32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())

