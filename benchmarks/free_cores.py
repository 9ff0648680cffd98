"""Parallel work sized from the free cores: ``--jobs`` auto against 1 and 2, on a quiet machine and
beside a second load.

    python benchmarks/free_cores.py [--rounds 2] [--load 2] [--out FILE]

Builds the test suite's BERT text classifier folder (tests/hf_models.py), then runs
``navigator convert FOLDER --targets onnx --no-profile`` (the source and one child, which can
overlap) with ``--jobs`` auto, 1 and 2, in the order A B C C B A per round so the machine's drift
falls on each; first as it is, then beside ``--load`` busy processes (the second load: not the run's
own, so the run must see them as taken cores). Prints a table: each run's wall time and how many
workers the run chose, with what it measured other processes using (from navigator.log).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = re.compile(r"up to (\d+) format workers at once \(--jobs(?:; other processes kept ([\d.]+) of)?")
BUSY = "import time\nwhile True:\n    pass\n"


def run(folder: Path, workdir: Path, jobs: str) -> dict:
    flags = [] if jobs == "auto" else ["--jobs", jobs]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "navigator", "convert", str(folder), "--workdir", str(workdir),
                        "--targets", "onnx", "--no-profile", "--device", "cpu", *flags],
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=workdir.parent, capture_output=True,
                       text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"--jobs {jobs}: exit {r.returncode}: {r.stderr[-500:]}")
    m = JOBS.search((next(workdir.glob("*.nav.workspace")) / "navigator.log").read_text())
    return {"wall": wall, "workers": int(m.group(1)) if m else None,
            "busy": float(m.group(2)) if m and m.group(2) else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--load", type=int, default=2, help="busy processes beside the runs in the second part")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import hf_models

    tmp = Path(tempfile.mkdtemp(prefix="nav-free-cores-"))
    folder = hf_models.build("bert_classifier", tmp)
    rows = []
    for part in ("as it is", f"beside {args.load} busy processes"):
        hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load if rows else 0)]
        try:
            time.sleep(1.0 if hogs else 0.0)
            load = os.getloadavg()[0]
            for _ in range(args.rounds):
                for jobs in ("auto", "1", "2", "2", "1", "auto"):
                    wd = tmp / f"wd-{len(rows)}"
                    rows.append((part, jobs, load, run(folder, wd, jobs)))
                    print(rows[-1], file=sys.stderr)
                    shutil.rmtree(wd, ignore_errors=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    lines = ["| machine | --jobs | load at start | workers chosen | others' cores measured | wall s |",
             "|---|---|---|---|---|---|"]
    for part, jobs, load, r in rows:
        busy = "-" if r["busy"] is None else f"{r['busy']:.1f}"
        lines.append(f"| {part} | {jobs} | {load:.1f} | {r['workers']} | {busy} | {r['wall']:.1f} |")
    means = []
    for part in dict.fromkeys(p for p, *_ in rows):
        for jobs in ("auto", "1", "2"):
            walls = [r["wall"] for p, j, _, r in rows if p == part and j == jobs]
            means.append(f"{part}, --jobs {jobs}: mean {sum(walls) / len(walls):.1f} s over {len(walls)}")
    from machine_info import publish

    publish("Parallel work sized from the free cores",
            f"`python benchmarks/free_cores.py --rounds {args.rounds} --load {args.load}`: `navigator convert "
            f"bert_classifier --targets onnx --no-profile` (tests/hf_models.py), {os.cpu_count()} cores.",
            [*lines, "", *[f"- {m}" for m in means]], args.out)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
