"""`navigator convert` / `navigator status` end to end on real ONNX models with
real onnxruntime, onnx-graphsurgeon, Polygraphy and (when installed) OpenVINO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from navigator import deps
from navigator.workspace import npz

from ..conftest import FAST, ROOT

pytestmark = pytest.mark.functional


def _ws(tmp_path, name):
    return tmp_path / "wd" / f"{name}.nav.workspace"


def test_example_model_end_to_end(cli, tmp_path):
    """The README's first command, on the shipped example."""
    r = cli("convert", ROOT / "examples" / "tiny_classifier.onnx", "--workdir", tmp_path / "wd", *FAST)
    assert r.returncode == 0, r.stderr + r.stdout
    ws = _ws(tmp_path, "tiny_classifier")
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["schema_version"] == 5 and st["state"] == "complete"
    from navigator.workspace import schema

    schema.validate(st)
    expected = ["onnx", "onnx-optimized"] + (["openvino"] if deps.has("openvino") else [])
    assert list(st["formats"]) == expected
    for key in expected:
        fmt = st["formats"][key]
        assert fmt["convert"]["status"] == "ok", fmt
        for rkey, runner in fmt["runners"].items():
            if rkey == "openvino-default":   # how Triton serves it: the plugin's default precision
                if not deps.cpu_bf16():      # f32 here, as openvino-cpu runs it
                    assert runner["verify"]["status"] == "skipped" and "f32" in runner["verify"]["reason"]
                else:                        # bf16, judged by classes: 82 generated rows cannot show 99%
                    assert runner["verify"]["status"] == "inconclusive" and "300 or more" in runner["verify"]["reason"]
                    assert st["best"]["key"] != "openvino"   # not served as verified: never best
                continue
            assert runner["verify"]["status"] == "ok", runner
            assert runner["verify"]["batch_sizes"] == [1, 8]
            assert runner["profile"]["status"] == "ok"
            assert [r["batch_size"] for r in runner["profile"]["results"]][0] == 1
            assert set(runner["verify"]["outputs"]) == {"logits", "probs"}
            for check in runner["verify"]["outputs"].values():   # each check rejected a wrong answer
                assert check["conclusive"] is True and check["scale"] > 0.01, check
                assert check["atol"] == pytest.approx(check["scale"] * 3e-4)
        assert (ws / "formats" / key / "reproduce.sh").is_file()
    assert st["best"]["key"] in expected and st["best"]["basis"] == "profile"
    # samples: ids bounded by the embedding table's 1000 rows
    ids = npz.load(ws / "samples" / "inputs" / "000.npz")["ids"]
    assert ids.dtype == np.int64 and ids.shape == (8, 16) and ids.max() < 1000
    ref = npz.load(ws / "samples" / "reference" / "000.npz")
    assert set(ref) == {"logits", "probs"} and ref["logits"].shape == (8, 8)
    out = npz.load(ws / "formats" / "onnx-optimized" / "outputs" / "onnxruntime-cpu" / "000.npz")
    np.testing.assert_allclose(out["probs"], ref["probs"], atol=1e-5)
    # the table and the best line
    assert "best:" in r.stdout and "onnx-optimized" in r.stdout
    # status prints it back
    s = cli("status", tmp_path / "wd")
    assert s.returncode == 0, s.stderr
    assert "onnxruntime-cpu" in s.stdout and "best:" in s.stdout and "ids: int64 [-1, -1]" in s.stdout


def test_reproduce_script_rebuilds_the_artifact(cli, tmp_path, onnx_model):
    import subprocess
    import sys

    model = onnx_model("foldable_mlp")
    r = cli("convert", model, "--workdir", tmp_path / "wd", "--targets", "onnx,onnx-optimized", "--no-profile")
    assert r.returncode == 0, r.stderr
    ws = _ws(tmp_path, "foldable_mlp")
    art = ws / "formats" / "onnx-optimized" / "model.onnx"
    import onnx

    ops = [n.op_type for n in onnx.load(str(art)).graph.node]
    assert "Mul" not in ops, ops          # the constant subgraph was folded
    art.unlink()
    import os

    env_path = dict(os.environ, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    p = subprocess.run(["bash", str(ws / "formats" / "onnx-optimized" / "reproduce.sh")], capture_output=True,
                       text=True, env=env_path)
    assert p.returncode == 0, p.stderr
    assert art.is_file()


def test_no_profile_best_by_preference(cli, tmp_path, onnx_model):
    r = cli("convert", onnx_model("foldable_mlp"), "--workdir", tmp_path / "wd", "--targets", "onnx,onnx-optimized",
            "--no-profile")
    assert r.returncode == 0, r.stderr
    st = yaml.safe_load((_ws(tmp_path, "foldable_mlp") / "status.yaml").read_text())
    assert st["best"] == {"key": "onnx-optimized", "runner": "onnxruntime-cpu", "batch_size": None,
                          "throughput": None, "basis": "preference", "spread": None, "stable": None,
                          "runner_up": None, "margin": None, "separated": None, "note": None}
    profile = st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["profile"]
    assert profile["status"] == "skipped" and profile["reason"] == "--no-profile"


def test_topk_indices_compared_exactly(cli, tmp_path, onnx_model):
    r = cli("convert", onnx_model("topk_model"), "--workdir", tmp_path / "wd", "--targets", "onnx,onnx-optimized",
            "--no-profile")
    assert r.returncode == 0, r.stderr
    st = yaml.safe_load((_ws(tmp_path, "topk_model") / "status.yaml").read_text())
    checks = st["formats"]["onnx-optimized"]["runners"]["onnxruntime-cpu"]["verify"]["outputs"]
    assert checks["indices"]["mode"] == "exact" and checks["indices"]["passed"] is True
    assert checks["values"]["mode"] == "tolerance" and checks["values"]["passed"] is True
