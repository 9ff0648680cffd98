"""The ONNX artifact check (converters/onnx_check.py): what it rejects, what it names, what it repairs."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from navigator import deps
from navigator.converters.onnx_check import InvalidGraph, check_artifact, check_file, failing_node, repair

from ..conftest import models

needs_ort = pytest.mark.skipif(not deps.has("onnxruntime"), reason="the check loads the graph in onnxruntime")


@needs_ort
def test_erfc_is_repaired_exactly(tmp_path):
    """tf2onnx writes Keras' exact gelu with Erfc, which no ONNX opset defines: rewritten as 1 - Erf,
    the same numbers, and said so."""
    import onnxruntime as ort

    path = models.save(models.erfc_gelu(), tmp_path / "m.onnx")
    with pytest.raises(InvalidGraph, match="node 'gelu/Erfc' \\(op Erfc\\)"):
        check_file(path)
    notes = check_artifact(path)
    assert notes == ["repaired 1 Erfc node(s) that no ONNX opset defines with an exact rewrite "
                     "(Erfc(x) = 1 - Erf(x))"]
    model = onnx.load(str(path))
    assert "Erfc" not in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    w = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w"))
    h = x @ w
    gelu = 0.5 * h * np.vectorize(math.erfc)(-h / math.sqrt(2))
    np.testing.assert_allclose(y, gelu, rtol=1e-5, atol=1e-6)
    assert check_artifact(path) == []          # nothing left to repair


@needs_ort
def test_an_undefined_op_without_a_repair_is_named(tmp_path):
    model = models.erfc_gelu()
    model.graph.node[2].op_type = "Frobnicate"
    path = models.save(model, tmp_path / "m.onnx")
    with pytest.raises(InvalidGraph) as info:
        check_artifact(path)
    assert (info.value.node, info.value.op) == ("gelu/Erfc", "Frobnicate")
    assert "uses op Frobnicate, which no ONNX opset defines" in str(info.value)


@needs_ort
def test_a_type_error_names_the_node(tmp_path):
    """A Cast whose output is declared fp16 while it casts to fp32: what onnxconverter-common 1.16 leaves."""
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="the_cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InvalidGraph) as info:
        check_file(path)
    assert info.value.node == "the_cast"


def test_failing_node_parses_onnx_and_onnxruntime_messages():
    assert failing_node("[ShapeInferenceError] Inference error(s): (op_type:Cast, node name: node__to_copy_1): "
                        "[TypeInferenceError] ...") == ("node__to_copy_1", "Cast")
    assert failing_node('This is an invalid model. In Node, ("/emb/Gather", Gather, "", -1) : ...') == \
        ("/emb/Gather", "Gather")
    assert failing_node("Type Error: Type (tensor(float16)) of output arg (y) of node (mul_3) does not match")[0] \
        == "mul_3"
    assert failing_node("something else entirely") == (None, None)


def test_repair_leaves_defined_ops_alone():
    model = models.small_cnn()
    before = [n.op_type for n in model.graph.node]
    assert repair(model) == [] and [n.op_type for n in model.graph.node] == before


@pytest.mark.parametrize("shape, dtype", [((300, 1030), "float16"), ((1, 7), "float32"), ((513, 2), "float64"),
                                          ((8192, 600), "float32")])   # the last: 3 blocks of columns
def test_a_weight_is_written_transposed_in_blocks_exactly(tmp_path, shape, dtype):
    """onnx_io._write_transposed (OpenVINO's in-place weights): blocks and tiles that do not divide
    the shape still give exactly ``w.T``."""
    import numpy as np

    from navigator.converters.onnx_io import _write_transposed

    w = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    with open(tmp_path / "t.bin", "wb") as f:
        _write_transposed(f, w)
    got = np.fromfile(tmp_path / "t.bin", dtype=dtype).reshape(shape[::-1])
    np.testing.assert_array_equal(got, w.T)
