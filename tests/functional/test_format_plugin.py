"""A whole new format from an out-of-tree plugin package: its Format record (entry-point
group ``navigator.formats``), its converter (``navigator.converters``) and its runner,
taken through convert, verify, profile and ``navigator triton`` without touching
Navigator's tree; then the emitted Python-backend model answers with the reference."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from navigator import deps
from navigator.workspace import npz

from ..conftest import FAST
from .triton_fakes import infer, load_model

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not deps.has("onnxruntime"), reason="the ORT-format plugin runs onnxruntime")]
HERE = Path(__file__).resolve().parent


def _plugin_site(tmp_path: Path) -> Path:
    """A site folder as `pip install navplugin-fmt` would leave it: the module and its entry points."""
    site = tmp_path / "site"
    dist = site / "navplugin_fmt-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: navplugin-fmt\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [navigator.formats]
        ort = navplugin_fmt:FORMAT

        [navigator.converters]
        onnx_to_ort = navplugin_fmt:OnnxToOrt
    """))
    (site / "navplugin_fmt.py").write_text((HERE / "plugin_format.py").read_text())
    return site


def test_a_plugin_format_end_to_end(cli, tmp_path, onnx_model, monkeypatch, pb_utils):
    site = _plugin_site(tmp_path)
    env = {"PYTHONPATH": str(site)}
    r = cli("convert", onnx_model("token_classifier"), "--workdir", tmp_path / "wd", "--targets", "onnx,ort",
            *FAST, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    ws = tmp_path / "wd" / "token_classifier.nav.workspace"
    st = yaml.safe_load((ws / "status.yaml").read_text())
    ort_fmt = st["formats"]["ort"]
    assert ort_fmt["format"] == "ort" and ort_fmt["path"] == "formats/ort/model.ort"
    assert ort_fmt["convert"]["status"] == "ok" and "ORT format" in ort_fmt["convert"]["exporter"]
    runner = ort_fmt["runners"]["ort_format-cpu"]
    assert runner["verify"]["status"] == "ok", runner["verify"]
    assert runner["verify"]["outputs"]["logits"]["max_abs"] < 1e-4
    assert runner["profile"]["status"] == "ok" and runner["profile"]["results"], runner["profile"]
    assert (ws / "formats" / "ort" / "model.ort").read_bytes()[4:8] == b"ORTM"   # the ORT flatbuffer identifier

    # a wrong plugin runner would fail verification, not pass: the check can fail on this data
    assert np.abs(npz.load(ws / "samples" / "reference" / "000.npz")["logits"]).max() > 1e-2

    r = cli("triton", ws, "--formats", "ort", "--model-name", "tc", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    model_dir = ws / "triton" / "tc"
    config = (model_dir / "config.pbtxt").read_text()
    assert 'backend: "python"' in config
    model_py = (model_dir / "1" / "model.py").read_text()
    assert "'kind': 'runner'" in model_py and "navplugin_fmt:OrtFormatRunner" in model_py
    assert (model_dir / "1" / "model.ort").is_file()

    monkeypatch.syspath_prepend(str(site))
    model, _ = load_model(model_dir)
    sample = npz.load(ws / "samples" / "inputs" / "000.npz")
    out = infer(pb_utils, model, sample)
    np.testing.assert_allclose(out["logits"], npz.load(ws / "samples" / "reference" / "000.npz")["logits"],
                               atol=1e-5, rtol=1e-5)
