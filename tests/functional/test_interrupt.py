"""Ctrl-C during a run: the worker is killed, status.yaml says `interrupted`, exit 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import yaml

pytestmark = pytest.mark.functional


def test_sigint_stops_cleanly(tmp_path, onnx_model):
    model = onnx_model("foldable_mlp")
    ws = tmp_path / "wd" / "foldable_mlp.nav.workspace"
    proc = subprocess.Popen([sys.executable, "-m", "navigator", "convert", str(model), "--workdir",
                             str(tmp_path / "wd"), "--targets", "onnx", "--device", "cpu",
                             "--profile-budget-s", "60", "--no-race"],   # a full sweep: long enough to stop
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # wait until the worker is profiling
        log = ws / "formats" / "onnx" / "profile.log"
        if log.is_file() and log.stat().st_size > 0 or (ws / "formats" / "onnx" / "outputs").is_dir():
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert st["state"] == "interrupted"
    # no worker left behind
    ps = subprocess.run(["pgrep", "-f", f"navigator._worker {ws}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", ps.stdout
    # the lock is free again: a new run goes through
    again = subprocess.run([sys.executable, "-m", "navigator", "convert", str(model), "--workdir",
                            str(tmp_path / "wd"), "--targets", "onnx", "--no-profile", "--device", "cpu"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
