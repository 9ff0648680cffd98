"""The code paths of models with external data (> 2 GB ones), on small models: onnx-optimized
never loads the weights that stay external (it copies their file beside its output) and
reads in only the small ones it may fold; the result verifies and lays out for Triton.
benchmarks/large_model.py measures the same paths on a 2.25 GiB model."""

from __future__ import annotations

import onnx
import pytest

import navigator
from navigator.workspace import npz

from ..conftest import models

pytestmark = pytest.mark.functional

FAST = dict(no_profile=True, device="cpu", timeout=120)


def _external_model(tmp_path):
    src = tmp_path / "src" / "mlp.onnx"
    src.parent.mkdir()
    onnx.save_model(models.foldable_mlp(), str(src), save_as_external_data=True, location="mlp.onnx.data",
                    size_threshold=0)
    return src


def _external_names(path) -> set[str]:
    model = onnx.load(str(path), load_external_data=False)
    return {t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}


def test_small_external_tensors_are_read_in_and_folded(tmp_path):
    src = _external_model(tmp_path)
    result = navigator.convert(src, workdir=tmp_path / "wd", targets=["onnx", "onnx-optimized"], **FAST)
    assert result.ok, result.failures
    fs = result.status.formats["onnx-optimized"]
    assert fs.convert.exporter == "graphsurgeon (external data kept)"
    out = result.workspace / fs.path
    model = onnx.load(str(out), load_external_data=False)
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Relu"]   # w1 * 2 folded
    assert _external_names(out) == set()


def test_large_external_tensors_stay_in_their_copied_file(tmp_path):
    src = _external_model(tmp_path)
    params = {"onnx_to_onnx_optimized": {"fold_size_threshold": 64}}   # w1 (256 bytes) counts as large here
    result = navigator.convert(src, workdir=tmp_path / "wd", targets=["onnx", "onnx-optimized"],
                               converter_params=params, **FAST)
    assert result.ok, result.failures
    fs = result.status.formats["onnx-optimized"]
    out = result.workspace / fs.path
    assert _external_names(out) == {"w1"}
    data = out.parent / "mlp.onnx.data"
    parent_data = result.workspace / "formats" / "onnx" / "mlp.onnx.data"
    assert data.is_file()
    assert data.read_bytes() == parent_data.read_bytes()   # copied as it is, never rewritten
    assert result.status.formats["onnx-optimized"].runners["onnxruntime-cpu"].verify.status == "ok"
    sample = npz.load(result.workspace / "samples/inputs/000.npz")
    with result.runner("onnx-optimized") as run:
        got = run(sample)
    ref = npz.load(result.workspace / "samples/reference/000.npz")
    assert abs(got["y"] - ref["y"]).max() < 1e-5
    native = result.to_triton(tmp_path / "repo", formats="onnx-optimized")
    folder = native.models[0].path / "1" / "model.onnx"
    assert sorted(p.name for p in folder.iterdir()) == ["mlp.onnx.data", "model.onnx"]



def test_tensors_are_read_in_smallest_first_within_the_budget(tmp_path):
    from navigator.converters.onnx_io import external_tensors, inline_small_external

    src = _external_model(tmp_path)   # w1: 256 bytes, two: 4 bytes, both external
    model = onnx.load(str(src), load_external_data=False)
    assert inline_small_external(model, src.parent, max_bytes=1 << 20, budget=100) == 1
    assert [t.name for t in external_tensors(model)] == ["w1"]
    assert onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "two")) == 2.0


def _external_matmuls(tmp_path):
    """x [batch, 8] @ w1 [8, 16] + b [16] -> relu -> @ w2 [16, 4]: every tensor external; w1 and w2
    are MatMul weights (not square: a wrong transposition cannot pass), b is not."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 16)), ("b", (16,)), ("w2", (16, 4)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "src" / "mm.onnx"
    src.parent.mkdir()
    onnx.save_model(model, str(src), save_as_external_data=True, location="mm.onnx.data", size_threshold=0)
    return src


def test_matmul_weights_are_stored_transposed_for_openvino_and_compute_the_same(tmp_path):
    """The rewrite OpenVINO's conversion reads (its MatMul weights in place, not a transposed copy
    of each: benchmarks/results/large_model_cpu.md): the rewritten model computes the source's
    function in onnxruntime, and the OpenVINO IR made from it verifies."""
    import numpy as np
    import onnxruntime as ort

    from navigator.converters.onnx_io import TRANSPOSED, pretranspose_matmul_weights, save_proto

    src = _external_matmuls(tmp_path)
    out = tmp_path / "rewritten"
    out.mkdir()
    model = onnx.load(str(src), load_external_data=False)
    rewritten, count, size = pretranspose_matmul_weights(model, src.parent, out, "model.onnx.data")
    assert (count, size) == (2, (8 * 16 + 16 * 4) * 4)
    assert {i.name for i in rewritten.graph.initializer} == {"w1" + TRANSPOSED, "b", "w2" + TRANSPOSED}
    save_proto(rewritten, out / "model.onnx")
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    want = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out / "model.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)

    result = navigator.convert(src, workdir=tmp_path / "wd", targets=["onnx", "openvino"], **FAST)
    assert result.ok, result.failures
    fs = result.status.formats["openvino"]
    assert fs.runners["openvino-cpu"].verify.status == "ok"
    log = (result.workspace / fs.convert.log).read_text()
    assert "2 MatMul weights (0.00 GiB) stored transposed for the conversion to read them in place" in log
    assert not [p for p in (result.workspace / fs.path).parent.iterdir()
                if p.name.startswith(".pretransposed-")]    # the rewritten copy was removed
