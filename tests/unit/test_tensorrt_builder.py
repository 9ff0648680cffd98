"""converters/tensorrt_builder.py's pure logic: profile validation, trtexec command
lines, parameters, parser error lines; the edges' wiring (registry, planner,
config options, reproduce notes). No TensorRT needed."""

from __future__ import annotations

import types

import pytest

from navigator import config as config_mod
from navigator.converters import tensorrt_builder as tb
from navigator.errors import UserInputError

INPUTS = {"x": [-1, 3, -1, -1], "scale": [1]}


def prof(lo, opt, hi, name="x"):
    return {name: {"min": lo, "opt": opt, "max": hi}}


def test_profiles_pass_and_static_inputs_are_filled_in():
    out = tb.validate_profiles([prof([1, 3, 8, 8], [4, 3, 16, 16], [8, 3, 32, 32])], INPUTS)
    assert out == [{"x": {"min": [1, 3, 8, 8], "opt": [4, 3, 16, 16], "max": [8, 3, 32, 32]},
                    "scale": {"min": [1], "opt": [1], "max": [1]}}]
    assert tb.validate_profiles([], {"y": [2, 3]}) == []      # static network: no profile needed


@pytest.mark.parametrize("profiles, match", [
    ([], "'x' is dynamic and needs an optimization profile"),
    ([prof([1], [1], [1], name="scale")], "no min/opt/max for the dynamic input 'x'"),
    ([prof([1, 3, 8, 8], [4, 3, 16, 16], [8, 3, 32, 32]) | prof([1], [1], [1], name="y")], "names 'y'"),
    ([prof([1, 4, 8, 8], [4, 4, 16, 16], [8, 4, 32, 32])], "dim 1 is static \\(3\\)"),
    ([prof([1, 3, 8], [4, 3, 16], [8, 3, 32])], "has 3 dims"),
    ([prof([8, 3, 8, 8], [4, 3, 16, 16], [1, 3, 32, 32])], "dim 0: needs min <= opt <= max, got 8 / 4 / 1"),
    ([{"x": {"min": [1, 3, 8, 8], "max": [8, 3, 32, 32]}}], "has no opt shape"),
])
def test_profile_errors(profiles, match):
    with pytest.raises(UserInputError, match=match):
        tb.validate_profiles(profiles, INPUTS)


def test_profile_errors_name_the_profile_among_several():
    good = prof([1, 3, 8, 8], [4, 3, 16, 16], [8, 3, 32, 32])
    bad = prof([16, 3, 8, 8], [8, 3, 16, 16], [32, 3, 32, 32])
    with pytest.raises(UserInputError, match="shape profile 1: input 'x' dim 0"):
        tb.validate_profiles([good, bad], INPUTS)


PROFILES = [{"ids": {"min": [1, 4], "opt": [8, 16], "max": [32, 64]}, "in:0": {"min": [1], "opt": [8], "max": [32]}},
            {"ids": {"min": [32, 4], "opt": [64, 16], "max": [128, 64]},
             "in:0": {"min": [32], "opt": [64], "max": [128]}}]


def test_trtexec_command_tensorrt_10_and_11():
    params = tb.TensorRTParams(workspace_mb=2048, opt_level=5, plugins=["/p/libA.so"])
    common = dict(builder="tensorrt", onnx="formats/onnx-fp16/model.onnx", engine="formats/tensorrt-fp16/model.plan",
                  profiles=PROFILES[:1], precision="fp16", params=params, timing_cache="trt_cache/t.cache")
    ten = tb.trtexec_command(trt_major=10, **common)
    eleven = tb.trtexec_command(trt_major=11, **common)
    assert ten[:3] == ["trtexec", "--onnx=formats/onnx-fp16/model.onnx",
                       "--saveEngine=formats/tensorrt-fp16/model.plan"]
    assert "--minShapes=ids:1x4,'in:0':1" in ten and "--optShapes=ids:8x16,'in:0':8" in ten
    assert "--maxShapes=ids:32x64,'in:0':32" in ten
    assert "--memPoolSize=workspace:2048" in ten and "--builderOptimizationLevel=5" in ten
    assert "--staticPlugins=/p/libA.so" in ten and "--timingCacheFile=trt_cache/t.cache" in ten
    assert "--fp16" in ten and "--fp16" not in eleven            # precision flags only for TensorRT 10
    assert [a for a in ten if a != "--fp16"] == eleven
    int8 = tb.trtexec_command(**(common | {"precision": "int8"}), trt_major=10)
    assert "--int8" in int8 and "--fp16" not in int8


def test_trtexec_command_fp32_rtx_and_several_profiles():
    fp32 = tb.trtexec_command(builder="tensorrt", onnx="a.onnx", engine="a.plan", profiles=PROFILES, trt_major=10,
                              params=tb.TensorRTParams(version_compatible=True, hardware_compatibility="ampere_plus"))
    assert "--noTF32" in fp32 and "--versionCompatible" in fp32 and "--hardwareCompatibilityLevel=ampere+" in fp32
    assert sum(a.startswith("--minShapes=") for a in fp32) == 2 and "--optShapes=ids:64x16,'in:0':64" in fp32
    assert "--memPoolSize=workspace:8192" in fp32 and not any("Optimization" in a for a in fp32)
    rtx = tb.trtexec_command(builder="tensorrt_rtx", onnx="a.onnx", engine="a.plan", profiles=PROFILES[:1],
                             precision="fp16", params=tb.TensorRTParams())
    assert rtx[0] == "tensorrt_rtx" and "--fp16" not in rtx and "--noTF32" not in rtx
    scalar = tb.trtexec_command(builder="tensorrt", onnx="a", engine="b",
                                profiles=[{"s": {"min": [], "opt": [], "max": []}}], trt_major=11)
    assert "--minShapes=s:scalar" in scalar


def test_reproduce_lines_keep_the_script_runnable():
    lines = tb.reproduce_lines(builder="tensorrt", onnx="formats/onnx/model.onnx", engine="formats/tensorrt/model.plan",
                               profiles=PROFILES, precision="fp16", params=tb.TensorRTParams(plugins=["/p/l.so"]))
    commands = [x for x in lines if x.strip() and not x.startswith("#")]
    assert commands == []            # commented: reproduce.sh's live command is the python -m line
    text = "\n".join(lines)
    assert "# TensorRT 11" in text and "# TensorRT 10" in text and "--fp16" in text
    assert "2 optimization profiles" in text and "--backend-config=tensorrt,plugins=/p/l.so" in text


def test_params_validation():
    p = tb.TensorRTParams(plugins=["/a.so"], compute_capabilities=["sm89"])
    assert p.plugins == ("/a.so",) and p.compute_capabilities == ("SM89",)
    for bad in ({"opt_level": 6}, {"opt_level": True}, {"workspace_mb": 0}, {"plugins": "/a.so"},
                {"hardware_compatibility": "turing"}, {"compute_capabilities": ["SM90"]}):
        with pytest.raises(UserInputError):
            tb.TensorRTParams(**bad)


def test_parser_errors_node_by_node():
    class Err:
        def __init__(self, node, op, name, desc):
            self.node, self.node_operator, self.node_name = (lambda: node), (lambda: op), (lambda: name)
            self.desc, self.code = (lambda: desc), (lambda: "ErrorCode.INVALID_NODE")

    parser = types.SimpleNamespace(num_errors=2, get_error=lambda i: [
        Err(3, "MyOp", "", 'creator && "Plugin not found, are the plugin name, version, and namespace correct?"'),
        Err(-1, "", "", "no graph")][i])
    lines = tb.parser_errors(parser)
    assert lines[0].startswith("node 3 (MyOp): creator") and "[INVALID_NODE]" in lines[0]
    assert "--trt-plugins" in lines[0] and lines[1].startswith("the graph: no graph")


def test_edges_registered_and_planned_for_each_precision():
    from navigator.converters.planner import plan
    from navigator.converters.registry import registry

    targets = registry.targets()
    for t in ("onnx-fp16", "onnx-int8", "tensorrt", "tensorrt-fp16", "tensorrt-int8", "tensorrt_rtx",
              "tensorrt_rtx-fp16", "tensorrt_rtx-int8", "torch_tensorrt", "tf_trt"):
        assert t in targets
    planned = plan("onnx", ["tensorrt_rtx-fp16", "tensorrt-int8"], registry.edges())
    assert [(p.key, p.parent) for p in planned] == [("onnx", None), ("onnx-fp16", "onnx"),
                                                    ("tensorrt_rtx-fp16", "onnx-fp16"), ("onnx-int8", "onnx"),
                                                    ("tensorrt-int8", "onnx-int8")]


def test_edge_for_output_picks_the_class_of_the_key():
    from navigator.converters import onnx_to_tensorrt as m

    assert m.edge_for_output("formats/tensorrt_rtx-int8/model.plan") is m.OnnxInt8ToTensorRTRTX
    assert m.edge_for_output("formats/tensorrt/model.plan").precision() == "fp32"
    assert m.OnnxFp16ToTensorRT.precision() == "fp16"
    with pytest.raises(UserInputError, match="expected formats/<key>/model.plan"):
        m.edge_for_output("formats/onnx/model.onnx")


def test_cli_options_reach_the_params(tmp_path):
    from navigator.converters.onnx_to_tensorrt import OnnxToTensorRT, OnnxToTensorRTRTX

    lib = tmp_path / "libplug.so"
    lib.write_bytes(b"")
    cfg = config_mod.from_mapping({"trt_plugins": str(lib), "trt_workspace_mb": 1024, "trt_opt_level": 4,
                                   "trt_version_compatible": True})
    p = OnnxToTensorRT.params_from_config(cfg)
    assert (p.plugins, p.workspace_mb, p.opt_level, p.version_compatible) == ((str(lib.resolve()),), 1024, 4, True)
    assert OnnxToTensorRTRTX.params_from_config(cfg).version_compatible is False   # not a TensorRT-RTX option
    cfg2 = config_mod.from_mapping({"converter_params": {"onnx_to_tensorrt_rtx": {"compute_capabilities": ["SM89"]}}})
    assert OnnxToTensorRTRTX.params_from_config(cfg2).compute_capabilities == ("SM89",)
    assert OnnxToTensorRTRTX.params_from_config(config_mod.NavigatorConfig()) == tb.TensorRTParams()
    for bad in ({"trt_plugins": str(tmp_path / "missing.so")}, {"trt_opt_level": 9}, {"trt_workspace_mb": 0}):
        with pytest.raises(UserInputError):
            config_mod.from_mapping(bad)


def test_reproduce_notes_from_the_status_profiles():
    from navigator.converters.onnx_to_tensorrt import OnnxFp16ToTensorRT
    from navigator.types import ModelSignature, TensorSpec

    status = types.SimpleNamespace(signature=ModelSignature(inputs=[TensorSpec("x", "float32", [-1, 8])]),
                                   shape_profiles=[{"x": {"min": [1, 8], "opt": [4, 8], "max": [16, 8]}}])
    notes = OnnxFp16ToTensorRT.reproduce_notes(tb.TensorRTParams(), "formats/onnx-fp16/model.onnx",
                                               "formats/tensorrt-fp16/model.plan", status)
    text = "\n".join(notes)
    assert "--minShapes=x:1x8 --optShapes=x:4x8 --maxShapes=x:16x8" in text and "--fp16" in text
    status.shape_profiles = []
    assert "no trtexec command" in "\n".join(OnnxFp16ToTensorRT.reproduce_notes(tb.TensorRTParams(), "a", "b", status))


def test_tf_trt_and_torch_tensorrt_reasons(monkeypatch):
    from navigator.converters.savedmodel_to_tf_trt import SavedModelToTfTrt, _tf_without_tensorrt

    assert _tf_without_tensorrt("2.21.0") and _tf_without_tensorrt("2.18.0rc1") and not _tf_without_tensorrt("2.15.1")
    monkeypatch.setattr("navigator.deps.version", lambda m: "2.21.0")
    assert "TensorFlow >= 2.18 is built without TensorRT" in SavedModelToTfTrt.unavailable_reason("cuda")
    from navigator.converters.torch_export_to_torch_tensorrt import TorchExportToTorchTensorRT

    assert TorchExportToTorchTensorRT.requires == ("torch", "torch_tensorrt")
    assert TorchExportToTorchTensorRT.devices == ("cuda",)
