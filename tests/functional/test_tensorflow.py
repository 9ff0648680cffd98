"""TensorFlow sources end to end with real tensorflow-cpu and tf2onnx: a SavedModel
directory through the CLI, a Keras model through the API, the tensorflow runner as
the reference, savedmodel -> onnx -> onnx-optimized verified and profiled."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from navigator import deps
from navigator.errors import UserInputError
from navigator.workspace import npz

from ..conftest import FAST

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not (deps.has("tensorflow") and deps.has("tf2onnx")),
                                 reason="needs tensorflow and tf2onnx (extra 'tensorflow': tensorflow-cpu, tf2onnx)")]


def _two_input_saved_model(path):
    """x [None, 4], y [None, 3] -> {"sum": [None, 2], "norm": [None]}; a second signature "halves"."""
    import tensorflow as tf

    class TwoInputs(tf.Module):
        def __init__(self):
            super().__init__()
            tf.random.set_seed(0)
            self.w = tf.Variable(tf.random.normal([4, 2]))
            self.v = tf.Variable(tf.random.normal([3, 2]))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                      tf.TensorSpec([None, 3], tf.float32, name="y")])
        def __call__(self, x, y):
            return {"sum": tf.nn.relu(tf.matmul(x, self.w) + tf.matmul(y, self.v)),
                    "norm": tf.reduce_sum(x * x, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def halves(self, x):
            return {"half": x * 0.5}

    m = TwoInputs()
    tf.saved_model.save(m, str(path), signatures={"serving_default": m.__call__, "halves": m.halves})
    return m


def _formats(st):
    return {k: f for k, f in st["formats"].items()}


def test_saved_model_cli_two_inputs_dynamic_batch(cli, tmp_path):
    sm = tmp_path / "two_inputs" / "1"
    _two_input_saved_model(sm)
    r = cli("convert", sm, "--workdir", tmp_path / "wd", *FAST)
    assert r.returncode == 0, r.stderr + r.stdout
    ws = tmp_path / "wd" / "two_inputs.nav.workspace"       # .../two_inputs/1 -> named after the parent
    st = yaml.safe_load((ws / "status.yaml").read_text())
    from navigator.workspace import schema

    schema.validate(st)
    assert st["model"]["source_format"] == "savedmodel"
    assert st["signature"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4]},
                                         {"name": "y", "dtype": "float32", "shape": [-1, 3]}]
    assert st["signature"]["outputs"] == [{"name": "norm", "dtype": "float32", "shape": [-1]},
                                          {"name": "sum", "dtype": "float32", "shape": [-1, 2]}]
    assert st["batch_dim"] == 0
    fmts = _formats(st)
    assert list(fmts) == ["savedmodel", "onnx", "onnx-optimized"]
    assert (ws / "formats" / "savedmodel" / "model.savedmodel" / "saved_model.pb").is_file()
    assert not list((ws / "formats" / "savedmodel").glob("*.part"))
    assert fmts["savedmodel"]["convert"]["exporter"] == "copy"
    assert list(fmts["savedmodel"]["runners"]) == ["tensorflow-cpu"]
    onnx_fmt = fmts["onnx"]
    assert onnx_fmt["convert"]["exporter"].startswith(f"tf2onnx {deps.version('tf2onnx')} opset 17")
    assert onnx_fmt["io_names"] == {"x": "x", "y": "y", "norm": "norm", "sum": "sum"}
    for key, fmt in fmts.items():
        assert fmt["convert"]["status"] == "ok", (key, fmt)
        for runner in fmt["runners"].values():
            assert runner["verify"]["status"] == "ok", (key, runner)
            assert runner["verify"]["batch_sizes"] == [1, 8]
            assert set(runner["verify"]["outputs"]) == {"norm", "sum"}
            assert runner["profile"]["status"] == "ok", (key, runner)
    # the reference came from TensorFlow, and it matches the model itself
    import tensorflow as tf

    loaded = tf.saved_model.load(str(sm)).signatures["serving_default"]
    inp = npz.load(ws / "samples" / "inputs" / "000.npz")
    ref = npz.load(ws / "samples" / "reference" / "000.npz")
    assert inp["x"].shape[0] > 1
    want = loaded(x=tf.constant(inp["x"]), y=tf.constant(inp["y"]))
    np.testing.assert_allclose(ref["sum"], want["sum"].numpy(), rtol=1e-6, atol=1e-6)
    out = npz.load(ws / "formats" / "onnx" / "outputs" / "onnxruntime-cpu" / "000.npz")
    np.testing.assert_allclose(out["sum"], ref["sum"], atol=1e-5)
    # the ONNX model keeps the dynamic batch
    import onnx

    model = onnx.load(str(ws / "formats" / "onnx" / "model.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 0
    assert "tf2onnx" in (ws / "formats" / "onnx" / "reproduce.sh").read_text()


def test_saved_model_other_signature_and_bad_one(cli, tmp_path):
    sm = tmp_path / "sm"
    _two_input_saved_model(sm)
    bad = cli("convert", sm, "--workdir", tmp_path / "wd", "--signature", "nope", *FAST)
    assert bad.returncode != 0
    err = bad.stderr.strip().splitlines()
    assert any("no signature 'nope'" in line and "'halves'" in line and "'serving_default'" in line
               for line in err), bad.stderr
    assert "Traceback" not in bad.stderr
    r = cli("convert", sm, "--workdir", tmp_path / "wd", "--signature", "halves", "--targets", "savedmodel,onnx",
            *FAST)
    assert r.returncode == 0, r.stderr + r.stdout
    st = yaml.safe_load((tmp_path / "wd" / "sm.nav.workspace" / "status.yaml").read_text())
    assert [t["name"] for t in st["signature"]["inputs"]] == ["x"]
    assert [t["name"] for t in st["signature"]["outputs"]] == ["half"]
    assert "signature halves" in st["formats"]["onnx"]["convert"]["exporter"]
    params = json.loads((tmp_path / "wd" / "sm.nav.workspace" / "formats" / "onnx" / "params.json").read_text())
    assert params["signature"] == "halves"
    for fmt in st["formats"].values():
        assert all(r["verify"]["status"] == "ok" for r in fmt["runners"].values()), fmt


def test_keras_model_through_the_api(tmp_path):
    import keras

    import navigator

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,), name="feat"), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(3, name="logits")], name="tiny_keras")
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((2, 5)).astype("float32") for _ in range(3)]
    result = navigator.convert(model, samples=samples, workdir=tmp_path / "wd", profile_budget_s=1,
                               max_batch_size=4, device="cpu")
    assert result.exit_code == 0, result.failures
    ws = result.workspace
    assert ws.name == "tiny_keras.nav.workspace"
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["signature"]["inputs"] == [{"name": "feat", "dtype": "float32", "shape": [-1, 5]}]
    assert st["signature"]["outputs"] == [{"name": "output_0", "dtype": "float32", "shape": [-1, 3]}]
    fmts = _formats(st)
    assert list(fmts) == ["savedmodel", "onnx", "onnx-optimized"]
    assert fmts["savedmodel"]["isolated"] is False
    assert fmts["savedmodel"]["convert"]["exporter"].startswith("keras ")
    # Keras 3 names the signature's output output_0, not after the layer: the map is recorded
    name_map = json.loads((ws / "formats" / "savedmodel" / "name_map.json").read_text())
    assert name_map == {"output_0": "logits"}
    for key, fmt in fmts.items():
        assert fmt["convert"]["status"] == "ok", (key, fmt)
        assert fmt["runners"], key
        for runner in fmt["runners"].values():
            assert runner["verify"]["status"] == "ok", (key, runner)
            assert runner["profile"]["status"] == "ok", (key, runner)
    # the samples given are the samples stored, and the reference is the model's own output
    stored = npz.load(ws / "samples" / "inputs" / "000.npz")
    np.testing.assert_array_equal(stored["feat"], samples[0])
    ref = npz.load(ws / "samples" / "reference" / "000.npz")
    np.testing.assert_allclose(ref["output_0"], np.asarray(model(samples[0])), rtol=1e-5, atol=1e-6)


def test_unbuilt_keras_model_is_a_user_error(tmp_path):
    import keras

    import navigator

    model = keras.Sequential([keras.layers.Dense(3)])   # no input shape: cannot be exported
    with pytest.raises(UserInputError) as e:
        navigator.convert(model, samples=[np.zeros((2, 5), "float32")], workdir=tmp_path / "wd", device="cpu")
    assert "\n" not in e.value.one_line()


def test_directory_without_saved_model_is_a_user_error(tmp_path):
    from navigator.sources import open_source

    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="not a SavedModel directory"):
        open_source(tmp_path / "empty", "savedmodel")


def test_import_navigator_does_not_import_tensorflow():
    code = ("import sys, navigator, navigator.api, navigator.cli.main, navigator.runners, navigator.sources; "
            "from navigator.converters.registry import registry; registry.edges(); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_tf_module_without_input_signature_through_the_api(tmp_path):
    """The signature comes from the first sample (dim 0 dynamic), named after __call__'s
    parameters and in their order, though a SavedModel stores them unordered."""
    import tensorflow as tf

    import navigator

    class Affine(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.reshape(tf.range(8, dtype=tf.float32), [4, 2]))

        @tf.function
        def __call__(self, x, bias):
            return tf.matmul(x, self.w) + bias

    rng = np.random.default_rng(1)
    samples = [(rng.standard_normal((3, 4)).astype("float32"), rng.standard_normal((3, 2)).astype("float32"))
               for _ in range(2)]
    result = navigator.convert(Affine(), samples=samples, workdir=tmp_path / "wd", targets="savedmodel,onnx",
                               profile_budget_s=1, max_batch_size=4, device="cpu")
    assert result.exit_code == 0, result.failures
    st = yaml.safe_load((result.workspace / "status.yaml").read_text())
    assert st["signature"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4]},
                                         {"name": "bias", "dtype": "float32", "shape": [-1, 2]}]
    assert st["formats"]["savedmodel"]["convert"]["exporter"].startswith("tensorflow ")
    stored = npz.load(result.workspace / "samples" / "inputs" / "000.npz")
    np.testing.assert_array_equal(stored["bias"], samples[0][1])
    for fmt in st["formats"].values():
        assert all(r["verify"]["status"] == "ok" for r in fmt["runners"].values()), fmt
