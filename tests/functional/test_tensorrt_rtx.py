"""Real engine builds with TensorRT-RTX, which builds on a CPU (engines cannot run
here: no GPU). Covers what the TensorRT edges share: dynamic batch, two dynamic
dims, several optimization profiles, profile and parser errors, plan header
parsing on the engines built here, reproduce.sh and engine.yaml, and the
`navigator convert --targets tensorrt,tensorrt_rtx` run (tensorrt skipped here,
naming TensorRT). TensorRT itself (tensorrt 10/11) and running engines need a
GPU machine: those tests skip with the reason."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from onnx import TensorProto, helper

from navigator import deps
from navigator.tools import engine
from navigator.converters import tensorrt_builder as tb
from navigator.errors import UserInputError

from ..conftest import FAST, models

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not deps.has("tensorrt_rtx"),
                                 reason="needs TensorRT-RTX (pip install tensorrt-rtx-cu13; extra tensorrt-rtx)")]

CNN_PROFILE = {"x": {"min": [1, 3, 8, 8], "opt": [4, 3, 16, 16], "max": [8, 3, 32, 32]}}


def _build(tmp_path, model, profiles, name="m", precision="fp32", **params):
    onnx_path = models.save(model, tmp_path / f"{name}.onnx")
    plan = tmp_path / name / "model.plan"
    plan.parent.mkdir(parents=True, exist_ok=True)
    return tb.build_engine(builder="tensorrt_rtx", onnx_path=onnx_path, plan_path=plan, profiles=profiles,
                           precision=precision, params=tb.TensorRTParams(**params), workspace=tmp_path)


def test_dynamic_batch_build_and_plan_header(tmp_path):
    import tensorrt_rtx

    result = _build(tmp_path, models.small_cnn(), [CNN_PROFILE])
    header = engine.read_header(result.plan)
    assert header.builder == "tensorrt_rtx" and header.version_text == tensorrt_rtx.__version__
    assert header.size == result.plan.stat().st_size > 10_000
    info = yaml.safe_load((result.plan.parent / "engine.yaml").read_text())
    assert info["builder_version"] == tensorrt_rtx.__version__ and info["precision"] == "fp32"
    assert info["strongly_typed"] is True and info["precision_flags"] == [] and info["timing_cache"] is None
    assert info["profiles"] == [CNN_PROFILE] and info["workspace_mb"] == 8192
    assert info["target"]["compute_capabilities"] == list(header.compute_capabilities)
    assert "SM89" in header.compute_capabilities
    assert info["trtexec"].startswith("tensorrt_rtx --onnx=") and "--maxShapes=x:8x3x32x32" in info["trtexec"]
    print("build_s", info["build_s"])


def test_two_dynamic_dims_and_several_profiles(tmp_path):
    profiles = [{"ids": {"min": [1, 4], "opt": [4, 16], "max": [8, 64]}},
                {"ids": {"min": [8, 4], "opt": [32, 128], "max": [64, 256]}}]
    one = _build(tmp_path, models.token_classifier(), profiles[:1], name="one")
    two = _build(tmp_path, models.token_classifier(), profiles, name="two")
    info = yaml.safe_load((two.plan.parent / "engine.yaml").read_text())
    assert info["profiles"] == profiles
    assert two.plan.stat().st_size > one.plan.stat().st_size      # kernels for the second profile
    assert info["trtexec"].count("--minShapes=") == 2


def test_targets_one_compute_capability(tmp_path):
    result = _build(tmp_path, models.small_cnn(), [CNN_PROFILE], compute_capabilities=["SM89"], opt_level=0)
    assert engine.read_header(result.plan).compute_capabilities == ("SM89",)
    assert result.info["opt_level"] == 0


@pytest.mark.parametrize("profiles, match", [
    ([], "'x' is dynamic and needs an optimization profile"),
    ([{"x": {"min": [1, 4, 8, 8], "opt": [4, 4, 16, 16], "max": [8, 4, 32, 32]}}], "dim 1 is static \\(3\\)"),
    ([{"x": {"min": [8, 3, 8, 8], "opt": [4, 3, 16, 16], "max": [8, 3, 32, 32]}}], "min <= opt <= max"),
])
def test_profile_errors_stop_the_build(tmp_path, profiles, match):
    with pytest.raises(UserInputError, match=match):
        _build(tmp_path, models.small_cnn(), profiles)
    assert not (tmp_path / "m" / "model.plan").exists()


def _custom_op_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("MyCustomOp", ["a"], ["y"], name="custom", domain="my.domain")],
        "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("my.domain", 1)])
    model.ir_version = 9
    return model


def test_parser_errors_are_reported_node_by_node(tmp_path):
    profile = [{"x": {"min": [1, 4], "opt": [2, 4], "max": [4, 4]}}]
    with pytest.raises(tb.EngineBuildError) as e:
        _build(tmp_path, _custom_op_model(), profile)
    text = e.value.one_line()
    assert "cannot parse" in text and "node 1 (MyCustomOp 'custom')" in text
    assert "Plugin not found" in text and "--trt-plugins LIB.so" in text
    with pytest.raises(UserInputError, match="no such file"):
        _build(tmp_path, _custom_op_model(), profile, plugins=[str(tmp_path / "libmissing.so")])


def _status(ws):
    return yaml.safe_load((ws / "status.yaml").read_text())


def test_convert_tensorrt_and_tensorrt_rtx_here(cli, onnx_model, tmp_path):
    """The issue's 'done when': an RTX engine built here, tensorrt skipped naming
    TensorRT with its reproduce.sh written, check-engine reading the real plan."""
    r = cli("convert", onnx_model("small_cnn"), "--workdir", tmp_path / "wd", "--targets", "tensorrt,tensorrt_rtx",
            "--min-shapes", "x:1x3x8x8", "--opt-shapes", "x:4x3x16x16", "--max-shapes", "x:8x3x32x32",
            "--min-shapes", "x:4x3x16x16", "--opt-shapes", "x:16x3x32x32", "--max-shapes", "x:32x3x64x64",
            "--shapes", "x:4x3x16x16", *FAST)
    assert r.returncode == 0, r.stderr + r.stdout
    ws = tmp_path / "wd" / "small_cnn.nav.workspace"
    st = _status(ws)
    from navigator.workspace import schema

    schema.validate(st)
    trt = st["formats"]["tensorrt"]
    assert trt["convert"]["status"] == "skipped" and "tensorrt" in trt["convert"]["reason"]
    assert "warning: tensorrt skipped" in r.stdout
    reproduce = (ws / "formats" / "tensorrt" / "reproduce.sh").read_text()
    assert "python -P -m navigator.converters.onnx_to_tensorrt" in reproduce
    assert ("# trtexec --onnx=formats/onnx/model.onnx --saveEngine=formats/tensorrt/model.plan --minShapes=x:1x3x8x8 "
            "--optShapes=x:4x3x16x16 --maxShapes=x:8x3x32x32 --minShapes=x:4x3x16x16") in reproduce
    assert "--memPoolSize=workspace:8192" in reproduce and "--fp16" not in reproduce
    rtx = st["formats"]["tensorrt_rtx"]
    assert rtx["convert"]["status"] == "ok" and rtx["convert"]["exporter"].startswith("tensorrt_rtx 1.")
    runner = rtx["runners"]["tensorrt_rtx-cpu"]["verify"]
    assert runner["status"] == "skipped" and "run only on an NVIDIA GPU" in runner["reason"]
    info = yaml.safe_load((ws / "formats" / "tensorrt_rtx" / "engine.yaml").read_text())
    assert len(info["profiles"]) == 2 and info["source"] == "formats/onnx/model.onnx"

    c = cli("check-engine", ws / "formats" / "tensorrt_rtx" / "model.plan")
    assert c.returncode == 0, c.stderr
    assert f"built by TensorRT-RTX {info['builder_version']}" in c.stdout
    c = cli("check-engine", ws / "formats" / "tensorrt_rtx", "--triton", "24.09")
    assert c.returncode == 1 and "does not load in Triton's TensorRT backend" in c.stdout

    # reproduce.sh rebuilds the engine from files alone
    plan = ws / "formats" / "tensorrt_rtx" / "model.plan"
    plan.unlink()
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    rebuilt = subprocess.run(["bash", str(ws / "formats" / "tensorrt_rtx" / "reproduce.sh")], capture_output=True,
                             text=True, env=env, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert engine.read_header(plan).version_text == info["builder_version"]


def test_reduced_precision_engines_from_the_fp16_and_int8_graphs(cli, onnx_model, tmp_path):
    r = cli("convert", onnx_model("small_cnn"), "--workdir", tmp_path / "wd", "--targets", "tensorrt_rtx",
            "--target-precisions", "fp16,int8", "--min-shapes", "x:1x3x8x8", "--opt-shapes", "x:8x3x16x16",
            "--max-shapes", "x:16x3x32x32", "--shapes", "x:8x3x16x16", "--no-profile",
            "--compare", "logits:top1=0.8", *FAST)   # a budget ~25 rows can show (99% needs 300)
    assert r.returncode == 0, r.stderr + r.stdout
    ws = tmp_path / "wd" / "small_cnn.nav.workspace"
    st = _status(ws)
    for key, parent, precision in (("tensorrt_rtx-fp16", "onnx-fp16", "fp16"),
                                   ("tensorrt_rtx-int8", "onnx-int8", "int8")):
        fmt = st["formats"][key]
        assert fmt["convert"]["status"] == "ok" and fmt["parent"] == parent and fmt["precision"] == precision, fmt
        info = yaml.safe_load((ws / "formats" / key / "engine.yaml").read_text())
        assert info["precision"] == precision and info["source"] == f"formats/{parent}/model.onnx"
        assert st["formats"][parent]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


_NO_TENSORRT = ("needs TensorRT (module tensorrt, 10 or 11), which is not installable on navigator's CPU machines"
                if not deps.has("tensorrt") else
                "TensorRT builds and runs engines on an NVIDIA GPU; none is visible" if not deps.gpu_present() else "")


@pytest.mark.skipif(bool(_NO_TENSORRT), reason=_NO_TENSORRT or "-")
def test_tensorrt_build_and_run_on_a_gpu(tmp_path):
    import numpy as np

    from navigator.runners.tensorrt import TensorRTRunner

    onnx_path = models.save(models.small_cnn(), tmp_path / "m.onnx")
    plan = tmp_path / "tensorrt" / "model.plan"
    plan.parent.mkdir()
    tb.build_engine(builder="tensorrt", onnx_path=onnx_path, plan_path=plan, profiles=[CNN_PROFILE], precision="fp32",
                    params=tb.TensorRTParams(), workspace=tmp_path)
    assert list((tmp_path / "trt_cache").glob("timing-tensorrt-*.cache"))
    x = np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)
    import onnxruntime as ort

    ref = ort.InferenceSession(str(onnx_path)).run(None, {"x": x})[0]
    with TensorRTRunner(plan, device="cuda") as runner:
        out = runner.infer({"x": x})["logits"]
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-3)
