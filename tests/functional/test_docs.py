"""docs/getting-started.md as a new user follows it: every command of the page, in order, in a
fresh folder, on this CPU machine — convert, status, triton, serve (the real Triton 2.51 binary
with the CPU stand-ins the page names) and a request to it, profile, gate, report."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.functional, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_getting_started_page_runs_as_written(tmp_path):
    from navigator.triton.server import prepare

    prepare(quiet=True)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tiny_classifier.onnx").write_bytes(
        (ROOT / "examples" / "tiny_classifier.onnx").read_bytes())
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    blocks = _blocks()
    assert "pip install" in blocks[0] and "navigator serve --prepare" in blocks[0]   # the install step: done here
    port = None    # chosen right before the server starts: another suite's server cannot take it meanwhile
    server = None
    outputs = []
    try:
        for block in blocks[1:]:
            serve = block.startswith("navigator serve ") and "--prepare" not in block
            port = _free_port() if serve else port
            block = block.replace("8000", str(port)) if port else block
            if serve:
                server = subprocess.Popen(["bash", "-c", f"exec {block.strip()}"], cwd=tmp_path, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True)
                seen = ""
                deadline = time.monotonic() + 180
                while "Ctrl-C stops the server" not in seen and time.monotonic() < deadline:
                    line = server.stdout.readline()
                    assert line, f"the server ended: {seen}"
                    seen += line
                outputs.append(seen)
                continue
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{block}\n{r.stdout}\n{r.stderr}"
            outputs.append(r.stdout)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=60)
    convert, triton, serve, infer, profile, gate, report = outputs
    assert "format          runner" in convert and "\nbest: " in convert
    assert "Triton repository " in triton and "tiny_classifier/1: format " in triton
    assert "models:  tiny_classifier" in serve
    answer = json.loads(infer)
    assert {o["name"] for o in answer["outputs"]} == {"logits", "probs"}
    assert "chosen: " in profile
    assert "gate passed" in gate and (tmp_path / "gate.xml").is_file()
    ws = tmp_path / "navigator_workdir" / "tiny_classifier.nav.workspace"
    assert (ws / "report" / "summary.html").is_file() and "summary.html" in report
