"""onnx -> onnx-fp16 and onnx -> onnx-int8 for real: the fp16 cast by op schema keeping
the I/O types, onnxruntime's static quantization calibrated on the
stored samples, both verified by onnxruntime against the fp32 reference by what the
model is for (validators/tolerances.TASK: a classifier's top-1 agreement), int8 on
samples it was not calibrated on."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import yaml

from navigator import deps

from ..conftest import FAST

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not deps.has("onnxruntime"), reason="the edges and their runner need onnxruntime")]
needs_fp16 = pytest.mark.skipif(not deps.has("onnx"), reason="onnx -> onnx-fp16 needs onnx")


def _status(tmp_path, name, root=False):
    """status.yaml of workspace ``name`` in ``tmp_path/wd`` (``root``: in ``tmp_path`` itself)."""
    folder = tmp_path if root else tmp_path / "wd"
    return yaml.safe_load((folder / f"{name}.nav.workspace" / "status.yaml").read_text())


def _verify(st, key):
    return st["formats"][key]["runners"]["onnxruntime-cpu"]["verify"]


@needs_fp16
def test_fp16_and_int8_verify_with_their_tolerances(cli, onnx_model, tmp_path):
    """Both judged by the top-1 class of each of 320+ rows. With random weights the logits are
    near-tied and int8 moves 1-2% of the classes: the default 99% fails it (a real finding, not
    noise), an explicit 95% budget verifies it."""
    model = onnx_model("small_cnn")
    args = ("--targets", "onnx-fp16,onnx-int8", "--shapes", "x:160x3x16x16", "--sample-count", "4", "--no-profile",
            *FAST)
    r = cli("convert", model, "--workdir", tmp_path / "default", *args)
    assert r.returncode == 1, r.stderr + r.stdout
    default = _verify(_status(tmp_path / "default", "small_cnn", root=True), "onnx-int8")
    assert default["status"] == "failed" and "rows changed their class" in default["reason"], default
    assert _verify(_status(tmp_path / "default", "small_cnn", root=True), "onnx-fp16")["status"] == "ok"
    r = cli("convert", model, "--workdir", tmp_path / "wd", *args, "--compare", "logits:top1=0.95")
    assert r.returncode == 0, r.stderr + r.stdout
    st = _status(tmp_path, "small_cnn")
    ws = tmp_path / "wd" / "small_cnn.nav.workspace"
    for key, precision in (("onnx-fp16", "fp16"), ("onnx-int8", "int8")):
        fmt = st["formats"][key]
        assert fmt["convert"]["status"] == "ok" and fmt["precision"] == precision and fmt["parent"] == "onnx"
        v = _verify(st, key)
        assert v["status"] == "ok", v
        assert v["batch_sizes"] == [1, 160]
        logits = v["outputs"]["logits"]
        assert logits["conclusive"] is True, logits          # the check could reject a wrong answer
        # a classifier's logits at a lossy precision: judged by the top-1 class of every row
        assert logits["kind"] == "logits" and logits["mode"] == "top1"
        assert logits["threshold"] == 0.95 and logits["measured"] >= 0.95, logits
        if precision == "int8":   # calibrated on one part of the samples, verified on the others
            assert v["calibrated_on"] == ["000", "001"] and v["samples"][:2] == ["002", "003"], v
            assert not set(v["samples"]) & set(v["calibrated_on"])
        # a real difference from the fp32 reference, inside the precision's tolerance
        assert 0 < logits["max_abs"], logits
        print(key, "max_abs", logits["max_abs"], "min_atol", logits["min_atol"])
    fp32 = _verify(st, "onnx")["outputs"]["logits"]["max_abs"]
    assert fp32 < _verify(st, "onnx-fp16")["outputs"]["logits"]["max_abs"]

    fp16 = onnx.load(str(ws / "formats" / "onnx-fp16" / "model.onnx"))
    io_types = {v.name: v.type.tensor_type.elem_type for v in list(fp16.graph.input) + list(fp16.graph.output)}
    assert io_types == {"x": onnx.TensorProto.FLOAT, "logits": onnx.TensorProto.FLOAT}   # I/O kept fp32
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    assert {i.data_type for i in fp16.graph.initializer if i.data_type in floats} == {onnx.TensorProto.FLOAT16}
    assert st["formats"]["onnx-fp16"]["convert"]["exporter"].startswith("navigator fp16 by op schema")
    assert st["formats"]["onnx-fp16"]["convert"]["precision_share"] == 1.0

    int8 = onnx.load(str(ws / "formats" / "onnx-int8" / "model.onnx"))
    ops = [n.op_type for n in int8.graph.node]
    assert ops.count("QuantizeLinear") >= 3 and ops.count("DequantizeLinear") >= 4
    inits = {i.name: i for i in int8.graph.initializer}
    # weights int8 per channel (one scale per output channel), bias left fp32 for TensorRT
    assert any(i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 4 for i in inits.values())
    assert not any(i.data_type == onnx.TensorProto.INT32 for i in inits.values())
    assert inits["conv_b"].data_type == onnx.TensorProto.FLOAT
    log = (ws / "formats" / "onnx-int8" / "convert.log").read_text()
    assert "calibrated on 2 batches" in log   # of 4: the other two verify


@needs_fp16
def test_fp16_of_an_embedding_model_keeps_int64_ids(cli, onnx_model, tmp_path):
    """Gather on int64 ids, ReduceMean, Softmax: two dynamic dims, two outputs."""
    r = cli("convert", onnx_model("token_classifier"), "--workdir", tmp_path / "wd", "--targets", "onnx-fp16",
            "--shapes", "ids:160x16", "--no-profile", *FAST)   # 300+ rows: what a top-1 budget of 99% needs
    assert r.returncode == 0, r.stderr + r.stdout
    v = _verify(_status(tmp_path, "token_classifier"), "onnx-fp16")
    assert v["status"] == "ok" and set(v["outputs"]) == {"logits", "probs"}, v


def test_int8_fails_verification_at_fp32_tolerances(cli, onnx_model, tmp_path):
    """The check is real: the same int8 graph fails when held to 1e-6."""
    r = cli("convert", onnx_model("small_cnn"), "--workdir", tmp_path / "wd", "--targets", "onnx-int8",
            "--shapes", "x:8x3x16x16", "--atol", "1e-6", "--rtol", "1e-6", "--no-profile", *FAST)
    assert r.returncode == 1, r.stderr + r.stdout
    v = _verify(_status(tmp_path, "small_cnn"), "onnx-int8")
    assert v["status"] == "failed" and "logits" in v["reason"]


def test_int8_calibration_reads_the_stored_samples(tmp_path):
    from navigator.converters.onnx_to_onnx_int8 import calibration_batches
    from navigator.errors import UserInputError
    from navigator.workspace import npz

    with pytest.raises(UserInputError, match="needs stored samples"):
        calibration_batches(tmp_path, ["x"])
    npz.save(tmp_path / "000.npz", {"x": np.ones((2, 3), np.float32), "extra": np.zeros(1)})
    npz.save(tmp_path / "001.npz", {"x": np.zeros((4, 3), np.float32)})
    batches = calibration_batches(tmp_path, ["x"])
    assert [b["x"].shape for b in batches] == [(2, 3), (4, 3)] and set(batches[0]) == {"x"}
    assert len(calibration_batches(tmp_path, ["x"], limit=1)) == 1
    with pytest.raises(UserInputError, match="no input 'ids'"):
        calibration_batches(tmp_path, ["ids"])
