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


def test_sigint_stops_cleanly(tmp_path, onnx_model):
    """Ctrl-C while a worker runs (a converter that never ends, so the signal cannot come after the
    run, however fast the machine): exit 130, `interrupted`, no worker left, the lock free."""
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
