"""Re-running on a workspace reuses every step whose inputs are unchanged; --force
redoes them; a run killed with SIGKILL resumes cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

import navigator

pytestmark = pytest.mark.functional
FAST = dict(device="cpu", profile_budget_s=1, max_batch_size=4)


def _hashes(result):
    return {(k, r): (rs.verify.inputs_sha256, rs.profile.inputs_sha256, fs.convert.inputs_sha256)
            for k, fs in result.status.formats.items() for r, rs in fs.runners.items()}


def test_unchanged_steps_are_reused(tmp_path, onnx_model):
    model = onnx_model("foldable_mlp")
    first = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert first.ok and first.timings["process_starts"] == 3   # a worker per format, then the race worker
    again = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert again.ok and again.timings["process_starts"] == 0          # nothing to redo
    assert _hashes(again) == _hashes(first) and all(h[0] for h in _hashes(again).values())
    assert again.best == first.best and again.status.state == "complete"
    # a new target: only it is converted; a changed tolerance: verification redone, conversions kept
    more = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized", "openvino"], **FAST)
    assert more.ok and more.timings["process_starts"] == 2      # openvino, and its profile in the race
    looser = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], atol=1e-3, **FAST)
    assert looser.ok and looser.timings["process_starts"] == 3
    opt = looser.status.formats["onnx-optimized"]
    assert opt.convert.inputs_sha256 == first.status.formats["onnx-optimized"].convert.inputs_sha256
    assert opt.runners["onnxruntime-cpu"].verify.inputs_sha256 != \
        first.status.formats["onnx-optimized"].runners["onnxruntime-cpu"].verify.inputs_sha256
    assert opt.runners["onnxruntime-cpu"].verify.outputs["y"].atol == 1e-3
    # --force redoes everything; a changed model starts afresh
    forced = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], force=True, **FAST)
    assert forced.timings["process_starts"] == 3
    other = onnx_model("foldable_mlp", seed=5)
    changed = navigator.convert(other, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert changed.timings["process_starts"] == 3
    assert changed.status.model.sha256 != first.status.model.sha256


PLUGIN = """
import os, time, shutil
from navigator.converters.base import Converter
from navigator.converters.registry import register

@register
class SlowCopy(Converter):
    name = "test_slow_copy"
    source = "onnx"
    target = "onnx-slow"
    requires = ("onnx",)

    def convert(self, ctx):
        if os.environ.get("NAV_SLOW") == "1":
            time.sleep(120)
        shutil.copyfile(ctx.source, ctx.output)
"""

SCRIPT = """
import sys
import navigator
import slow_plugin  # registers onnx-slow; a module of its own, so workers can import it

r = navigator.convert(sys.argv[1], workdir=sys.argv[2], targets=["onnx", "onnx-slow"], device="cpu",
                      profile_budget_s=1, max_batch_size=4)
print("process_starts", r.timings["process_starts"], "ok", r.ok)
"""


def test_deferred_profiles_are_measured_by_the_next_run(tmp_path, onnx_model):
    """pipeline.run(defer_profiles=True) (convert-many's build phase) converts and verifies but
    leaves each profile to the next run, which reuses the conversions and measures; deferring
    again keeps the profiles that are still valid (unlike --no-profile, which drops them)."""
    from navigator import pipeline
    from navigator.config import from_mapping
    from navigator.console import Reporter
    from navigator.pipeline.tasks import DEFERRED

    model = onnx_model("foldable_mlp")
    config = from_mapping({"workdir": str(tmp_path), "targets": ["onnx", "onnx-optimized"], **FAST})
    built = pipeline.run(str(model), None, config, Reporter("quiet"), defer_profiles=True)
    assert built.exit_code == 0 and built.timings["process_starts"] == 2
    runners = [rs for fs in built.status.formats.values() for rs in fs.runners.values()]
    assert all(rs.verify.status == "ok" and rs.profile.status == "skipped" and rs.profile.reason == DEFERRED
               for rs in runners)
    assert built.status.config["no_profile"] is False
    measured = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert measured.ok and measured.best.basis == "profile"
    for key, fs in measured.status.formats.items():
        assert fs.convert.inputs_sha256 == built.status.formats[key].convert.inputs_sha256
        assert all(rs.profile.status == "ok" for rs in fs.runners.values())
    kept = pipeline.run(str(model), None, config, Reporter("quiet"), defer_profiles=True)
    assert kept.timings["process_starts"] == 0 and kept.status.best == measured.best
    assert _hashes(kept) == _hashes(measured)


def test_resume_removes_what_killed_writers_left(tmp_path, onnx_model):
    """A worker stopped by Ctrl-C or SIGKILL in the middle of an atomic write leaves its hidden temp
    file (and a copy its .part): the next run, holding the lock, removes them, so an interrupted and
    resumed workspace holds the same files as one never interrupted."""
    model = onnx_model("foldable_mlp")
    first = navigator.convert(model, workdir=tmp_path, targets=["onnx"], **FAST)
    ws = first.workspace
    files = sorted(p.relative_to(ws) for p in ws.rglob("*") if p.is_file() and p.parts[-2] != "jobs")
    stale = [ws / "samples" / "reference" / ".000.npz.k3j2a9.tmp", ws / ".status.yaml.x1y2z3.tmp",
             ws / "formats" / "onnx" / "outputs" / "onnxruntime-cpu" / ".000-bs1.npz.q8w7e6.tmp",
             ws / "formats" / "onnx" / "model.onnx.part"]
    for p in stale:
        p.write_bytes(b"half")
    keep = ws / "formats" / "onnx" / "notes.tmp"            # not one of ours: left alone
    keep.write_text("mine")
    from navigator.workspace.layout import Workspace

    assert Workspace(ws).stale_partial_files() == sorted(stale)
    again = navigator.convert(model, workdir=tmp_path, targets=["onnx"], **FAST)
    assert again.ok and not any(p.exists() for p in stale) and keep.read_text() == "mine"
    keep.unlink()
    assert sorted(p.relative_to(ws) for p in ws.rglob("*") if p.is_file() and p.parts[-2] != "jobs") == files


def test_sigkill_then_resume(tmp_path, onnx_model):
    """SIGKILL while a conversion runs: status.yaml stays readable (state running), the
    worker dies with its parent, and the next run reuses what was finished."""
    model = onnx_model("foldable_mlp")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    (tmp_path / "slow_plugin.py").write_text(PLUGIN)
    ws = tmp_path / "wd" / "foldable_mlp.nav.workspace"
    cmd = [sys.executable, str(script), str(model), str(tmp_path / "wd")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, NAV_SLOW="1"), cwd=tmp_path)

    def onnx_verified() -> bool:   # the source's own verification ends beside its child's conversion
        try:
            st = yaml.safe_load((ws / "status.yaml").read_text())
            return st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            return False

    deadline = time.monotonic() + 120
    while not ((ws / "formats" / "onnx-slow" / "convert.log").is_file() and onnx_verified()):
        assert time.monotonic() < deadline and proc.poll() is None, "onnx-slow never started after onnx verified"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    st = yaml.safe_load((ws / "status.yaml").read_text())      # never corrupt
    assert st["state"] == "running"
    onnx = st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]
    assert onnx["verify"]["status"] == "ok" and onnx["profile"]["reason"].startswith("pending: measured in the race")
    deadline = time.monotonic() + 30        # the worker dies with its parent (PR_SET_PDEATHSIG), soon
    while subprocess.run(["pgrep", "-f", f"navigator._worker {ws}"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "the worker outlived its killed parent"
        time.sleep(0.1)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # onnx's verification reused; onnx-slow done again; both measured in the race
    assert "process_starts 2 ok True" in r.stdout
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["state"] == "complete"
    assert st["formats"]["onnx-slow"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


FACTORY = """
from pathlib import Path

import torch
from torch import nn

from layers import width   # a sibling module: part of the model's code


def build():
    torch.manual_seed(int(Path(__file__).with_name("seed.txt").read_text()))
    return nn.Sequential(nn.Linear(4, width()), nn.Tanh())   # ReLU of seed 0 is zero on every sample
"""


def test_factory_source_resumes(tmp_path):
    """``file.py:factory`` resumes by its file, its sibling .py files and its reference
    outputs: unchanged -> nothing redone; a sibling edited or weights that change the
    outputs (here a seed read from a data file) -> started afresh."""
    pytest.importorskip("torch")
    src = tmp_path / "src"
    src.mkdir()
    (src / "factory.py").write_text(FACTORY)
    (src / "layers.py").write_text("def width():\n    return 3\n")
    (src / "seed.txt").write_text("0")
    spec = f"{src / 'factory.py'}:build"
    opts = dict(workdir=tmp_path / "wd", shapes="input:2x4", targets=["torch"], runners=["torch"],
                no_profile=True, device="cpu")
    first = navigator.convert(spec, **opts)
    assert first.ok and first.timings["process_starts"] >= 1 and first.status.model.sha256
    again = navigator.convert(spec, **opts)
    assert again.ok and again.timings["process_starts"] == 0
    assert again.status.model.sha256 == first.status.model.sha256
    (src / "layers.py").write_text("def width():\n    return 3  # same numbers, edited code\n")
    edited = navigator.convert(spec, **opts)
    assert edited.timings["process_starts"] == first.timings["process_starts"]
    assert edited.status.model.sha256 != first.status.model.sha256
    (src / "seed.txt").write_text("1")    # other weights, same code
    reseeded = navigator.convert(spec, **opts)
    assert reseeded.ok and reseeded.timings["process_starts"] == first.timings["process_starts"]
    assert reseeded.status.model.sha256 != edited.status.model.sha256


def test_saved_model_directory_resumes(tmp_path):
    """A SavedModel directory resumes by its whole tree (paths, sizes, contents):
    unchanged -> nothing redone; new weights under the same graph -> redone."""
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    def save(seed):
        class Affine(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable(tf.random.stateless_normal([4, 2], seed=[seed, 0]))

            @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
            def __call__(self, x):
                return {"y": tf.matmul(x, self.w)}

        tf.saved_model.save(Affine(), str(tmp_path / "affine" / "1"))

    save(0)
    opts = dict(workdir=tmp_path / "wd", targets=["savedmodel"], no_profile=True, device="cpu")
    first = navigator.convert(tmp_path / "affine" / "1", **opts)
    assert first.ok and first.timings["process_starts"] == 1
    again = navigator.convert(tmp_path / "affine" / "1", **opts)
    assert again.ok and again.timings["process_starts"] == 0
    save(1)
    changed = navigator.convert(tmp_path / "affine" / "1", **opts)
    assert changed.ok and changed.timings["process_starts"] == 1
    assert changed.status.model.sha256 != first.status.model.sha256
