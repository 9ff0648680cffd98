"""Configs for formats whose packages are not installable here (TensorRT, TensorFlow):
a hand-written status.yaml names a tensorrt plan and a SavedModel folder whose files
are placeholders. Only the repository layout and config.pbtxt are checked (neither
artifact is loaded); real engines and SavedModels are covered where their packages run."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from navigator.errors import UserInputError
from navigator.triton import emit
from navigator.types import ModelSignature, TensorSpec
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.status import (Best, ConvertStep, FormatStatus, ModelInfo, ProfileResult, ProfileStep,
                                        RunnerStatus, Status, VerifyStep)


def _runner(runner: str, device: str, results=()) -> RunnerStatus:
    return RunnerStatus(runner=runner, device=device, verify=VerifyStep(status="ok", batch_sizes=[1, 8]),
                        profile=ProfileStep(status="ok" if results else "skipped", reason=None if results else "x",
                                            results=[ProfileResult(b, t) for b, t in results]))


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "m.nav.workspace"
    (root / "formats" / "tensorrt").mkdir(parents=True)
    (root / "formats" / "tensorrt" / "model.plan").write_bytes(b"ftrt placeholder")
    (root / "formats" / "savedmodel" / "model.savedmodel" / "variables").mkdir(parents=True)
    (root / "formats" / "savedmodel" / "model.savedmodel" / "saved_model.pb").write_bytes(b"placeholder")
    (root / "formats" / "tensorrt_rtx").mkdir(parents=True)
    (root / "formats" / "tensorrt_rtx" / "model.plan").write_bytes(b"vtrt placeholder")
    npz.save(root / "samples" / "inputs" / "000.npz", {"x": np.ones((8, 3, 4), np.float32)})
    sig = ModelSignature(inputs=[TensorSpec("x", "float32", [-1, 3, -1])],
                         outputs=[TensorSpec("y", "float16", [-1, 10])])
    st = Status(model=ModelInfo(name="m", source_format="onnx"), state="complete", signature=sig, batch_dim=0,
                shape_profiles=[{"x": {"min": [1, 3, 4], "opt": [8, 3, 4], "max": [16, 3, 8]}}],
                config={"max_batch_size": 16})
    st.formats["tensorrt"] = FormatStatus(
        format="tensorrt", path="formats/tensorrt/model.plan", convert=ConvertStep(status="ok"),
        runners={"tensorrt-cuda": _runner("tensorrt", "cuda", [(1, 100.0), (8, 700.0), (16, 760.0)])})
    st.formats["savedmodel"] = FormatStatus(format="savedmodel", path="formats/savedmodel/model.savedmodel",
                                            convert=ConvertStep(status="ok"),
                                            runners={"tensorflow-cpu": _runner("tensorflow", "cpu")})
    st.formats["tensorrt_rtx"] = FormatStatus(format="tensorrt_rtx", path="formats/tensorrt_rtx/model.plan",
                                              convert=ConvertStep(status="ok"),
                                              runners={"tensorrt_rtx-cuda": _runner("tensorrt_rtx", "cuda")})
    st.best = Best(key="tensorrt", runner="tensorrt-cuda", batch_size=16, throughput=760.0)
    status_mod.save(st, root / "status.yaml")
    return root


def _cfg(path):
    return text_format.Parse((path / "config.pbtxt").read_text(), mc.ModelConfig())


def test_tensorrt_plan(ws, tmp_path):
    result = emit(ws, {"repo": tmp_path / "repo", "cuda_graphs": True})
    model = result.models[0].path
    cfg = _cfg(model)
    assert (cfg.platform, cfg.backend, cfg.default_model_filename) == ("tensorrt_plan", "tensorrt", "model.plan")
    assert (model / "1" / "model.plan").read_bytes() == b"ftrt placeholder"
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU        # auto -> the only device it runs on
    assert cfg.optimization.cuda.graphs
    # throughput still rises at 16, the largest size profiled: no optimum, so no preferred size
    assert cfg.max_batch_size == 16 and list(cfg.dynamic_batching.preferred_batch_size) == []
    assert any("no preferred_batch_size (throughput still rises at the largest size measured, 16" in n
               for n in result.notes), result.notes
    assert [w.batch_size for w in cfg.model_warmup] == [1]
    assert [list(i.dims) for i in cfg.input] == [[3, -1]] and cfg.output[0].data_type == mc.TYPE_FP16
    assert list(cfg.model_warmup[0].inputs["x"].dims) == [3, 4]
    assert any("check-engine" in n for n in result.notes)
    with pytest.raises(UserInputError, match="runs on gpu only"):
        emit(ws, {"repo": tmp_path / "other", "kind": "cpu"})
    with pytest.raises(UserInputError, match="built for batches up to 16"):
        emit(ws, {"repo": tmp_path / "other", "max_batch_size": 32})


def test_savedmodel_is_served_but_deprecated(ws, tmp_path):
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "savedmodel"})
    model = result.models[0].path
    cfg = _cfg(model)
    assert (cfg.platform, cfg.backend) == ("tensorflow_savedmodel", "tensorflow")
    assert (model / "1" / "model.savedmodel" / "saved_model.pb").is_file()
    assert any("deprecated" in n and "onnx" in n for n in result.notes)


def test_tensorrt_rtx_engines_are_not_offered_to_triton(ws, tmp_path):
    with pytest.raises(UserInputError, match="never loads in Triton's TensorRT backend"):
        emit(ws, {"repo": tmp_path / "repo", "formats": "tensorrt_rtx"})
    names = [m.key for m in emit(ws, {"repo": tmp_path / "repo", "formats": "all"}).models]
    assert names == ["tensorrt", "savedmodel"]


def test_engine_plugins_reach_the_launch_notes(ws, tmp_path):
    """engine.yaml (written by the TensorRT build) names the plugin libraries and backend
    config that tritonserver needs: the emitter passes them on as launch notes."""
    import yaml

    (ws / "formats" / "tensorrt" / "engine.yaml").write_text(yaml.safe_dump({"triton": {
        "platform": "tensorrt_plan", "backend_config": ["tensorrt,plugins=/opt/libnms.so"],
        "ld_preload": "/opt/libnms.so"}}))
    notes = emit(ws, {"repo": tmp_path / "repo"}).notes
    assert "tensorrt: start tritonserver with --backend-config=tensorrt,plugins=/opt/libnms.so" in notes
    assert any("LD_PRELOAD=/opt/libnms.so" in n for n in notes)


@pytest.mark.parametrize("nhwc_fastest, nhwc_dropped", [(True, False), (False, False), (False, True)])
def test_onnx_on_gpu_is_served_with_the_cuda_options_it_was_verified_with(ws, tmp_path, nhwc_fastest, nhwc_dropped):
    """TF32 off (Triton's CUDA provider defaults to on; the fp32 verdict never saw it) and, when
    onnxruntime-cuda_nhwc is the fastest verified CUDA runner, prefer_nhwc. Ranked as best ranks:
    a cuda_nhwc the race dropped does not count as fastest on its frozen figure (900/s) above the
    raced one it lost to (500/s)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, "s"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["b", 3, "s"])])
    (ws / "formats" / "onnx").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              ws / "formats" / "onnx" / "model.onnx")
    st = status_mod.load(ws / "status.yaml")
    fast, slow = (900.0, 500.0) if nhwc_fastest or nhwc_dropped else (500.0, 900.0)
    nhwc = _runner("onnxruntime", "cuda", [(8, fast)])
    nhwc.provider = "cuda_nhwc"
    plain = _runner("onnxruntime", "cuda", [(8, slow)])
    if nhwc_dropped:
        nhwc.profile.reason = "out of the race: separated from onnx/onnxruntime-cuda after 3 race windows"
        plain.profile.results[0].raced = True
    st.formats["onnx"] = FormatStatus(format="onnx", path="formats/onnx/model.onnx", convert=ConvertStep(status="ok"),
                                      runners={"onnxruntime-cuda": plain, "onnxruntime-cuda_nhwc": nhwc})
    status_mod.save(st, ws / "status.yaml")
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "onnx", "kind": "gpu", "cuda_graphs": True})
    cfg = _cfg(result.models[0].path)
    (acc,) = cfg.optimization.execution_accelerators.gpu_execution_accelerator
    want = {"use_tf32": "0", "enable_cuda_graph": "1"} | ({"prefer_nhwc": "1"} if nhwc_fastest else {})
    assert acc.name == "cuda" and dict(acc.parameters) == want
    assert any("prefer_nhwc" in n for n in result.notes) == nhwc_fastest
    cpu = _cfg(emit(ws, {"repo": tmp_path / "cpu", "formats": "onnx", "kind": "cpu"}).models[0].path)
    assert not cpu.optimization.execution_accelerators.gpu_execution_accelerator


def test_a_program_exported_with_static_shapes_is_served_at_those_shapes(ws, tmp_path):
    """A torch.export that fell back to static shapes got max_batch_size 64 and dynamic dims, then
    failed its own warm-up on load: it is served without batching at the shapes it was verified at."""
    (ws / "formats" / "torch_export").mkdir(parents=True)
    (ws / "formats" / "torch_export" / "model.pt2").write_bytes(b"placeholder")
    npz.save(ws / "samples" / "reference" / "000.npz", {"y": np.ones((8, 10), np.float16)})
    st = status_mod.load(ws / "status.yaml")
    st.formats["torch_export"] = FormatStatus(format="torch_export", path="formats/torch_export/model.pt2",
                                              convert=ConvertStep(status="ok", exporter="torch.export (static shapes)"),
                                              runners={"torch_export-cpu": _runner("torch_export", "cpu")})
    status_mod.save(st, ws / "status.yaml")
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "torch_export"})
    cfg = _cfg(result.models[0].path)
    assert cfg.max_batch_size == 0
    assert [list(i.dims) for i in cfg.input] == [[8, 3, 4]] and [list(o.dims) for o in cfg.output] == [[8, 10]]
    assert any("static shapes" in n for n in result.notes)
    with pytest.raises(UserInputError, match="static shapes"):
        emit(ws, {"repo": tmp_path / "other", "formats": "torch_export", "max_batch_size": 4})


def test_openvino_is_served_only_as_it_was_verified_under_the_backends_default(ws, tmp_path):
    """Triton's OpenVINO backend cannot pin f32: on a bf16 CPU it serves bf16. openvino-default
    judges that; unless it verified the format, Triton does not serve it, best skips it, and the
    run's exit code does not count it (openvino-cpu's verdict is the format's)."""
    from navigator.pipeline.outcome import outcome_code, select_best

    (ws / "formats" / "openvino").mkdir(parents=True)
    (ws / "formats" / "openvino" / "model.xml").write_text("<net/>")
    (ws / "formats" / "openvino" / "model.bin").write_bytes(b"")
    st = status_mod.load(ws / "status.yaml")
    default = _runner("openvino", "cpu", [(8, 5000.0)])
    default.provider = "default"
    default.verify = VerifyStep(status="inconclusive", reason="logits: inconclusive: only 82 rows")
    st.formats["openvino"] = FormatStatus(format="openvino", path="formats/openvino/model.xml",
                                          convert=ConvertStep(status="ok"),
                                          runners={"openvino-cpu": _runner("openvino", "cpu", [(8, 9000.0)]),
                                                   "openvino-default": default})
    status_mod.save(st, ws / "status.yaml")
    with pytest.raises(UserInputError, match="openvino-default does, and that was inconclusive"):
        emit(ws, {"repo": tmp_path / "repo", "formats": "openvino"})
    result = emit(ws, {"repo": tmp_path / "all", "formats": "all"})
    assert "openvino" not in [m.key for m in result.models]
    assert any(n.startswith("left out: openvino") for n in result.notes)
    assert select_best(st, no_profile=False).key == "tensorrt"          # 9000/s on openvino-cpu is not eligible
    assert outcome_code(st, ["openvino"]) == (0, [])
    default.verify = VerifyStep(status="ok", settings={"INFERENCE_PRECISION_HINT": "bf16"})
    assert select_best(st, no_profile=False).key == "openvino"
    status_mod.save(st, ws / "status.yaml")
    served = emit(ws, {"repo": tmp_path / "ok", "formats": "openvino"})
    assert any("serves bf16, verified as openvino-default (ok)" in n for n in served.notes)
