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
