"""The shipped examples run as documented (README's first command is test_convert_cli's)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from navigator import deps

from ..conftest import ROOT

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not deps.has("torch"), reason="needs torch (extra 'torch')")]


@pytest.mark.slow
def test_training_script_converts_at_the_end(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "train_and_convert.py"), "--workdir",
                        str(tmp_path), "--steps", "5"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "best:" in r.stdout
    # the training job's own output only: Polygraphy's reports go to the workspace's log
    assert "[I]" not in r.stdout and "[W]" not in r.stdout and not r.stderr.strip(), r.stdout + r.stderr
    assert len(r.stdout.splitlines()) <= 12, r.stdout
    assert "Error Metrics" in (tmp_path / "small_cnn.nav.workspace" / "navigator.log").read_text()
    st = yaml.safe_load((tmp_path / "small_cnn.nav.workspace" / "status.yaml").read_text())
    assert st["samples"]["source"] == "iterable" and st["samples"]["count"] == 2 + len(st["samples"]["corners"])
    assert all(f["convert"]["status"] == "ok" for f in st["formats"].values())


def test_transformer_block_factory(cli, tmp_path):
    r = cli("convert", f"{ROOT}/examples/transformer_block.py:transformer_block", "--shapes", "ids:4x32",
            "--dtypes", "ids:int64", "--value-ranges", "ids:0,1000", "--workdir", tmp_path / "wd",
            "--targets", "torchscript,onnx", "--runners", "torchscript,onnxruntime", "--no-profile", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "transformer_block.nav.workspace" / "status.yaml").read_text())
    assert st["signature"]["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [-1, 8]},
                                          {"name": "pooled", "dtype": "float32", "shape": [-1, 64]}]
    assert st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


@pytest.mark.slow
def test_the_gpu_check_dry_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.sh --cpu: the GPU check's steps with small stand-ins, so a device
    lease goes to measuring; its table names every (format, runner) with the task-level figures."""
    import json
    import os

    out = tmp_path / "out"
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu", "--models", "resnet50",
                        "--targets", "resnet50=torch,torchscript", "--runners", "resnet50=torch,torchscript",
                        "--budget-s", "0.5"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OUT": str(out), "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "gpu_check.json").read_text())["rows"]
    assert {(x["format"], x["runner"]) for x in rows} == {("torch", "torch-cpu"), ("torchscript", "torchscript-cpu")}
    assert all(x["verify"] == "ok" and x["top1"] == 1.0 and x["conclusive"] for x in rows), rows
    assert "| resnet50 | torchscript | torchscript-cpu | ok | ok |" in (out / "gpu_check.md").read_text()
