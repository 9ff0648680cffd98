"""Bad input: one clear line on stderr, exit 2, no traceback, nothing half-written."""

from __future__ import annotations

import pytest

from navigator.workspace.lock import WorkspaceLock

from ..conftest import one_line_error

pytestmark = pytest.mark.functional




def test_missing_file(cli, tmp_path):
    one_line_error(cli("convert", tmp_path / "nope.onnx", "--workdir", tmp_path / "wd"), "nope.onnx",
                    "no such file")
    assert not (tmp_path / "wd").exists()


def test_malformed_shape_spec(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--shapes", "ids:8xx16"),
                    "--shapes", "x16")
    assert not (tmp_path / "wd").exists()


def test_min_greater_than_max(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--min-shapes", "ids:1x64",
                        "--opt-shapes", "ids:8x32", "--max-shapes", "ids:16x32"), "ids", "min", "max")


def test_shape_for_unknown_input(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--shapes", "tokens:8x16"),
                    "'tokens'", "'ids'")


def test_unknown_target_lists_valid_ones(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--targets", "onnx,tensorflw"),
                    "tensorflw", "onnx-optimized")


def test_corrupt_and_truncated_onnx(cli, tmp_path, onnx_model):
    good = onnx_model()
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    one_line_error(cli("convert", bad, "--workdir", tmp_path / "wd"), "truncated.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01not a model at all" * 10)
    one_line_error(cli("convert", junk, "--workdir", tmp_path / "wd"), "junk.onnx")


def test_unknown_output_in_tolerances(cli, tmp_path, onnx_model):
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--atol", "logitz:1e-3"),
                    "'logitz'", "'logits'")


def test_config_file_with_unknown_key(cli, tmp_path, onnx_model):
    cfg = tmp_path / "nav.yaml"
    cfg.write_text("max_batch_size: 8\nmax_batchsize: 4\n")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg),
                    "max_batchsize")
    cfg.write_text("max_batch_size: eight\n")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg),
                    "max_batch_size", "int")


def test_workspace_in_use_exits_2(cli, tmp_path, onnx_model):
    model = onnx_model()
    ws = tmp_path / "wd" / "token_classifier.nav.workspace"
    with WorkspaceLock(ws / "navigator.lock"):
        line = one_line_error(cli("convert", model, "--workdir", tmp_path / "wd"), "in use")
    import os

    assert f"pid {os.getpid()}" in line
    assert not (ws / "status.yaml").exists()   # the refused run wrote nothing


def test_status_of_a_non_workspace(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(cli("status", tmp_path / "empty"), "not a Navigator workspace")


def test_internal_error_exit_3_with_traceback_in_log(cli, tmp_path, onnx_model, monkeypatch):
    """A bug (simulated by a sitecustomize that breaks the pipeline) exits 3 with one line;
    the traceback is in the named log and shown with --verbose."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import navigator.pipeline.outcome as p\n"
        "def boom(*a, **k):\n    raise ZeroDivisionError('planted bug')\n"
        "p.select_best = boom\n")
    r = cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--no-profile", env={"PYTHONPATH": str(hook)})
    assert r.returncode == 3, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("internal error: ZeroDivisionError: planted bug")
    log_path = line.split("traceback in ")[1].split(";")[0]
    assert "Traceback" in open(log_path).read()
    assert "Traceback" not in r.stderr
    r = cli("--verbose", "convert", onnx_model(), "--workdir", tmp_path / "wd", "--no-profile",
            env={"PYTHONPATH": str(hook)})
    assert r.returncode == 3 and "Traceback" in r.stderr


def test_cuda_without_a_gpu(cli, tmp_path, onnx_model):
    from navigator import deps

    if deps.gpu_present():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--device", "cuda"),
                    "--device cuda", "no NVIDIA GPU")


def test_converter_params_from_the_config_file(cli, tmp_path, onnx_model):
    cfg = tmp_path / "nav.yaml"
    cfg.write_text("converter_params: {onnx_to_onnx_optimized: {slim: false}}\nno_profile: true\n")
    r = cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg, "--targets",
            "onnx,onnx-optimized", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    import json

    ws = tmp_path / "wd" / "token_classifier.nav.workspace"
    params = json.loads((ws / "formats" / "onnx-optimized" / "params.json").read_text())
    assert params["slim"] is False
    import yaml

    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["formats"]["onnx-optimized"]["convert"]["exporter"] == "graphsurgeon"
    cfg.write_text("converter_params: {onnx_to_onnx_optimized: {slimm: false}}\n")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg), "slimm",
                    "fold_constants")
    cfg.write_text("converter_params: {onnx_to_tensorflow: {x: 1}}\n")
    one_line_error(cli("convert", onnx_model(), "--workdir", tmp_path / "wd", "--config-path", cfg),
                    "onnx_to_tensorflow")


def test_samples_must_lie_in_some_profile(cli, tmp_path, onnx_model):
    """Two disjoint profiles (prefill / decode): each sample needs one that holds it."""
    model = onnx_model()
    ok = cli("convert", model, "--workdir", tmp_path / "wd", "--no-profile", "--device", "cpu", "--targets", "onnx",
             "--shapes", "ids:2x64", "--shapes", "ids:8x1",
             "--min-shapes", "ids:1x16", "--opt-shapes", "ids:2x64", "--max-shapes", "ids:4x128",
             "--min-shapes", "ids:1x1", "--opt-shapes", "ids:8x1", "--max-shapes", "ids:16x1")
    assert ok.returncode == 0, ok.stderr
    import yaml

    st = yaml.safe_load((tmp_path / "wd" / "token_classifier.nav.workspace" / "status.yaml").read_text())
    assert len(st["shape_profiles"]) == 2
    shapes = [s["ids"] for s in st["samples"]["shapes"]]
    assert shapes[:2] == [[2, 64], [8, 1]]                  # the given samples, then the profiles' corners
    assert [shapes[i] for i in st["samples"]["corners"]] == shapes[2:] == [[1, 16], [4, 128], [16, 1]]
    one_line_error(cli("convert", model, "--workdir", tmp_path / "wd2", "--shapes", "ids:8x32",
                        "--min-shapes", "ids:1x16", "--opt-shapes", "ids:2x16", "--max-shapes", "ids:4x16",
                        "--min-shapes", "ids:1x1", "--opt-shapes", "ids:8x1", "--max-shapes", "ids:16x1"),
                    "lies outside every shape profile")
