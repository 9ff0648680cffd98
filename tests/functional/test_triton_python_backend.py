"""Python-backend models and ensembles, run for real in this process.

Each generated model.py is imported with a small fake ``triton_python_backend_utils``
injected into sys.modules (the module Triton's Python backend provides) and fed the
workspace's stored samples; outputs are compared with the workspace's reference
outputs. ONNX runs through onnxruntime, torch_export / TorchScript / AOTInductor
artifacts made here with torch through torch. Triton's real Python backend runs in
the `navigator serve` issue's tests; what the fake stands in for is only the
request/response plumbing (get_input_tensor_by_name, Tensor, InferenceResponse,
TritonError).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

import navigator
from navigator import deps
from navigator.errors import UserInputError
from navigator.triton import config as cfg_mod, emit
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.status import ConvertStep, FormatStatus, ProfileStep, RunnerStatus, VerifyStep

from ..conftest import models
from .triton_fakes import infer, load_model

pytestmark = pytest.mark.functional
needs_torch = pytest.mark.skipif(not deps.has("torch"), reason="needs torch (CI installs 2.13.0 CPU)")


def _check_outputs_against_config(out: dict, cfg, batch: int) -> None:
    """The Python backend does not check outputs against the config (FACTS.md): the test does."""
    for io in cfg.output:
        arr = out[io.name]
        assert arr.dtype == np.dtype(cfg_mod.numpy_dtype(mc.DataType.Name(io.data_type))), io.name
        dims = ([batch] if cfg.max_batch_size else []) + list(io.dims)
        assert len(arr.shape) == len(dims) and all(d in (-1, s) for d, s in zip(dims, arr.shape)), (io.name, arr.shape)


# --------------------------------------------------------------------------- workspaces
@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    """foldable_mlp (x float32 [batch, 8] -> y = relu(x @ (2 w1))), onnx only, no profiling."""
    tmp = tmp_path_factory.mktemp("mlp")
    model = models.save(models.foldable_mlp(), tmp / "foldable_mlp.onnx")
    result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx"], no_profile=True, device="cpu",
                               timeout=120)
    assert result.ok, result.failures
    return result.workspace


def add_format(ws: Path, key: str, fmt: str, artifact: Path, io_names: dict, runner: str, load, exporter: str) -> None:
    """Put an artifact made in the test into the workspace as a verified format: it is run
    on every stored sample (``load(path)`` gives a callable on torch tensors) and compared with
    the reference outputs before status.yaml records it."""
    import torch

    dest = ws / "formats" / key / artifact.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(artifact, dest)
    fn = load(dest)
    for sample_path in sorted((ws / "samples" / "inputs").glob("*.npz")):
        x = torch.from_numpy(npz.load(sample_path)["x"])
        out = fn(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        ref = npz.load(ws / "samples" / "reference" / sample_path.name)["y"]
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-5, atol=1e-5)
    st = status_mod.load(ws / "status.yaml")
    st.formats[key] = FormatStatus(
        format=fmt, path=f"formats/{key}/{artifact.name}", parent="onnx", io_names=io_names,
        convert=ConvertStep(status="ok", exporter=exporter),
        runners={f"{runner}-cpu": RunnerStatus(runner=runner, device="cpu",
                                               verify=VerifyStep(status="ok", batch_sizes=[8]),
                                               profile=ProfileStep(status="skipped", reason="--no-profile"))})
    status_mod.save(st, ws / "status.yaml")


@pytest.fixture(scope="module")
def torch_ws(mlp, tmp_path_factory) -> Path:
    """The mlp workspace plus torch_export (.pt2) and TorchScript (.pt) artifacts made here."""
    if not deps.has("torch"):
        pytest.skip("needs torch")
    import torch

    tmp = tmp_path_factory.mktemp("torch_ws")
    ws = tmp / mlp.name
    shutil.copytree(mlp, ws)
    module = models.foldable_mlp_torch()
    x = torch.rand(4, 8)
    ep = torch.export.export(module, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    torch.export.save(ep, str(tmp / "model.pt2"))
    add_format(ws, "torch_export", "torch_export", tmp / "model.pt2", {"x": "x", "y": "y"}, "torch_export",
               lambda p: torch.export.load(str(p)).module(), "torch.export")
    with torch.no_grad():
        torch.jit.trace(module, (x,)).save(str(tmp / "model.pt"))
    add_format(ws, "torchscript", "torchscript", tmp / "model.pt", {"x": "INPUT__0", "y": "OUTPUT__0"},
               "torchscript", lambda p: torch.jit.load(str(p)), "torch.jit.trace")
    return ws


# --------------------------------------------------------------------------- ONNX and torch through model.py
def test_onnx_through_the_python_backend(mlp, tmp_path, pb_utils):
    result = emit(mlp, {"repo": tmp_path / "repo", "python_backend": True})
    model, cfg = load_model(result.models[0].path)
    for i in (0, 1):
        sample = npz.load(mlp / f"samples/inputs/00{i}.npz")
        out = infer(pb_utils, model, sample)
        np.testing.assert_allclose(out["y"], npz.load(mlp / f"samples/reference/00{i}.npz")["y"], rtol=1e-5,
                                   atol=1e-6)
        _check_outputs_against_config(out, cfg, sample["x"].shape[0])
    # a bad request gets an error response, not a dead model
    [response] = model.execute([pb_utils.Request([pb_utils.Tensor("wrong", np.zeros((1, 8), np.float32))])])
    assert response.has_error() and "no input 'x'" in response.error().message()


@needs_torch
def test_torch_formats_configs_and_inference(torch_ws, tmp_path, pb_utils):
    st = status_mod.load(torch_ws / "status.yaml")
    result = emit(torch_ws, {"repo": tmp_path / "repo", "formats": "all"})
    by_key = {m.key: m for m in result.models}
    assert set(by_key) == {"onnx", "torch_export", "torchscript"}
    ts = text_format.Parse((by_key["torchscript"].path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (ts.platform, ts.backend, ts.default_model_filename) == ("pytorch_libtorch", "pytorch", "model.pt")
    assert [i.name for i in ts.input] == ["INPUT__0"] and [o.name for o in ts.output] == ["OUTPUT__0"]
    assert (by_key["torchscript"].path / "1" / "model.pt").is_file()
    assert list(ts.model_warmup[0].inputs) == ["INPUT__0"]
    te = text_format.Parse((by_key["torch_export"].path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (te.backend, te.default_model_filename) == ("python", "model.py")
    assert sorted(p.name for p in (by_key["torch_export"].path / "1").iterdir()) == ["model.pt2", "model.py"]
    for cfg, names in ((ts, {"x": "INPUT__0", "y": "OUTPUT__0"}), (te, {})):
        assert cfg_mod.signature_problems(
            cfg, [(names.get(t.name, t.name), t.dtype, t.shape[1:]) for t in st.signature.inputs],
            [(names.get(t.name, t.name), t.dtype, t.shape[1:]) for t in st.signature.outputs]) == []
    assert "torch==" in (by_key["torch_export"].path / "pack_env.sh").read_text()
    # torch_export served by model.py == the reference
    sample, ref = npz.load(torch_ws / "samples/inputs/000.npz"), npz.load(torch_ws / "samples/reference/000.npz")
    model, cfg = load_model(by_key["torch_export"].path)
    out = infer(pb_utils, model, sample)
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-5)
    _check_outputs_against_config(out, cfg, sample["x"].shape[0])
    # TorchScript through model.py too (--python-backend): our names outside, INPUT__0 inside
    py = emit(torch_ws, {"repo": tmp_path / "repo", "formats": "torchscript", "python_backend": True,
                         "model_name": "ts_py"})
    model, _ = load_model(py.models[0].path)
    np.testing.assert_allclose(infer(pb_utils, model, sample)["y"], ref["y"], rtol=1e-5, atol=1e-5)


@needs_torch
def test_pytorch_names_are_generated_when_the_workspace_has_none(torch_ws, tmp_path):
    ws = tmp_path / torch_ws.name
    shutil.copytree(torch_ws, ws)
    st = status_mod.load(ws / "status.yaml")
    st.formats["torchscript"].io_names = {"x": "x", "y": "y"}
    status_mod.save(st, ws / "status.yaml")
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "torchscript"})
    cfg = text_format.Parse((result.models[0].path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [i.name for i in cfg.input] == ["INPUT__0"] and [o.name for o in cfg.output] == ["OUTPUT__0"]
    assert any("generated from the signature order: x -> INPUT__0, y -> OUTPUT__0" in n for n in result.notes)


@needs_torch
@pytest.mark.slow
def test_aoti_through_the_python_backend_and_natively(torch_ws, tmp_path, pb_utils):
    """A real AOTInductor package (about 15 s to compile on CPU)."""
    import torch
    import torch._inductor

    ws = tmp_path / torch_ws.name
    shutil.copytree(torch_ws, ws)
    ep = torch.export.load(str(ws / "formats/torch_export/model.pt2"))
    torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "model.pt2"))
    add_format(ws, "aoti", "aoti", tmp_path / "model.pt2", {"x": "x", "y": "y"}, "aoti",
               lambda p: torch._inductor.aoti_load_package(str(p)), "aoti (cpu)")
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "aoti"})
    cfg = text_format.Parse((result.models[0].path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.backend == "python" and cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    model, _ = load_model(result.models[0].path)
    sample, ref = npz.load(ws / "samples/inputs/001.npz"), npz.load(ws / "samples/reference/001.npz")
    np.testing.assert_allclose(infer(pb_utils, model, sample)["y"], ref["y"], rtol=1e-5, atol=1e-5)
    native = emit(ws, {"repo": tmp_path / "repo", "formats": "aoti", "aoti_native": True, "model_name": "native"})
    cfg = text_format.Parse((native.models[0].path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (cfg.platform, cfg.backend, [i.name for i in cfg.input]) == ("torch_aoti", "pytorch", ["INPUT__0"])
    with pytest.raises(UserInputError, match="runs on cpu only"):
        emit(ws, {"repo": tmp_path / "repo", "formats": "aoti", "kind": "gpu", "model_name": "gpu"})


# --------------------------------------------------------------------------- ensembles
PRE, POST = models.ENSEMBLE_PRE, models.ENSEMBLE_POST


def _run_ensemble(pb_utils, repo: Path, ensemble_cfg, feeds: dict) -> dict:
    """Walk the ensemble's steps as Triton would: ensemble tensors through input/output maps;
    Python steps through their model.py, the ONNX step through onnxruntime."""
    import onnxruntime as ort

    tensors = dict(feeds)
    pending = list(ensemble_cfg.ensemble_scheduling.step)
    while pending:
        step = next(s for s in pending if all(t in tensors for t in s.input_map.values()))
        pending.remove(step)
        model_dir = repo / step.model_name
        cfg = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
        inputs = {k: tensors[v] for k, v in step.input_map.items()}
        if cfg.backend == "python":
            model, _ = load_model(model_dir)
            out = infer(pb_utils, model, inputs)
        else:
            session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"))
            out = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
        _check_outputs_against_config(out, cfg, next(iter(feeds.values())).shape[0])
        for k, v in step.output_map.items():
            tensors[v] = out[k]
    return {o.name: tensors[o.name] for o in ensemble_cfg.output}


def test_ensemble_with_pre_and_post_processing(mlp, tmp_path, pb_utils, cli):
    (tmp_path / "pre.py").write_text(PRE)
    (tmp_path / "post.py").write_text(POST)
    repo = tmp_path / "repo"
    r = cli("triton", mlp, "--repo", repo, "--preprocess", tmp_path / "pre.py", "--postprocess", tmp_path / "post.py")
    assert r.returncode == 0, r.stdout + r.stderr
    names = sorted(p.name for p in repo.iterdir())
    assert names == ["foldable_mlp", "foldable_mlp_onnx", "foldable_mlp_postprocess", "foldable_mlp_preprocess"]
    configs = {n: text_format.Parse((repo / n / "config.pbtxt").read_text(), mc.ModelConfig()) for n in names}
    ens = configs["foldable_mlp"]
    assert ens.platform == "ensemble" and not ens.instance_group and not ens.model_warmup
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["foldable_mlp_preprocess", "foldable_mlp_onnx",
                                                                    "foldable_mlp_postprocess"]
    assert [(i.name, mc.DataType.Name(i.data_type)) for i in ens.input] == [("pixels", "TYPE_UINT8")]
    assert [(o.name, mc.DataType.Name(o.data_type)) for o in ens.output] == [("label", "TYPE_INT64"),
                                                                             ("score", "TYPE_FP32")]
    assert all(ens.max_batch_size <= c.max_batch_size for n, c in configs.items() if n != "foldable_mlp")
    assert (repo / "foldable_mlp_preprocess" / "1" / "step.py").read_text() == PRE
    assert (repo / "foldable_mlp_onnx" / "1").exists() and (repo / "foldable_mlp" / "1").is_dir()
    # the chain, run step by step through the ensemble's maps, equals the function computed directly
    pixels = np.random.default_rng(3).integers(0, 256, size=(5, 8), dtype=np.uint8)
    out = _run_ensemble(pb_utils, repo, ens, {"pixels": pixels})
    w = models.foldable_mlp_w1() * 2.0
    y = np.maximum((pixels / 255.0).astype(np.float32) @ w, 0)
    np.testing.assert_array_equal(out["label"][:, 0], y.argmax(-1))
    np.testing.assert_allclose(out["score"][:, 0], y.max(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pre, post, message", [
    ("def preprocess(x):\n    return {'x': x, 'extra': x}\n", None,
     "'preprocessed_extra' written by step 'foldable_mlp_preprocess' is never used"),
    ("def preprocess(x):\n    return {'x': x.astype('float64')}\n", None, "inconsistent data type"),
    ("def preprocess(x):\n    return {'x': x[:, :4]}\n", None, "inconsistent shape"),
    ("def preprocess(x):\n    return {'x': x[:3]}\n", None, "not batch-first"),
    ("def preprocess(z):\n    return {'x': z}\n", None, "parameter 'z' is not one of the example inputs"),
    ("def preprocess(x):\n    return [x]\n", None, "return a dict"),
    ("def preprocess(x):\n    raise ValueError('boom')\n", None, "ValueError: boom"),
    (None, "def postprocess(y):\n    return {}\n", "at least one output"),
    (None, "def postprocess(y):\n    return {'x': y}\n", "tensor 'x' is both an ensemble input and an ensemble output"),
    (None, "def nothing():\n    pass\n", "defines no function postprocess"),
    ("def preprocess(x):\n    return {'x': x, 'y': x}\n", "def postprocess(y):\n    return {'z': y}\n",
     "'y' is both a model output and a preprocess output"),
    ("def preprocess(x):\n    return {'x': x, 'k': x[:, :1]}\n", "def postprocess(y, q):\n    return {'z': y}\n",
     "parameter 'q' is not one of the model outputs or preprocess outputs (y, x, k)"),
    ("import numpy as np\ndef example_inputs():\n"
     "    return [{'x': np.zeros((2, 8), 'f4')}, {'w': np.zeros((2, 8), 'f4')}]"
     "\ndef preprocess(x):\n    return {'x': x}\n", None, "batches name different tensors"),
])
def test_ensemble_rule_violations_are_refused_before_writing(mlp, tmp_path, pre, post, message):
    options = {"repo": tmp_path / "repo"}
    if pre:
        (tmp_path / "pre.py").write_text(pre)
        options["preprocess"] = tmp_path / "pre.py"
    if post:
        (tmp_path / "post.py").write_text(post)
        options["postprocess"] = tmp_path / "post.py"
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        emit(mlp, options)
    assert "\n" not in e.value.one_line()
    assert not (tmp_path / "repo").exists()
