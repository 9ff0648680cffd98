"""The getting-started model converted and its Triton repository written, for the serving benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def navigator(*args, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "navigator", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def workspace_and_repo(tmp: Path, repo_name: str = "repo") -> tuple[Path, Path]:
    """examples/tiny_classifier.onnx converted to onnx under ``tmp/w``, and ``tmp/<repo_name>``
    written from it (`navigator triton WS --deploy none`)."""
    r = navigator("convert", ROOT / "examples" / "tiny_classifier.onnx", "--workdir", tmp / "w", "--targets", "onnx",
                  cwd=tmp)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    ws = next((tmp / "w").glob("*.nav.workspace"))
    repo = tmp / repo_name
    r = navigator("triton", ws, "--repo", repo, "--deploy", "none", cwd=tmp)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return ws, repo
