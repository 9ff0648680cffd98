"""The critical path of a Hugging Face folder's run: does the ONNX conversion wait for the source's
own verification (torch.compile's compile)?

    python benchmarks/critical_path.py --baseline-path /tmp/base [--rounds 2] [--out FILE]

Builds the test suite's BERT text classifier folder (tests/hf_models.py), then runs
``navigator convert FOLDER --targets onnx --no-profile`` with this checkout and with an earlier
checkout (``git worktree add /tmp/base COMMIT``), alternating A B B A so the machine's drift falls on
both. From each run's navigator.log: the wall time, when the source's verification ended and when
the ONNX conversion started (seconds after the run started). Prints a table with the load average.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(\S+ \S+) INFO navigator\.(?:progress|pipeline): (.+)$")


def _times(ws: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    start = None
    for text in (ws / "navigator.log").read_text().splitlines():
        m = LINE.match(text)
        if not m:
            continue
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        start = t if start is None else start
        what = m.group(2)
        if what.startswith("torch verify [") and what.endswith((": ok", ": failed", ": inconclusive")):
            out["source verified"] = max(out.get("source verified", 0.0), t - start)
        if what == "onnx convert: started":
            out["onnx convert started"] = t - start
    return out


def run(checkout: Path, folder: Path, workdir: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "navigator", "convert", str(folder), "--workdir", str(workdir),
                        "--targets", "onnx", "--no-profile", "--device", "cpu"], env=env, cwd=workdir.parent,
                       capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{checkout}: exit {r.returncode}: {r.stderr[-500:]}")
    return {"wall": wall, **_times(next(workdir.glob("*.nav.workspace")))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-path", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import hf_models

    tmp = Path(tempfile.mkdtemp(prefix="nav-critical-path-"))
    folder = hf_models.build("bert_classifier", tmp)
    load0 = os.getloadavg()
    rows = []
    for n in range(args.rounds):
        order = [("this", ROOT), ("baseline", args.baseline_path)]
        for name, checkout in (order if n % 2 == 0 else order[::-1]):
            wd = tmp / f"wd-{len(rows)}"
            rows.append((name, run(checkout, folder, wd)))
            print(f"{name}: {rows[-1][1]}", file=sys.stderr)
            shutil.rmtree(wd, ignore_errors=True)
    load1 = os.getloadavg()
    lines = ["| run | checkout | wall s | source verified at s | onnx convert started at s |", "|---|---|---|---|---|"]
    for i, (name, r) in enumerate(rows, 1):
        lines.append(f"| {i} | {name} | {r['wall']:.1f} | {r.get('source verified', float('nan')):.1f} | "
                     f"{r.get('onnx convert started', float('nan')):.1f} |")
    from machine_info import publish

    publish("Critical path of a Hugging Face folder's run",
            f"`python benchmarks/critical_path.py --baseline-path {args.baseline_path} --rounds {args.rounds}`: "
            f"`navigator convert bert_classifier --targets onnx --no-profile` (tests/hf_models.py), {os.cpu_count()} "
            f"cores, load average {load0[0]:.1f} at start and {load1[0]:.1f} at end.", lines, args.out)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
