"""Runner variants: a runner spec's ``provider`` names the runtime's mode (torch.compile with
CUDA graphs or max-autotune, onnxruntime's CUDA provider with NHWC kernels); ``--runners``
selects them by name or key, and an opt-in variant runs only when its key is named. The
settings each variant runs with are checked here without a GPU; they run on one in
benchmarks/gpu_check.py."""

from __future__ import annotations

import pytest

from navigator import formats, runners
from navigator.errors import UserInputError
from navigator.formats import RunnerSpec
from navigator.runners.base import RunnerUnavailable
from navigator.runners.onnxruntime import cuda_provider_options


def _keys(fmt: str, device: str, chosen) -> list[str]:
    return [s.key for s in runners.specs_for(fmt, device) if runners.selected(s, chosen)]


def test_cuda_lists_the_compile_and_provider_variants_and_max_autotune_only_when_named():
    assert _keys("torch", "cuda", None) == ["torch-cuda", "torch_compile-cuda", "torch_compile-cudagraphs"]
    assert _keys("torch", "cuda", ("torch_compile",)) == ["torch_compile-cuda", "torch_compile-cudagraphs"]
    assert _keys("torch", "cuda", ("torch_compile-max_autotune",)) == ["torch_compile-max_autotune"]
    assert _keys("torch", "cpu", None) == ["torch-cpu", "torch_compile-cpu"]   # the CPU keeps its two
    assert _keys("onnx", "cuda", ("onnxruntime-cuda_nhwc", "torch")) == ["onnxruntime-cuda_nhwc"]
    assert "onnxruntime-cuda_nhwc" in _keys("onnx", "cuda", ("onnxruntime",))
    assert {"torch_compile-max_autotune", "onnxruntime-cuda_nhwc"} <= formats.registry.runner_keys()


def test_an_unknown_runner_key_is_one_error_naming_the_keys(tmp_path):
    from navigator.config import from_mapping
    from navigator.pipeline.plan import plan_formats

    config = from_mapping({"runners": "onnxruntime-cuda_nchw"})

    class Source:
        key = format = "onnx"
        reference_runner = None

    with pytest.raises(UserInputError, match="unknown runner 'onnxruntime-cuda_nchw'.*onnxruntime-cuda_nhwc"):
        plan_formats(config, Source(), ["onnx"])


def test_cuda_provider_options_keep_tf32_off_and_add_nhwc_for_its_variant():
    assert cuda_provider_options(None) == {"device_id": 0, "use_tf32": 0}
    assert cuda_provider_options("cuda_nhwc", 1) == {"device_id": 1, "use_tf32": 0, "prefer_nhwc": 1}


def test_torch_compile_variants_map_to_inductor_options():
    pytest.importorskip("torch", reason="needs torch")
    from navigator.runners.torch import TorchCompileRunner

    def options(device, provider):
        return runners.create(RunnerSpec("torch_compile", device, provider), "unused").compile_options()

    assert options("cpu", None) is None                          # the CPU compiles as before
    assert options("cuda", None) == {"freezing": True}
    assert options("cuda", "cudagraphs") == {"triton.cudagraphs": True, "freezing": True}
    assert options("cuda", "max_autotune") == {"max_autotune": True, "triton.cudagraphs": True,
                                               "coordinate_descent_tuning": True, "freezing": True}
    with pytest.raises(RunnerUnavailable, match="no variant 'fast'"):
        options("cuda", "fast")
    assert TorchCompileRunner.name == "torch_compile"


def test_an_exported_program_moves_with_the_devices_burnt_into_its_nodes():
    """A ``.to(dtype)`` in forward leaves ``_assert_tensor_metadata(device=cpu)`` in the program:
    BERT's torch_export failed on CUDA with "Tensor device mismatch" until the runner moved it."""
    torch = pytest.importorskip("torch", reason="needs torch")
    from navigator.runners.torch import on_device

    class Mask(torch.nn.Module):
        def forward(self, x, m):
            return x * m.to(torch.float32)

    ep = torch.export.export(Mask(), (torch.ones(2, 3), torch.ones(2, 3, dtype=torch.int64)))
    assert on_device(ep, "cpu") is ep
    moved = on_device(ep, "meta")   # any other device: the nodes' burnt-in device follows
    asserts = [n.kwargs["device"] for n in moved.graph.nodes if "assert_tensor_metadata" in str(n.target)]
    assert asserts and all(str(d) == "meta" for d in asserts)
    out = moved.module()(torch.ones(2, 3, device="meta"), torch.ones(2, 3, dtype=torch.int64, device="meta"))
    assert out.device.type == "meta"


def test_worker_sessions_spin_briefly_and_users_sessions_as_onnxruntime_does(monkeypatch):
    """In Navigator's worker processes an idle onnxruntime pool thread spins 1 ms, not the tens of
    milliseconds by default that slowed the next contender's window in a race; a session made
    elsewhere (a user's ``runner()``) keeps onnxruntime's default."""
    from pathlib import Path

    from navigator.runners import onnxruntime as ort_runner

    model = Path(__file__).parents[2] / "examples" / "tiny_classifier.onnx"
    key = "session.intra_op.spin_duration_us"

    def entry() -> str | None:
        runner = runners.create(RunnerSpec("onnxruntime", "cpu"), model)
        runner.activate()
        try:
            return runner.session.get_session_options().get_session_config_entry(key)
        except RuntimeError:   # no such entry
            return None
        finally:
            runner.deactivate()

    monkeypatch.setattr(ort_runner, "MEASURING_SPIN_US", None)   # as in any process but a worker
    assert entry() is None
    monkeypatch.setattr(ort_runner, "MEASURING_SPIN_US", 1000)   # as navigator.execution.worker.main sets it
    assert entry() == "1000"
