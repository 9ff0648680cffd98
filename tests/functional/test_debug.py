"""`navigator debug` names the node where a format starts to differ.

A model is built here with onnx.helper; a plugin converter (a real
converter, run in a real worker) writes a copy whose one middle node's
constant is perturbed, as key `onnx-planted`, and an OpenVINO IR of that
copy as `openvino-planted`. Verification fails for both; debug must name the
planted node, its op type and the perturbed constant among its inputs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from navigator.converters.base import Converter

pytestmark = pytest.mark.functional

PLANTED = "planted_mul"          # the node whose constant the converter perturbs
CONSTANT = "mid_scale"


def build_model(seed: int = 3) -> onnx.ModelProto:
    """x[batch, 8] -> MatMul -> Relu -> Mul(mid_scale) -> Add -> Tanh -> MatMul -> y[batch, 4]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), CONSTANT),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
             helper.make_node("Relu", ["h1"], ["a1"], name="act1"),
             helper.make_node("Mul", ["a1", CONSTANT], ["m1"], name=PLANTED),
             helper.make_node("Add", ["m1", "b"], ["h2"], name="bias_add"),
             helper.make_node("Tanh", ["h2"], ["a2"], name="act2"),
             helper.make_node("MatMul", ["a2", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "planted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


class PlantDivergence(Converter):
    """Copies the model with the planted node's constant scaled by 1.5: only that node differs."""

    name = "test_debug_plant"
    source = "onnx"
    target = "onnx-planted"
    requires = ("onnx",)

    def convert(self, ctx):
        model = onnx.load(str(ctx.source))
        for i, init in enumerate(model.graph.initializer):
            if init.name == CONSTANT:
                arr = numpy_helper.to_array(init) * np.float32(1.5)
                model.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, CONSTANT))
        onnx.save(model, str(ctx.output))


class PlantedToOpenVINO(Converter):
    """The perturbed model as an OpenVINO IR (fp32), so debug walks OpenVINO's ops."""

    name = "test_debug_plant_openvino"
    source = "onnx-planted"
    target = "openvino-planted"
    requires = ("openvino",)
    devices = ("cpu",)

    def convert(self, ctx):
        import openvino as ov

        model = ov.convert_model(str(ctx.source))
        ov.save_model(model, str(ctx.output), compress_to_fp16=False)


@pytest.fixture(scope="module")
def planted_ws(tmp_path_factory):
    import navigator
    from navigator import deps
    from navigator.converters.registry import registry

    tmp = tmp_path_factory.mktemp("debug")
    path = tmp / "planted.onnx"
    onnx.save(build_model(), str(path))
    classes = [PlantDivergence, PlantedToOpenVINO]
    for cls in classes:
        registry.register(cls)
    targets = ["onnx", "onnx-planted", "onnx-optimized"] + (["openvino-planted"] if deps.has("openvino") else [])
    try:
        result = navigator.convert(path, workdir=tmp / "wd", targets=targets, no_profile=True, device="cpu",
                                   timeout=120)
    finally:
        for cls in classes:
            registry.unregister(cls.name)
    return result


def test_the_planted_format_fails_verification(planted_ws):
    """The premise: verification catches the planted change, and only there."""
    formats = planted_ws.status.formats
    assert formats["onnx-planted"].runners["onnxruntime-cpu"].verify.status == "failed"
    assert formats["onnx"].verified and formats["onnx-optimized"].verified


def test_debug_names_the_planted_node(planted_ws, capsys):
    from navigator.cli.main import main

    code = main(["debug", str(planted_ws.workspace), "onnx-planted"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"first divergent node: {PLANTED} (Mul, node #2)" in out
    assert f"input  {CONSTANT}: constant float32 [16], DIFFERS from the reference's" in out
    assert "input  a1: within tolerance" in out
    report = json.loads((planted_ws.workspace / "report" / "debug-onnx-planted.json").read_text())
    assert report["status"] == "diverged"
    first = report["first_divergent"]
    assert (first["node"], first["op_type"]) == (PLANTED, "Mul")
    assert [i["name"] for i in first["inputs"]] == ["a1", CONSTANT]
    assert first["inputs"][0]["within_tolerance"] is True and first["inputs"][0]["max_abs"] == 0.0
    assert first["inputs"][1]["kind"] == "constant" and first["inputs"][1]["differs_from_reference"] is True
    (output,) = first["outputs"]
    assert output["name"] == "m1" and output["passed"] is False and output["max_abs"] > 1e-3
    # the fp32 row of the tolerance table, atol scaled to the tensor (the reference side of the first sample)
    assert output["atol"] == pytest.approx(3e-4 * output["scale"]) and output["rtol"] == 1e-4
    # the nodes before it agree, the ones after it inherit the error
    assert report["tensors"]["h1"]["passed"] and report["tensors"]["a1"]["passed"]
    assert report["later_divergent"] == ["bias_add", "act2", "fc2"]
    assert report["reference"]["graph_optimization_level"] == "disabled"
    assert report["compared"]["graph_optimization_level"] == "disabled"


def test_debug_of_a_good_format_finds_nothing(planted_ws):
    from navigator.tools.debug import debug_workspace

    report = debug_workspace(planted_ws.workspace, "onnx-optimized")
    assert report["status"] == "no_divergence" and report["first_divergent"] is None
    assert report["tensors_compared"] >= 1 and report["tensors_failing"] == 0


def test_looser_tolerance_moves_the_verdict(planted_ws):
    """--atol/--rtol replace the table: loose enough, nothing diverges."""
    from navigator.tools.debug import debug_workspace

    report = debug_workspace(planted_ws.workspace, "onnx-planted", atol=1e3, rtol=1e3)
    assert report["status"] == "no_divergence"


def test_debug_through_openvino_ops(planted_ws):
    from navigator import deps
    from navigator.tools.debug import debug_workspace

    if not deps.has("openvino"):
        pytest.skip("openvino is not installed")
    fs = planted_ws.status.formats["openvino-planted"]
    assert fs.runners["openvino-cpu"].verify.status == "failed"
    report = debug_workspace(planted_ws.workspace, "openvino-planted")
    assert report["status"] == "diverged", report
    first = report["first_divergent"]
    assert first["op_type"] == "Multiply"
    assert first["onnx_node"] == {"name": PLANTED, "op_type": "Mul", "model": "onnx-planted"}
    # the frontend folds the initializer into an unnamed constant: found through the ONNX node's inputs
    constant = first["inputs"][1]
    assert constant["onnx_name"] == CONSTANT and constant["differs_from_reference"] is True
    assert first["inputs"][0] == {"name": "a1", "kind": "tensor", "within_tolerance": True, "max_abs": 0.0,
                                  "max_rel": 0.0}
    assert report["compared"]["engine"] == "openvino"


def test_debug_usage_errors(planted_ws, cli):
    for args, text in ((["onnx-nope"], "no format 'onnx-nope'"),
                       (["onnx-planted", "--runner", "tensorrt-cuda"], "has no runner 'tensorrt-cuda'")):
        r = cli("debug", planted_ws.workspace, *args)
        assert r.returncode == 2, r.stderr
        assert text in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_formats_without_visible_internals_use_their_onnx_parent(planted_ws, tmp_path):
    """A TensorRT engine shows no intermediate tensors: its ONNX parent is compared instead,
    and when that parent is the reference itself, the report says nothing can be localized."""
    import shutil

    import yaml

    from navigator.tools.debug import debug_workspace

    ws = tmp_path / planted_ws.workspace.name
    shutil.copytree(planted_ws.workspace, ws)
    st = yaml.safe_load((ws / "status.yaml").read_text())
    for key, parent in (("tensorrt", "onnx-planted"), ("tensorrt-fromref", "onnx")):
        st["formats"][key] = {"format": "tensorrt", "precision": "fp32", "path": f"formats/{key}/model.plan",
                              "parent": parent, "convert": {"status": "ok"}, "runners": {}}
        (ws / "formats" / key).mkdir()
        (ws / "formats" / key / "model.plan").write_bytes(b"ftrt")
    (ws / "status.yaml").write_text(yaml.safe_dump(st, sort_keys=False))
    report = debug_workspace(ws, "tensorrt")
    assert report["status"] == "diverged" and report["compared"]["key"] == "onnx-planted"
    assert report["first_divergent"]["node"] == PLANTED
    assert any("tensorrt does not expose its internal tensors" in n for n in report["notes"])
    report = debug_workspace(ws, "tensorrt-fromref")
    assert report["status"] == "not_localized" and "is the reference itself" in report["reason"]
    assert (ws / "report" / "debug-tensorrt-fromref.json").is_file()
