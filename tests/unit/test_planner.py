"""Unit tests for navigator.converters.planner: paths from the source to each target."""

from __future__ import annotations

import pytest

from navigator.converters.base import Converter
from navigator.converters.planner import PlannedFormat, plan
from navigator.converters.registry import ConverterRegistry
from navigator.errors import UserInputError


def _registry():
    r = ConverterRegistry(builtins=(), entry_point_group=None)

    @r.register
    class TorchToOnnx(Converter):
        name, source, target = "torch_to_onnx", "torch", "onnx"

    @r.register
    class TorchToTorchscript(Converter):
        name, source, target = "torch_to_torchscript", "torch", "torchscript"

    @r.register
    class OnnxToOptimized(Converter):
        name, source, target = "onnx_to_onnx_optimized", "onnx", "onnx-optimized"

    @r.register
    class OnnxToFp16(Converter):
        name, source, target = "onnx_to_onnx_fp16", "onnx", "onnx-fp16"

    @r.register
    class Fp16ToTrt(Converter):
        name, source, target = "onnx_fp16_to_tensorrt_fp16", "onnx-fp16", "tensorrt-fp16"

    @r.register
    class OptimizedToOpenvino(Converter):
        name, source, target = "onnx_optimized_to_openvino", "onnx-optimized", "openvino"

    @r.register
    class SavedModelToOnnx(Converter):
        name, source, target = "savedmodel_to_onnx", "savedmodel", "onnx"

    return r


def rows(planned):
    return [(p.key, p.parent, p.converter.name if p.converter else None, p.requested) for p in planned]


def test_parents_first_and_shared_paths_merged():
    r = _registry()
    planned = plan("torch", ["tensorrt-fp16", "openvino", "onnx"], r.edges())
    assert rows(planned) == [
        ("torch", None, None, False),
        ("onnx", "torch", "torch_to_onnx", True),
        ("onnx-fp16", "onnx", "onnx_to_onnx_fp16", False),
        ("tensorrt-fp16", "onnx-fp16", "onnx_fp16_to_tensorrt_fp16", True),
        ("onnx-optimized", "onnx", "onnx_to_onnx_optimized", False),
        ("openvino", "onnx-optimized", "onnx_optimized_to_openvino", True),
    ]
    keys = [p.key for p in planned]
    for p in planned:                    # every parent comes before its child
        if p.parent is not None:
            assert keys.index(p.parent) < keys.index(p.key)
    assert len(keys) == len(set(keys))   # shared prefixes appear once


def test_source_itself_and_duplicates():
    r = _registry()
    planned = plan("onnx", ["onnx", "onnx-optimized", "onnx-optimized"], r.edges())
    assert planned == [PlannedFormat("onnx", None, None, True),
                       PlannedFormat("onnx-optimized", "onnx", r.get("onnx_to_onnx_optimized"), True)]


def test_shortest_path_is_chosen():
    r = _registry()

    @r.register
    class Direct(Converter):
        name, source, target = "torch_to_openvino", "torch", "openvino"

    assert rows(plan("torch", ["openvino"], r.edges())) == [
        ("torch", None, None, False), ("openvino", "torch", "torch_to_openvino", True)]


def test_unreachable_target_lists_valid_targets():
    r = _registry()
    with pytest.raises(UserInputError) as e:
        plan("savedmodel", ["torchscript"], r.edges())
    assert str(e.value) == ("unknown or unreachable target 'torchscript' from a savedmodel source; valid targets: "
                            "onnx, onnx-fp16, onnx-optimized, openvino, savedmodel, tensorrt-fp16")
    with pytest.raises(UserInputError) as e:
        plan("onnx", ["onnx-optimized", "tensorrt"], r.edges())
    assert str(e.value).startswith("unknown or unreachable target 'tensorrt' from a onnx source; valid targets: "
                                   "onnx, onnx-fp16, onnx-optimized, openvino, tensorrt-fp16")


def test_plan_uses_the_winning_edge():
    r = ConverterRegistry(builtins=(), entry_point_group=None)
    r.register(type("Export", (Converter,), {"name": "torch_to_onnx", "source": "torch", "target": "onnx"}),
               origin="builtin")
    r.register(type("Opt", (Converter,), {"name": "onnx_to_onnx_optimized", "source": "onnx",
                                          "target": "onnx-optimized"}), origin="builtin")
    User = r.register(type("UserOpt", (Converter,), {"name": "my_opt", "source": "onnx",
                                                      "target": "onnx-optimized"}))
    assert rows(plan("torch", ["onnx-optimized"], r.edges())) == [
        ("torch", None, None, False), ("onnx", "torch", "torch_to_onnx", False),
        ("onnx-optimized", "onnx", "my_opt", True)]
    assert plan("torch", ["onnx-optimized"], r.edges())[-1].converter is User
