"""The CPU stand-ins' load-time checks (navigator/triton/standins/): config.pbtxt against
the model, as Triton's onnxruntime / openvino backends check it. The stand-ins are test
doubles of NVIDIA's C++ backends; here they run outside Triton (no
triton_python_backend_utils: initialize() only loads and checks)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from navigator import deps
from navigator.triton import server

from ..conftest import models

STANDINS = Path(server.__file__).resolve().parent / "standins"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load(STANDINS / "model.py", "navigator_test_standin_common")


def _cfg(mbs=4, x=("x", "TYPE_FP32", [8]), y=("y", "TYPE_FP32", [8]), **extra):
    cfg = {"name": "m", "max_batch_size": mbs,
           "input": [{"name": x[0], "data_type": x[1], "dims": [str(d) for d in x[2]]}],
           "output": [{"name": y[0], "data_type": y[1], "dims": y[2]}]}
    cfg.update(extra)
    return cfg


MODEL_IN = {"x": ("TYPE_FP32", [-1, 8])}
MODEL_OUT = {"y": ("TYPE_FP32", [-1, 8])}


def test_a_matching_config_passes():
    common.check("m", "onnxruntime", _cfg(), MODEL_IN, MODEL_OUT)
    common.check("m", "onnxruntime", _cfg(mbs=0, x=("x", "TYPE_FP32", [3, 8]), y=("y", "TYPE_FP32", [-1, 8])),
                 MODEL_IN, MODEL_OUT)                              # no batching: every dim explicit
    common.check("m", "openvino", _cfg(), {"x": ("TYPE_FP32", None)}, MODEL_OUT)   # rank unknown


@pytest.mark.parametrize("cfg, model_in, message", [
    (_cfg(x=("z", "TYPE_FP32", [8])), MODEL_IN, "unexpected input 'z' in the configuration; the model's inputs are: x"),
    (_cfg(y=("w", "TYPE_FP32", [8])), MODEL_IN, "unexpected output 'w'"),
    (_cfg(x=("x", "TYPE_INT64", [8])), MODEL_IN, "input 'x' is TYPE_FP32 in the model but TYPE_INT64 in the config"),
    (_cfg(x=("x", "TYPE_FP32", [9])), MODEL_IN, "the model expects shape [-1,8] but the configuration gives [-1,9]"),
    (_cfg(x=("x", "TYPE_FP32", [8, 1])), MODEL_IN, "gives [-1,8,1]"),
    (_cfg(), {"x": ("TYPE_FP32", [4, 8])}, "max_batch_size > 0 but the first dimension of input 'x' is not variable"),
    (_cfg(mbs=0), MODEL_IN, "the model expects shape [-1,8] but the configuration gives [8]"),
    (_cfg(x=("x", "TYPE_FP32", [-1])), {"x": ("TYPE_FP32", [-1, 8])}, "gives [-1,-1]"),
    (_cfg(), {**MODEL_IN, "mask": ("TYPE_BOOL", [-1, 8])}, "the configuration expects 1 inputs, the model provides 2"),
])
def test_a_mismatch_fails_the_load_naming_the_tensor(cfg, model_in, message):
    with pytest.raises(common.ModelConfigMismatch) as e:
        common.check("m", "onnxruntime", cfg, model_in, MODEL_OUT)
    assert message in str(e.value)
    assert str(e.value).startswith("onnxruntime stand-in: model 'm'")


def test_reshape_is_what_the_model_sees():
    cfg = _cfg(x=("x", "TYPE_FP32", [2, 4]))
    cfg["input"][0]["reshape"] = {"shape": ["8"]}
    common.check("m", "onnxruntime", cfg, MODEL_IN, MODEL_OUT)


def _args(folder: Path, cfg: dict) -> dict:
    return {"model_config": json.dumps(cfg), "model_repository": str(folder), "model_version": "1",
            "model_name": "m"}


@pytest.mark.skipif(not deps.has("onnxruntime"), reason="needs onnxruntime")
def test_onnxruntime_stand_in_loads_and_checks_a_real_model(tmp_path, capsys):
    models.save(models.foldable_mlp(), tmp_path / "1" / "model.onnx")
    module = _load(STANDINS / "model.py", "navigator_test_ort_standin")
    standin = module.OnnxruntimeStandin()
    standin.initialize(_args(tmp_path, _cfg()))
    assert "stand-in for Triton's onnxruntime backend (a test double" in capsys.readouterr().out
    out = standin.run({"x": __import__("numpy").ones((2, 8), "float32")})
    assert out["y"].shape == (2, 8)
    with pytest.raises(module.ModelConfigMismatch, match="unexpected input 'ids'"):
        standin.initialize(_args(tmp_path, _cfg(x=("ids", "TYPE_FP32", [8]))))
    with pytest.raises(Exception, match="unable to find .*other.onnx"):
        standin.initialize(_args(tmp_path, _cfg(default_model_filename="other.onnx")))


@pytest.mark.skipif(not deps.has("openvino"), reason="needs openvino")
def test_openvino_stand_in_reads_onnx_when_the_config_names_it(tmp_path):
    models.save(models.foldable_mlp(), tmp_path / "1" / "model.onnx")
    standin = _load(STANDINS / "model.py", "navigator_test_ov_standin").OpenVINOStandin()
    with pytest.raises(Exception, match="unable to find .*model.xml"):
        standin.initialize(_args(tmp_path, _cfg()))
    standin.initialize(_args(tmp_path, _cfg(default_model_filename="model.onnx")))
    with pytest.raises(Exception, match="input 'x' is TYPE_FP32 in the model but TYPE_FP16"):
        standin.initialize(_args(tmp_path, _cfg(default_model_filename="model.onnx", x=("x", "TYPE_FP16", [8]))))


def test_stand_ins_say_they_are_test_doubles():
    assert "TEST DOUBLES" in (STANDINS / "model.py").read_text()


def test_the_backend_folder_picks_the_stand_in(tmp_path):
    """One file serves both backends: the folder Triton finds it in decides; elsewhere it refuses to load."""
    for folder, cls in (("onnxruntime", "OnnxruntimeStandin"), ("openvino", "OpenVINOStandin"), ("other", None)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.py").write_text((STANDINS / "model.py").read_text())
        module = _load(tmp_path / folder / "model.py", f"navigator_test_standin_{folder}")
        if cls:
            assert module.TritonPythonModel is getattr(module, cls)
        else:
            with pytest.raises(module.ModelConfigMismatch, match="not inside a backend folder"):
                module.TritonPythonModel().initialize({})
