"""`navigator convert DIR` with no other flag on one Hugging Face folder per task (CPU).

    python benchmarks/hf_tasks.py [--models bert_classifier,…] [--workdir DIR] [--no-profile]
        [--out benchmarks/results/hf_tasks_cpu.md]

The folders are tests/hf_models.py's (tiny configs saved with transformers 5.23, tokenizers
trained offline). Each runs `navigator convert DIR --workdir W` in a fresh process (the only
flag is where to write; `--no-profile` here skips profiling to save time); the table gives
the task and inputs Navigator read from the folder, the dynamic dims and profile, and per
default format the verdict (every output check conclusive or not), the best format, wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import hf_models  # noqa: E402


def run(folder: Path, workdir: Path, no_profile: bool) -> dict:
    cmd = [sys.executable, "-m", "navigator", "convert", str(folder), "--workdir", str(workdir)]
    if no_profile:
        cmd.append("--no-profile")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir.parent)
    out = {"model": folder.name, "exit": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    status = workdir / f"{folder.name}.nav.workspace" / "status.yaml"
    if not status.is_file():
        out["error"] = (proc.stderr.strip().splitlines() or ["no status.yaml"])[-1]
        return out
    st = yaml.safe_load(status.read_text())
    out["task"] = st["model"]["huggingface"]["task"]
    out["inputs"] = ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in st["signature"]["inputs"])
    out["outputs"] = ", ".join(f"{o['name']} {o['shape']}" for o in st["signature"]["outputs"])
    first = st["shape_profiles"][0]
    name = next(iter(first))
    out["profile"] = f"{name} {first[name]['min']}..{first[name]['max']}"
    cells = []
    for key, f in st["formats"].items():
        for runner, r in f["runners"].items():
            v = r["verify"]
            conclusive = all(o.get("conclusive") for o in (v.get("outputs") or {}).values())
            mark = v["status"] if v["status"] != "ok" or conclusive else "ok?"
            cells.append(f"{key}/{runner}: {mark}")
    out["verdicts"] = "; ".join(cells)
    best = st.get("best") or {}
    out["best"] = f"{best.get('key')} on {best.get('runner')}" + \
        (f", {best['throughput']:.0f}/s @ {best['batch_size']}" if best.get("throughput") else "")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(hf_models.ALL))
    parser.add_argument("--workdir", default="/tmp/hf_tasks")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hf_tasks_cpu.md"))
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    (work / "nav").mkdir(parents=True, exist_ok=True)
    load = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    records = []
    for name in args.models.split(","):
        records.append(run(hf_models.build(name, work / "models"), work / "nav", args.no_profile))
        print(records[-1], flush=True)
    cmd = "navigator convert DIR --workdir W" + (" --no-profile" if args.no_profile else "")
    lines = ["# `navigator convert DIR` on one Hugging Face folder per task (CPU)", "",
             f"Run {time.strftime('%Y-%m-%dT%H:%M:%S')}, {os.cpu_count()} cores; load average at start {load}, at end "
             f"{[round(x, 2) for x in os.getloadavg()]}; {time.perf_counter() - t0:.0f} s in all. Command per folder: "
             f"`{cmd}` (`python benchmarks/hf_tasks.py{' --no-profile' if args.no_profile else ''}`). Verdicts: `ok` "
             "verified with every output check conclusive (`ok?` would mark an inconclusive one).", "",
             "| model | task | inputs (from the folder) | outputs | profile (first input) | verdicts | best | exit | "
             "wall |", "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['model']} | {r.get('task', '-')} | {r.get('inputs', r.get('error', '-'))} | "
                     f"{r.get('outputs', '-')} | {r.get('profile', '-')} | {r.get('verdicts', '-')} | "
                     f"{r.get('best', '-')} | {r['exit']} | {r['wall_s']} s |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
