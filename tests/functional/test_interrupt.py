"""Ctrl-C during a run: the worker is killed, status.yaml says `interrupted`, exit 130."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

from ..conftest import interruptible, wait_for_worker

pytestmark = pytest.mark.functional


# navigator's own CLI with one more converter registered: onnx -> onnx-hang, which never ends
CLI_WITH_HANG = """
import sys
sys.path.insert(0, {root!r})
from navigator.converters.registry import registry
from tests.functional import plugin_converters
registry.register(plugin_converters.Hang)
from navigator.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_sigint_stops_cleanly(tmp_path, onnx_model, sig, code, word):
    """Ctrl-C (or SIGTERM: it left the workspace `running`) while a worker runs (a converter that
    never ends, so the signal cannot come after the run, however fast the machine): exit 130
    (143), `interrupted`, no worker left, the lock free."""
    from ..conftest import ROOT

    model = onnx_model("foldable_mlp")
    ws = tmp_path / "wd" / "foldable_mlp.nav.workspace"
    script = tmp_path / "cli.py"
    script.write_text(CLI_WITH_HANG.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), "convert", str(model), "--workdir",
                             str(tmp_path / "wd"), "--targets", "onnx,onnx-hang", "--device", "cpu",
                             "--no-profile"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    wait_for_worker(f"navigator._worker {ws}/jobs/onnx-hang", proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (out, err)
    assert "Traceback" not in err and word in err
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


LIVE_SCRIPT = """
import sys, threading, time
import numpy as np, torch
from torch import nn
import navigator
from navigator.errors import Interrupted

class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 2)

    def forward(self, x):   # batch 64 on the calling thread: only the profile's sweep runs it there
        if x.shape[0] == 64 and not torch.jit.is_tracing() and threading.current_thread() is threading.main_thread():
            open(sys.argv[2] + ".measuring", "w").close()
            time.sleep(0.2)
        return self.lin(x)

rng = np.random.default_rng(0)
samples = [{"x": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(2)]
try:
    navigator.convert(Slow(), samples, workdir=sys.argv[2], targets=["torchscript", "onnx"],
                      runners=["torch", "torchscript", "onnxruntime"], jobs=int(sys.argv[1]), max_batch_size=64,
                      profile_budget_s=60, progress=False)
except Interrupted as e:
    print("interrupted:", e)
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigint_while_a_live_module_is_measured_on_the_calling_thread(tmp_path, jobs):
    """Ctrl-C while the calling thread measures a live module (sequential and parallel
    scheduling: in the latter a format's thread handed the measurement over and waits): the
    API raises Interrupted within seconds, status.yaml says `interrupted`, the profile is not
    `ok`, no worker is left and no thread prints an error."""
    import time

    pytest.importorskip("torch")
    script, wd = tmp_path / "live.py", tmp_path / "wd"
    script.write_text(LIVE_SCRIPT)
    marker = tmp_path / "wd.measuring"
    proc = subprocess.Popen([sys.executable, str(script), str(jobs), str(wd)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 30
    assert proc.returncode == 0 and out.strip().splitlines()[-1].startswith("interrupted:"), (out[-500:], err[-2000:])
    assert "Traceback" not in err and "Exception in thread" not in err, err[-2000:]
    st = yaml.safe_load(next(wd.glob("*.nav.workspace/status.yaml")).read_text())
    assert st["state"] == "interrupted"
    assert st["formats"]["torch"]["runners"]["torch-cpu"]["profile"]["status"] != "ok"
    ps = subprocess.run(["pgrep", "-f", f"navigator._worker {wd}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", ps.stdout
