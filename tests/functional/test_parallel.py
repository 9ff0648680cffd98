"""Formats converted and verified in parallel workers (--jobs): a crash in one leaves the
others converted, verified and raced; Ctrl-C stops every worker and records the run as
interrupted. Real workers, real onnxruntime; nothing here depends on how fast they ran."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import navigator
from navigator.workspace import schema

from ..conftest import interruptible, wait_for_worker
from . import plugin_converters as plugins

pytestmark = pytest.mark.functional


@pytest.fixture
def crashing():
    with plugins.registered(plugins.Segfault, plugins.Copy):
        yield


def test_a_crash_in_one_parallel_worker_leaves_the_others_sound(crashing, tmp_path, onnx_model):
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, jobs=2, device="cpu",
                               targets=["onnx", "onnx-crash", "onnx-copy", "onnx-optimized"], profile_budget_s=1,
                               max_batch_size=4)
    st = result.status
    assert st.formats["onnx-crash"].convert.status == "failed"
    assert "SIGSEGV" in st.formats["onnx-crash"].convert.reason
    for key in ("onnx", "onnx-copy", "onnx-optimized"):
        rs = st.formats[key].runners["onnxruntime-cpu"]
        assert rs.verify.status == "ok" and rs.profile.status == "ok" and rs.profile.phase in ("screening", "race")
    assert result.exit_code == 1 and len(result.failures) == 1
    assert result.timings["process_starts"] == 5          # four format workers and the race worker
    assert st.state == "complete"
    schema.validate(yaml.safe_load((Path(result.workspace) / "status.yaml").read_text()))


SCRIPT = """
import sys
import navigator
import hang_plugin

navigator.convert(sys.argv[1], workdir=sys.argv[2], targets=["onnx", "onnx-hang", "onnx-optimized"], jobs=2,
                  device="cpu", timeout=300, profile_budget_s=1, max_batch_size=4)
"""


def test_ctrl_c_stops_every_parallel_worker(tmp_path, onnx_model):
    model = onnx_model("foldable_mlp")
    plugins.write_hang_module(tmp_path / "hang_plugin.py", "test_hang_parallel")
    (tmp_path / "run.py").write_text(SCRIPT)
    ws = tmp_path / "wd" / "foldable_mlp.nav.workspace"
    proc = subprocess.Popen([sys.executable, "run.py", str(model), str(tmp_path / "wd")], cwd=tmp_path,
                            preexec_fn=interruptible,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_worker(f"navigator._worker {ws}/jobs/onnx-hang", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, (out, err)
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["state"] == "interrupted"
    ps = subprocess.run(["pgrep", "-f", f"navigator._worker {ws}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "a worker outlived the interrupted run"
