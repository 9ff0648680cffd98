"""The serving search through `--url` against the local one: the same pick within noise?

    python benchmarks/serving_remote.py [--rounds 2] [--budget-s 120] [--out benchmarks/results/serving_remote.md]

Converts examples/tiny_classifier.onnx (the getting-started model), writes its repository, then
alternates per round (A B B A): `navigator profile WS --triton --cpu-backends` (navigator starts its
own server) and `navigator profile WS --triton --url HOST:PORT --load-configs` against a Triton this
script starts apart (the same repository, the CPU stand-in, explicit model control), as someone
else's server would be. The same search options for both. Prints a table: every configuration's
throughput at its best point per run, each run's pick, and whether the remote pick is the local
pick within the local runs' spread; with the load average at start and end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.getting_started import navigator, workspace_and_repo  # noqa: E402
SEARCH = ["--instance-counts", "1,2", "--max-batch-sizes", "1,8", "--concurrency", "1:8", "--measurement-ms", "500"]


def profile(ws: Path, extra: list[str], budget: float) -> dict:
    t0 = time.perf_counter()
    r = navigator("profile", ws, "--triton", *SEARCH, "--budget-s", budget, *extra, cwd=ws.parent)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"profile failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    sv = yaml.safe_load((ws / "status.yaml").read_text())["serving"]
    best = {c["name"]: c["best"]["throughput"] for c in sv["configurations"] if c.get("best")}
    return {"chosen": sv["chosen"], "best": best, "wall": wall, "tool": sv["tool"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine_info import cpu_name
    from navigator.triton.server import TritonServer

    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="nav-serving-remote-"))
    ws, repo = workspace_and_repo(tmp, "remote_repo")
    runs: list[tuple[str, dict]] = []
    with TritonServer(repo, cpu_backends=True, log_path=tmp / "remote_server.log") as server:
        remote = ["--url", server.grpc_url, "--load-configs"]
        local = ["--cpu-backends"]
        for n in range(args.rounds):
            order = [("local", local), ("remote", remote)] if n % 2 == 0 else [("remote", remote), ("local", local)]
            for kind, extra in order:
                runs.append((kind, profile(ws, extra, args.budget_s)))
                print(f"round {n + 1} {kind}: chosen {runs[-1][1]['chosen']} in {runs[-1][1]['wall']:.0f} s",
                      file=sys.stderr)
    load1 = os.getloadavg()
    names = sorted({name for _, run in runs for name in run["best"]})
    head = ["configuration"] + [f"{kind} {i + 1}" for i, (kind, _) in enumerate(runs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        lines.append("| " + " | ".join([name] + [f"{run['best'].get(name, float('nan')):.1f}" for _, run in runs])
                     + " |")
    lines.append("| **chosen** | " + " | ".join(run["chosen"] for _, run in runs) + " |")
    lines.append("| wall (s) | " + " | ".join(f"{run['wall']:.0f}" for _, run in runs) + " |")
    local_runs = [run for kind, run in runs if kind == "local"]
    remote_picks = [run["chosen"] for kind, run in runs if kind == "remote"]
    local_pick = max(names, key=lambda n: statistics.mean(run["best"].get(n, 0.0) for run in local_runs))
    top = statistics.mean(run["best"][local_pick] for run in local_runs)
    spread = max(abs(run["best"][local_pick] - top) / top for run in local_runs) if len(local_runs) > 1 else 0.0
    within = {p: statistics.mean(run["best"].get(p, 0.0) for run in local_runs) >= top * (1 - max(spread, 0.05))
              for p in remote_picks}
    text = "\n".join([
        "# Serving search through --url against the local search",
        "",
        f"`python benchmarks/serving_remote.py --rounds {args.rounds} --budget-s {args.budget_s:g}`; "
        f"{cpu_name()}, {os.cpu_count()} cores; load average {load0[0]:.1f} at start, {load1[0]:.1f} at end; "
        f"tool {runs[0][1]['tool']}; search `{' '.join(SEARCH)}`.",
        "",
        "Throughput (inferences/s) of each configuration at its best point, per run (A B B A):",
        "",
        *lines,
        "",
        f"Local pick over the local runs: **{local_pick}** ({top:.1f}/s, runs within {spread:.0%} of it). "
        "Remote picks: " + ", ".join(f"{p} ({'same within noise' if ok else 'DIFFERENT'})"
                                      for p, ok in within.items()) + ".",
        "",
    ])
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0 if all(within.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
