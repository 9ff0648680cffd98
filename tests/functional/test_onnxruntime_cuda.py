"""onnxruntime on CUDA (issue #22): the CUDA execution provider with TF32 off, I/O binding for
profiling, the TensorRT execution provider skipped with its reason. The GPU cases need
onnxruntime-gpu and a CUDA device and skip with that reason elsewhere; the refusals run here."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.runners import create
from navigator.runners.base import RunnerUnavailable

pytestmark = pytest.mark.functional


def _cuda_ep() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


needs_cuda = pytest.mark.skipif(not _cuda_ep(), reason="needs onnxruntime-gpu (CUDAExecutionProvider) and a CUDA GPU; "
                                                        "this onnxruntime build has none")


def _spec(provider):
    from navigator.formats.descriptor import RunnerSpec

    return RunnerSpec("onnxruntime", "cuda", provider)


@pytest.mark.skipif(_cuda_ep(), reason="checks the refusal on a build without CUDA")
@pytest.mark.parametrize("provider, needle", [(None, "CUDAExecutionProvider"),
                                              ("tensorrt", "TensorrtExecutionProvider")])
def test_without_the_provider_the_runner_is_skipped_with_the_reason(onnx_model, provider, needle):
    runner = create(_spec(provider), onnx_model())
    with pytest.raises(RunnerUnavailable, match=needle):
        runner.activate()


def test_profiling_on_the_cpu_is_host_io(onnx_model):
    from navigator.formats.descriptor import RunnerSpec

    with create(RunnerSpec("onnxruntime", "cpu", None), onnx_model()) as runner:
        infer, io = runner.profiling_infer()
        assert io == "host" and infer == runner.infer


@needs_cuda
def test_cuda_matches_the_cpu_and_profiles_device_resident(onnx_model):
    from navigator.formats.descriptor import RunnerSpec

    model = onnx_model()
    feeds = {"ids": np.random.default_rng(0).integers(0, 1000, size=(8, 16)).astype(np.int64)}
    with create(RunnerSpec("onnxruntime", "cpu", None), model) as cpu:
        ref = cpu.infer(feeds)
    with create(_spec(None), model) as gpu:
        assert gpu.session.get_providers()[0] == "CUDAExecutionProvider"
        assert gpu.session.get_provider_options()["CUDAExecutionProvider"]["use_tf32"] == "0"
        out = gpu.infer(feeds)
        for name, value in ref.items():
            np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=3e-4 * float(np.abs(value).max()))
        infer, io = gpu.profiling_infer()
        assert io == "device"
        infer(feeds)
        infer(feeds)
