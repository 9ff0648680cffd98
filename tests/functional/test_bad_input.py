"""A battery of bad inputs: each one exits 2 with one clear line on stderr and no traceback,
leaves nothing half-written, and the odd-but-valid inputs (bool / int64 / fp16 inputs, unicode
model names) work. The API raises ``navigator.errors.UserInputError`` for the same inputs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from ..conftest import one_line_error

pytestmark = pytest.mark.functional

FAST = ["--no-profile", "--device", "cpu", "--targets", "onnx", "--timeout", "120"]
WS_NAME = "token_classifier.nav.workspace"




def _ok(r, code=0):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    return r


def _no_workspace(wd: Path):
    """An error found before work starts leaves no workspace behind."""
    made = list(wd.glob("*.nav.workspace")) if wd.exists() else []
    assert made == [], made


def _state(ws: Path) -> str:
    return yaml.safe_load((ws / "status.yaml").read_text())["state"]


def _save(model: onnx.ModelProto, path: Path, check: bool = True) -> Path:
    if check:
        onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _make(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="nav-tests")
    model.ir_version = 9
    return model


def _models():
    import importlib.util

    path = Path(__file__).parent.parent / "models.py"
    spec = importlib.util.spec_from_file_location("navigator_test_models_bi", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def done_ws(tmp_path_factory):
    """One finished workspace (token_classifier, onnx only) shared by the status/gate cases."""
    import subprocess

    models = _models()
    root = tmp_path_factory.mktemp("done")
    model = models.save(models.token_classifier(), root / "token_classifier.onnx")
    r = subprocess.run([sys.executable, "-m", "navigator", "convert", str(model), "--workdir", str(root / "wd"),
                        *FAST], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr
    return root / "wd" / WS_NAME


def _copy_ws(done_ws: Path, tmp_path: Path) -> Path:
    import shutil

    ws = tmp_path / WS_NAME
    shutil.copytree(done_ws, ws)
    return ws


# ---------------------------------------------------------------- the model file


def test_corrupt_onnx(cli, tmp_path):
    junk = tmp_path / "garbage.onnx"
    junk.write_bytes(b"\xff\xfe\x00 definitely not protobuf \x07" * 31)
    one_line_error(cli("convert", junk, "--workdir", tmp_path / "wd", *FAST), "garbage.onnx", "ONNX")
    _no_workspace(tmp_path / "wd")


def test_truncated_onnx(cli, tmp_path, onnx_model):
    data = onnx_model().read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) - 200])
    one_line_error(cli("convert", cut, "--workdir", tmp_path / "wd", *FAST), "cut.onnx")
    _no_workspace(tmp_path / "wd")


def test_empty_onnx_file(cli, tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    one_line_error(cli("convert", empty, "--workdir", tmp_path / "wd", *FAST), "empty.onnx")
    _no_workspace(tmp_path / "wd")


def test_onnx_with_missing_external_data(cli, tmp_path):
    model = _models().token_classifier()
    path = tmp_path / "ext" / "ext.onnx"
    path.parent.mkdir()
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.weights", size_threshold=0)
    (path.parent / "ext.weights").unlink()
    one_line_error(cli("convert", path, "--workdir", tmp_path / "wd", *FAST), "ext.weights")
    _no_workspace(tmp_path / "wd")


def test_model_with_no_inputs(cli, tmp_path):
    const = numpy_helper.from_array(np.ones((2, 3), np.float32), "c")
    model = _make([helper.make_node("Identity", ["c"], ["y"])], [],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [const])
    path = _save(model, tmp_path / "noinputs.onnx")
    one_line_error(cli("convert", path, "--workdir", tmp_path / "wd", *FAST), "no inputs")
    _no_workspace(tmp_path / "wd")


def test_model_with_a_sequence_output(cli, tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("SequenceConstruct", ["r", "x"], ["seq"])]
    seq_type = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, ["batch", 4])
    model = _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])], [seq_type])
    path = _save(model, tmp_path / "seqout.onnx")
    one_line_error(cli("convert", path, "--workdir", tmp_path / "wd", *FAST), "'seq'", "sequence")
    _no_workspace(tmp_path / "wd")


def test_bool_int64_fp16_inputs_convert_and_verify(cli, tmp_path):
    """Not bad input: a model with a bool, an int64 and a float16 input must work end to end."""
    nodes = [helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT16),
             helper.make_node("Add", ["h", "ids_f"], ["s"]),
             helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT16),
             helper.make_node("Mul", ["s", "mask_f"], ["y"])]
    inputs = [helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", 4]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4]),
              helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["batch", 4])]
    model = _make(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 4])])
    path = _save(model, tmp_path / "mixed.onnx")
    _ok(cli("convert", path, "--workdir", tmp_path / "wd", *FAST))
    st = yaml.safe_load((tmp_path / "wd" / "mixed.nav.workspace" / "status.yaml").read_text())
    assert st["state"] == "complete"
    assert {i["name"]: i["dtype"] for i in st["signature"]["inputs"]} == {"mask": "bool", "ids": "int64",
                                                                          "h": "float16"}
    assert st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


def _log_model(tmp_path: Path, value: float) -> Path:
    """y = log(x + c); with c = -2 and generated x in [0, 1) every output is log(<0) = NaN."""
    c = numpy_helper.from_array(np.array(value, np.float32), "c")
    nodes = [helper.make_node("Add", ["x", "c"], ["xc"]), helper.make_node("Log", ["xc"], ["y"])]
    model = _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [c])
    return _save(model, tmp_path / "logm.onnx")


def test_nan_outputs_fail_verification_unless_allowed(cli, tmp_path):
    path = _log_model(tmp_path, -0.5)   # log(x - 0.5) with x in [0, 1): NaN where x < 0.5
    r = _ok(cli("convert", path, "--workdir", tmp_path / "wd", *FAST), code=1)
    assert "nan" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    ws = tmp_path / "wd" / "logm.nav.workspace"
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["state"] == "complete"
    verify = st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]
    assert verify["status"] == "failed" and "nan" in verify["reason"].lower(), verify
    _ok(cli("convert", path, "--workdir", tmp_path / "wd", *FAST, "--allow-nan"))
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"   # the finite part


def test_nan_everywhere_allowed_is_inconclusive(cli, tmp_path):
    """--allow-nan on an output that is NaN everywhere masks it all: nothing is compared, and the
    verdict says so instead of ok (exit 1, like any requested target that is not verified)."""
    path = _log_model(tmp_path, -2.0)   # log(x - 2) with x in [0, 1): NaN everywhere
    r = _ok(cli("convert", path, "--workdir", tmp_path / "wd", *FAST, "--allow-nan"), code=1)
    assert "not verified: onnx on onnxruntime-cpu: verification inconclusive" in r.stdout
    st = yaml.safe_load((tmp_path / "wd" / "logm.nav.workspace" / "status.yaml").read_text())
    verify = st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]
    assert verify["status"] == "inconclusive" and "zero (or masked NaN) everywhere" in verify["reason"], verify
    assert st["best"] is None


def test_inf_outputs_that_match_the_reference_pass(cli, tmp_path):
    """log(x * 0) is -inf; inf equal to the reference's inf is not an error (the other columns are
    finite and vary, so the check can fail)."""
    c = numpy_helper.from_array(np.array([[0.0, 1.0, 0.0, 1.0]], np.float32), "z")
    nodes = [helper.make_node("Mul", ["x", "z"], ["xz"]), helper.make_node("Log", ["xz"], ["y"])]
    model = _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [c])
    path = _save(model, tmp_path / "infm.onnx")
    _ok(cli("convert", path, "--workdir", tmp_path / "wd", *FAST))
    st = yaml.safe_load((tmp_path / "wd" / "infm.nav.workspace" / "status.yaml").read_text())
    assert st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


# ---------------------------------------------------------------- samples


def _npz(d: Path, name: str = "000.npz", **arrays) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / name, **arrays)
    return d


def test_truncated_npz_samples(cli, tmp_path, onnx_model):
    d = _npz(tmp_path / "s", ids=np.zeros((4, 16), np.int64))
    data = (d / "000.npz").read_bytes()
    (d / "000.npz").write_bytes(data[: len(data) // 2])
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST), "000.npz")
    _no_workspace(tmp_path / "wd")


def test_npz_needing_pickle_is_refused(cli, tmp_path, onnx_model):
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = [1, 2], {"a": 1}
    d = _npz(tmp_path / "s", ids=obj)
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST),
                    "000.npz", "pickle")
    _no_workspace(tmp_path / "wd")


def test_npz_with_wrong_input_names(cli, tmp_path, onnx_model):
    d = _npz(tmp_path / "s", tokens=np.zeros((4, 16), np.int64))
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST),
                    "'tokens'", "'ids'")
    _no_workspace(tmp_path / "wd")


def test_npz_with_wrong_rank(cli, tmp_path, onnx_model):
    d = _npz(tmp_path / "s", ids=np.zeros((4, 16, 2), np.int64))
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST),
                    "'ids'", "3 dims")
    _no_workspace(tmp_path / "wd")


def test_npz_with_zero_size_batch(cli, tmp_path, onnx_model):
    d = _npz(tmp_path / "s", ids=np.zeros((0, 16), np.int64))
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST),
                    "'ids'", "zero-size")
    _no_workspace(tmp_path / "wd")


def test_samples_out_of_the_embedding_range(cli, tmp_path, onnx_model):
    """ids past the vocabulary: the source itself cannot run them. One line naming the cause,
    without the traceback's source lines and ^^^^ markers; the record is not left `running`."""
    d = _npz(tmp_path / "s", ids=np.full((2, 16), 5000, np.int64))
    line = one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", d, *FAST),
                           "reference outputs could not be computed", "idx=5000")
    assert "^^^" not in line and "File \"" not in line and "_sess.run" not in line, line
    assert _state(tmp_path / "wd" / WS_NAME) != "running"


def test_samples_folder_without_npz(cli, tmp_path, onnx_model):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "readme.txt").write_text("no batches here")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--samples", tmp_path / "s", *FAST),
                    ".npz")
    _no_workspace(tmp_path / "wd")


# ---------------------------------------------------------------- shapes and batching


@pytest.mark.parametrize("spec, needle", [
    ("ids:8x", "ids:8x"),
    ("ids8x16", "ids8x16"),
    ("'ids:8x16", "quote"),
    ("ids:8x-1", "-1"),
    ("ids:0x16", "ids:0x16"),
    (":8x16", ":8x16"),
])
def test_shape_spec_typos(cli, tmp_path, onnx_model, spec, needle):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--shapes", spec, *FAST),
                    "--shapes", needle)
    _no_workspace(tmp_path / "wd")


def test_shape_rank_mismatch(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--shapes", "ids:8x16x3", *FAST),
                    "'ids'", "3 dims", "has 2")
    _no_workspace(tmp_path / "wd")


def test_min_greater_than_max_names_both(cli, tmp_path, onnx_model):
    line = one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--min-shapes", "ids:1x64",
                               "--opt-shapes", "ids:1x64", "--max-shapes", "ids:4x32", *FAST), "ids")
    assert "64" in line and "32" in line, line
    _no_workspace(tmp_path / "wd")


def test_opt_outside_min_max(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--min-shapes", "ids:1x16",
                        "--opt-shapes", "ids:8x64", "--max-shapes", "ids:16x32", *FAST), "ids", "opt")
    _no_workspace(tmp_path / "wd")


@pytest.mark.parametrize("dim", ["2", "-3", "7"])
def test_batch_dim_out_of_range(cli, tmp_path, onnx_model, dim):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", f"--batch-dim={dim}", *FAST),
                    "batch", dim)
    _no_workspace(tmp_path / "wd")


def test_batch_dim_with_no_batching(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--batch-dim", "0", "--no-batching",
                       *FAST), "--batch-dim", "--no-batching")
    _no_workspace(tmp_path / "wd")


@pytest.mark.parametrize("flag, value, needles", [
    ("--value-ranges", "ids:5,5", ("--value-ranges", "ids")),
    ("--value-ranges", "ids:9,2", ("--value-ranges", "ids")),
    ("--dtypes", "ids:int65", ("int65",)),
    ("--compare", "logits:fuzzy", ("fuzzy", "tolerance")),
    ("--atol", "-1e-3", ("--atol", "negative", "-1e-3")),
    ("--atol", "logits:-1", ("--atol", "negative", "logits")),
    ("--rtol", "nan", ("--rtol",)),
    ("--reference", "onnx-bogus", ("--reference", "onnx-bogus", "onnx-optimized")),
    ("--reference", "tensorflw", ("reference", "tensorflw")),
    ("--runners", "onnxruntime,warp-drive", ("warp-drive", "onnxruntime")),
    ("--targets", "onnx,onnx-optimised", ("onnx-optimised", "onnx-optimized")),
    ("--verify-batch-sizes", "1,0", ("--verify-batch-sizes",)),
    ("--max-batch-size", "0", ("max_batch_size", ">= 1")),   # 0 was dropped as if absent
    ("--sample-count", "0", ("sample_count", ">= 1")),
    ("--target-precisions", "fp13", ("fp13",)),
    ("--output-kinds", "nope:logits", ("--output-kinds", "unknown output 'nope'")),   # was dropped silently
    ("--output-kinds", "probs:detections", ("probs:detections", "rank 3")),          # was an IndexError in verify
    ("--compare", "logits:detections=0.9", ("logits:detections", "rank 3")),
])
def test_bad_option_values(cli, tmp_path, onnx_model, flag, value, needles):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", *FAST, f"{flag}={value}"), *needles)
    _no_workspace(tmp_path / "wd")


def test_batch_dim_zero_on_the_command_line_is_not_dropped(cli, tmp_path, onnx_model):
    """`--batch-dim 0` (falsy) once vanished before validation; with no_batching from the config file
    the two must still clash."""
    cfg = tmp_path / "nav.yaml"
    cfg.write_text("no_batching: true\n")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg,
                        "--batch-dim", "0", *FAST), "--batch-dim", "--no-batching", "exclude")
    _no_workspace(tmp_path / "wd")


# ---------------------------------------------------------------- model names and the workdir


@pytest.mark.parametrize("name", ["../../escape", "modèle-ß/../x", "a/b\\c", "/abs/../../x"])
def test_model_name_is_sanitised(cli, tmp_path, onnx_model, name):
    wd = tmp_path / "wd"
    _ok(cli("convert", onnx_model(), "--workdir", wd, "--model-name", name, *FAST))
    made = [p for p in tmp_path.rglob("status.yaml")]
    assert len(made) == 1, made
    ws = made[0].parent
    assert ws.parent == wd and ws.name.endswith(".nav.workspace"), ws
    assert _state(ws) == "complete"
    assert {p.name for p in tmp_path.iterdir()} == {"wd", "models"}


def test_model_name_without_usable_characters(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--model-name", "..", *FAST),
                    "'..'", "no usable characters")
    assert not (tmp_path / "wd").exists()


def test_unwritable_workdir(cli, tmp_path, onnx_model):
    if os.geteuid() == 0:
        pytest.skip("running as root (euid 0): root ignores directory permissions, so chmod 555 cannot "
                    "make the workdir unwritable")
    wd = tmp_path / "ro"
    wd.mkdir()
    wd.chmod(0o555)
    try:
        one_line_error(cli("convert", onnx_model(), "--workdir", wd, *FAST), "--workdir", str(wd),
                        "Permission denied")
        assert list(wd.iterdir()) == []
    finally:
        wd.chmod(0o755)


def test_unwritable_workdir_through_the_api(tmp_path, onnx_model, monkeypatch):
    """The same path as root can reach: the workspace folder cannot be created (PermissionError)."""
    import pathlib

    import navigator
    from navigator.errors import UserInputError

    real_mkdir = pathlib.Path.mkdir

    def mkdir(self, *a, **k):
        if self.name.endswith(".nav.workspace"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    model = onnx_model()
    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    with pytest.raises(UserInputError, match="--workdir: cannot create .*Permission denied"):
        navigator.convert(model, workdir=tmp_path / "wd", targets=["onnx"], no_profile=True, device="cpu")
    _no_workspace(tmp_path / "wd")


def test_workdir_is_a_file(cli, tmp_path, onnx_model):
    f = tmp_path / "afile"
    f.write_text("x")
    one_line_error(cli("convert", onnx_model(), "--workdir", f, *FAST), "--workdir", "afile", "Not a directory")
    assert f.read_text() == "x"


# ---------------------------------------------------------------- config files


@pytest.mark.parametrize("text, needles", [
    ("max_batch_size: 8\nmax_bach_size: 4\n", ("max_bach_size",)),
    ("max_batch_size: [8]\n", ("max_batch_size",)),
    ("atol: lots\n", ("atol",)),
    ("no_profile: maybe\n", ("no_profile",)),
    ("- just\n- a list\n", ("mapping",)),
    ("max_batch_size: 8\n  bad: indentation: here\n", ("nav.yaml",)),
])
def test_config_file_errors(cli, tmp_path, onnx_model, text, needles):
    cfg = tmp_path / "nav.yaml"
    cfg.write_text(text)
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg, *FAST),
                    *needles)
    _no_workspace(tmp_path / "wd")


# ---------------------------------------------------------------- gate, status


@pytest.mark.parametrize("policy, needles", [
    ("require_formats: [onnx, tensorflw]\n", ("require_formats", "tensorflw", "unknown format")),
    ("min_throughput: {onnx: 10, tensorflw-fp16: 10}\n", ("min_throughput", "tensorflw-fp16")),
    ("max_p99_ms: {'': 5}\n", ("max_p99_ms",)),
    ("require_formatz: [onnx]\n", ("require_formatz",)),
    ("max_regression: lots\n", ("max_regression",)),
])
def test_gate_policy_errors(cli, tmp_path, done_ws, policy, needles):
    ws = _copy_ws(done_ws, tmp_path)
    p = tmp_path / "p.yaml"
    p.write_text(policy)
    one_line_error(cli("gate", ws, "--policy", p), *needles)
    assert not (ws / "report" / "gate.json").exists()


def test_status_from_a_newer_schema(cli, tmp_path, done_ws):
    ws = _copy_ws(done_ws, tmp_path)
    st = yaml.safe_load((ws / "status.yaml").read_text())
    st["schema_version"] = 99
    (ws / "status.yaml").write_text(yaml.safe_dump(st))
    one_line_error(cli("status", ws), "schema_version 99", "newer")


@pytest.mark.parametrize("text", ["schema_version: 1\nstate: [unclosed\n", "\x00\x01\x02", "just a string\n",
                                  "schema_version: 1\nstate: complete\nformats: 7\n",
                                  "schema_version: 1\nmodel: 5\n", "schema_version: 1\nbest: 3\n",
                                  "schema_version: 1\nsignature: {inputs: [3]}\n", "{}\n", "schema_version: x\n"])
def test_status_of_a_corrupt_status_yaml(cli, tmp_path, done_ws, text):
    ws = _copy_ws(done_ws, tmp_path)
    (ws / "status.yaml").write_text(text)
    one_line_error(cli("status", ws), "status.yaml")


# ---------------------------------------------------------------- the Python API


@pytest.mark.parametrize("options, needle", [
    ({"shapes": "ids:8x"}, "ids:8x"),
    ({"value_ranges": "ids:3,1"}, "ids"),
    ({"compare": {"logits": "fuzzy"}}, "fuzzy"),
    ({"atol": -1.0}, "atol"),
    ({"batch_dim": 5}, "batch"),
    ({"max_batch_size": "eight"}, "max_batch_size"),
])
def test_api_raises_user_input_error(tmp_path, onnx_model, options, needle):
    import navigator
    from navigator.errors import UserInputError

    with pytest.raises(UserInputError) as e:
        navigator.convert(onnx_model(), workdir=tmp_path / "wd", targets=["onnx"], no_profile=True, device="cpu",
                          **options)
    assert needle in e.value.one_line()
    _no_workspace(tmp_path / "wd")


def test_api_truncated_and_missing_model(tmp_path, onnx_model):
    import navigator
    from navigator.errors import UserInputError

    data = onnx_model().read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[:100])
    with pytest.raises(UserInputError, match="cut.onnx: not a valid ONNX model"):
        navigator.convert(cut, workdir=tmp_path / "wd", targets=["onnx"], no_profile=True, device="cpu")
    with pytest.raises(UserInputError, match="nope.onnx"):
        navigator.convert(tmp_path / "nope.onnx", workdir=tmp_path / "wd", targets=["onnx"], no_profile=True,
                          device="cpu")
    _no_workspace(tmp_path / "wd")


def test_api_bad_samples(tmp_path, onnx_model):
    import navigator
    from navigator.errors import UserInputError

    with pytest.raises(UserInputError, match="'tokens'"):
        navigator.convert(onnx_model(), [{"tokens": np.zeros((2, 16), np.int64)}], workdir=tmp_path / "wd",
                          targets=["onnx"], no_profile=True, device="cpu")
    with pytest.raises(UserInputError, match="expected a numeric or bool tensor, got ndarray of dtype object"):
        navigator.convert(onnx_model(), [{"ids": np.array([[1, "a"]], dtype=object)}], workdir=tmp_path / "wd",
                          targets=["onnx"], no_profile=True, device="cpu")
    with pytest.raises(UserInputError, match="no batches"):
        navigator.convert(onnx_model(), [], workdir=tmp_path / "wd", targets=["onnx"], no_profile=True, device="cpu")
    with pytest.raises(UserInputError, match="dtype float32, the model expects int64"):
        navigator.convert(onnx_model(), [{"ids": np.zeros((2, 16), np.float32)}], workdir=tmp_path / "wd",
                          targets=["onnx"], no_profile=True, device="cpu")
    with pytest.raises(UserInputError, match="'ids' has 1 dims"):
        navigator.convert(onnx_model(), [{"ids": np.zeros((2,), np.int64)}], workdir=tmp_path / "wd",
                          targets=["onnx"], no_profile=True, device="cpu")
    _no_workspace(tmp_path / "wd")


def test_bad_input_leaves_an_existing_workspace_untouched(cli, tmp_path, done_ws):
    """A re-run refused for bad input neither rewrites nor half-resets the earlier, complete record."""
    wd = tmp_path / "wd"
    wd.mkdir()
    ws = _copy_ws(done_ws, wd)
    before = (ws / "status.yaml").read_bytes()
    files = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    model = _models().save(_models().token_classifier(), tmp_path / "token_classifier.onnx")
    for bad in (["--shapes", "ids:8x"], ["--reference", "onnx-bogus"], ["--runners", "warp-drive"]):
        one_line_error(cli("convert", model, "--workdir", wd, *FAST, *bad), bad[1])
        assert (ws / "status.yaml").read_bytes() == before
        assert _state(ws) == "complete"
        assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == files


@pytest.mark.parametrize("exc, expect_state", [(ValueError, "complete"), (KeyboardInterrupt, "interrupted")])
def test_a_raising_verify_func_never_leaves_state_running(tmp_path, onnx_model, exc, expect_state):
    """A user's verify_func that raises fails that format (or interrupts the run): never a
    traceback out of the API for a plain exception, never a record stuck at `running`."""
    import navigator
    from navigator.errors import Interrupted

    def verify_func(ref, out):
        raise exc("user verify_func bug")

    kwargs = dict(workdir=tmp_path / "wd", targets=["onnx"], no_profile=True, device="cpu", verify_func=verify_func)
    if exc is KeyboardInterrupt:
        with pytest.raises(Interrupted):
            navigator.convert(onnx_model(), **kwargs)
    else:
        result = navigator.convert(onnx_model(), **kwargs)
        assert result.exit_code == 1 and "verify_func raised ValueError" in result.failures[0], result.failures
    assert _state(tmp_path / "wd" / WS_NAME) == expect_state


@pytest.mark.parametrize("argv, needles", [
    (["convert"], ("navigator convert", "required", "MODEL")),
    (["convert", "m.onnx", "--no-such-flag"], ("unrecognized", "--no-such-flag")),
    (["convert", "m.onnx", "--max-batch-size", "many"], ("--max-batch-size", "many")),
    (["no-such-command"], ("invalid choice", "no-such-command")),
])
def test_argparse_errors_are_one_line(cli, argv, needles):
    """Errors found by argparse itself (unknown flags, bad types, missing arguments)."""
    one_line_error(cli(*argv), *needles)

