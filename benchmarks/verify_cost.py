"""What verification costs on the trained corpus, this checkout against an earlier Navigator.

    python benchmarks/verify_cost.py --runs /tmp/tr/trained.json --baseline-site /tmp/base-site [--rounds 2]

Takes the `navigator convert ... --no-profile` commands that benchmarks/trained.py recorded (its --json:
the same models, samples and targets) and runs each with this checkout and with the baseline (an earlier
Navigator installed apart: ``git worktree add /tmp/base COMMIT && pip install --no-deps --target
/tmp/base-site /tmp/base``), alternating A B B A per round so the machine's drift falls on both. Each run
gets a fresh workdir and runs from a folder outside the repository (``python -m`` would import the
checkout from the working directory). Prints a table: per model the median wall of each and their ratio,
and the sums; with the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(cmd: list[str], workdir: Path, site: str | None) -> float:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site:
        env["PYTHONPATH"] = site
    args = list(cmd)
    args[args.index("--workdir") + 1] = str(workdir)
    start = time.perf_counter()
    subprocess.run(args, env=env, cwd=workdir.parent, capture_output=True, timeout=3600)
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="benchmarks/trained.py's --json")
    ap.add_argument("--baseline-site", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--models", help="comma-separated subset")
    args = ap.parse_args(argv)
    results = json.loads(Path(args.runs).read_text())["results"]
    cmds = {r["model"]: shlex.split(r["navigator"]["cmd"]) for r in results
            if r.get("navigator", {}).get("cmd") and r["navigator"].get("rc") in (0, 1)}
    if args.models:
        cmds = {m: c for m, c in cmds.items() if m in args.models.split(",")}
    load0 = [round(x, 2) for x in os.getloadavg()]
    times: dict[str, dict[str, list[float]]] = {m: {"now": [], "base": []} for m in cmds}
    with tempfile.TemporaryDirectory(prefix="verify-cost-") as tmp:
        for rnd in range(args.rounds):
            for model, cmd in cmds.items():
                for label in ("now", "base", "base", "now"):
                    work = Path(tmp) / f"{model}-{label}-{rnd}-{len(times[model][label])}" / "wd"
                    work.mkdir(parents=True)
                    times[model][label].append(run(cmd, work, args.baseline_site if label == "base" else None))
                print(model, {k: [round(x, 1) for x in v] for k, v in times[model].items()}, flush=True)
    load1 = [round(x, 2) for x in os.getloadavg()]
    lines = ["| model | now (s, median) | baseline (s, median) | now / baseline |", "|---|---|---|---|"]
    total_now = total_base = 0.0
    for model, t in times.items():
        now, base = statistics.median(t["now"]), statistics.median(t["base"])
        total_now, total_base = total_now + now, total_base + base
        lines.append(f"| {model} | {now:.1f} | {base:.1f} | {now / base:.2f} |")
    lines.append(f"| **all** | {total_now:.1f} | {total_base:.1f} | **{total_now / total_base:.2f}** |")
    print(f"load average at start {load0}, at end {load1}; {os.cpu_count()} cores; {args.rounds} round(s) of "
          f"A B B A; python {sys.version.split()[0]}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
