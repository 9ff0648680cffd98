"""Unit tests for navigator.deps: probing packages without importing them."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest

from navigator import deps


def test_has_installed_and_missing():
    assert deps.has("numpy") is True
    assert deps.has("onnx") is True
    assert deps.has("navigator_no_such_module_xyz") is False
    assert deps.has("navigator_no_such_module_xyz.sub") is False
    assert deps.has("numpy.no_such_sub") is False


def test_missing():
    assert deps.missing(("numpy", "navigator_no_such_module_xyz")) == ["navigator_no_such_module_xyz"]
    assert deps.missing(()) == []


@pytest.mark.skipif(not deps.has("openvino"), reason="needs openvino installed (extra 'openvino') to show that "
                                                    "has() finds it without importing it")
def test_has_never_imports():
    code = textwrap.dedent("""
        import sys
        from navigator import deps
        print(deps.has("openvino"), deps.has("onnxruntime"), deps.version("openvino") is not None)
        print(sorted(m for m in ("openvino", "onnxruntime", "onnx") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True True True", "[]"]


def test_version_is_the_distribution_version():
    assert deps.version("numpy") == importlib.metadata.version("numpy")
    assert deps.version("onnxruntime") == importlib.metadata.version("onnxruntime")
    assert deps.version("yaml") == importlib.metadata.version("pyyaml")
    assert deps.version("google.protobuf") == importlib.metadata.version("protobuf")
    assert deps.version("navigator_no_such_module_xyz") is None


def test_versions_uses_distribution_names():
    v = deps.versions(("numpy", "google.protobuf", "navigator_no_such_module_xyz"))
    assert v == {"numpy": importlib.metadata.version("numpy"), "protobuf": importlib.metadata.version("protobuf")}


def test_gpu_present_respects_cuda_visible_devices(monkeypatch):
    # pretend the driver reports one GPU
    monkeypatch.setattr(deps.os, "listdir", lambda p: ["0000:01:00.0"] if p == "/proc/driver/nvidia/gpus" else [])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert deps.gpu_present() is True
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert deps.gpu_present() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert deps.gpu_present() is False


def test_tensorrt_module_forced(monkeypatch):
    monkeypatch.setenv("NAVIGATOR_TENSORRT", "tensorrt_rtx")
    assert deps.tensorrt_module() == ("tensorrt_rtx" if deps.has("tensorrt_rtx") else None)
