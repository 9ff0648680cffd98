"""Navigator's serving search beside Triton Model Analyzer 1.58 on the same model, server and space.

    python benchmarks/vs_model_analyzer.py [--ma-venv ~/.cache/navigator-bench/ma158] [--share 0.3]
        [--navigator-runs 2] [--out benchmarks/results/vs_model_analyzer_cpu.md]

The getting-started model (examples/tiny_classifier.onnx) is converted and its Triton repository
written (`navigator triton WS --deploy none`). Both tools then search the same space on the same
server binary (the nvidia-pytriton wheel's tritonserver 2.51 with navigator's CPU stand-in for the
onnxruntime backend) and the same perf_analyzer 2.51 with the same inputs (the workspace's
perf_input.json, `--shape ids:16`): instance counts 1, 2 x max batch sizes 1, 2, 4, 8, 64 (dynamic
batching on, no queue delay), client batch 1, concurrency 1, 2, 4, 8, 16, objective throughput.

Model Analyzer (`triton-model-analyzer==1.58.0`, installed into a venv of its own when missing)
runs first, as users run a manual brute sweep: `run_config_search_disable: true`, the space above
in `model_config_parameters`, its own measurement defaults (perf_analyzer's count windows), local
launch mode through a wrapper that adds the wheel's library path and the stand-in backend
directory; it also profiles the repository's own config, as it always does. Then Navigator
(`navigator profile WS --triton --cpu-backends`, perf_analyzer, brute search) runs
``--navigator-runs`` times with ``--budget-s`` = ``--share`` x Model Analyzer's wall time less
the server's start and the outputs (5 s). The table gives each configuration's best throughput
per run, coverage (configurations and points measured), walls, each run's pick, and whether each
pick is the other's within the spread of Navigator's runs (at least 5%); with the load average.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.getting_started import navigator, workspace_and_repo  # noqa: E402
INSTANCES, MAX_BATCH, CONCURRENCY = (1, 2), (1, 2, 4, 8, 64), (1, 2, 4, 8, 16)
MODEL = "tiny_classifier"
MA_VERSION = "1.58.0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ma_venv(path: Path) -> Path:
    exe = path / "bin" / "model-analyzer"
    if not exe.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", f"triton-model-analyzer=={MA_VERSION}"],
                       check=True)
    return exe


def server_wrapper(tmp: Path) -> tuple[Path, Path]:
    """A tritonserver command Model Analyzer can launch: the wheel's binary with its library path,
    a backend directory holding the Python backend and the CPU stand-ins, loopback addresses."""
    from navigator.triton import server as srv
    from navigator.triton.server_env import prepare

    env = prepare(quiet=True)
    backends = tmp / "backends"
    shutil.copytree(env.backend_dir / "python", backends / "python")
    for name in srv.STANDINS:
        (backends / name).mkdir(parents=True)
        shutil.copyfile(srv._STANDIN_DIR / "model.py", backends / name / "model.py")
    penv = env.process_env({})
    flags = [f"--backend-directory={backends}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
             "--metrics-address=127.0.0.1", "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0",
             "--exit-timeout-secs=5", f"--backend-config=python,shm-region-prefix-name=mabench{os.getpid()}_"]
    text = "\n".join(["#!/bin/sh", *(f'export {k}="{penv[k]}"' for k in ("LD_LIBRARY_PATH", "PATH")),
                      "unset PYTHONPATH PYTHONHOME VIRTUAL_ENV",
                      f'exec "{env.tritonserver}" "$@" ' + " ".join(flags), ""])
    wrapper = tmp / "bin" / "tritonserver"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(text)
    wrapper.chmod(0o755)
    return wrapper, env.perf_analyzer_command or env.perf_analyzer


def run_ma(exe: Path, tmp: Path, repo: Path, inputs: Path, server: Path, pa: Path) -> dict:
    http, grpc, metrics = free_port(), free_port(), free_port()
    config = {
        "model_repository": str(repo), "output_model_repository_path": str(tmp / "ma_repo"),
        "override_output_model_repository": True, "export_path": str(tmp / "ma_export"),
        "checkpoint_directory": str(tmp / "ma_checkpoints"), "triton_launch_mode": "local",
        "triton_server_path": str(server), "perf_analyzer_path": str(pa),
        "triton_http_endpoint": f"localhost:{http}", "triton_grpc_endpoint": f"localhost:{grpc}",
        "triton_metrics_url": f"http://localhost:{metrics}/metrics",
        "triton_output_path": str(tmp / "ma_triton.log"), "run_config_search_disable": True,
        "profile_models": {MODEL: {
            "cpu_only": True,
            "model_config_parameters": {"max_batch_size": list(MAX_BATCH),
                                        "instance_group": [{"kind": "KIND_CPU", "count": list(INSTANCES)}]},
            "parameters": {"concurrency": list(CONCURRENCY), "batch_sizes": [1]},
            "perf_analyzer_flags": {"input-data": str(inputs), "shape": ["ids:16"]},
            "objectives": ["perf_throughput"]}},
    }
    (tmp / "ma_export").mkdir()
    path = tmp / "ma.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    t0 = time.perf_counter()
    r = subprocess.run([str(exe), "profile", "-f", str(path)], cwd=tmp, capture_output=True, text=True,
                       timeout=7200)
    wall = time.perf_counter() - t0
    (tmp / "ma.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise SystemExit(f"model-analyzer failed ({r.returncode}): {(r.stdout + r.stderr)[-800:]}")
    best: dict[str, float] = {}
    points = 0
    with open(tmp / "ma_export" / "results" / "metrics-model-inference.csv", newline="") as f:
        for row in csv.DictReader(f):
            count = int(row["Instance Group"].split(":")[0])
            name = f"i{count}_b{row['Max Batch Size']}_d0"
            if row["Model Config Path"].endswith("_default"):
                name += " (default)"
            points += 1
            best[name] = max(best.get(name, 0.0), float(row["Throughput (infer/sec)"]))
    chosen = max(best, key=best.get)
    return {"tool": "Model Analyzer", "wall": wall, "best": best, "points": points, "chosen": chosen,
            "budget": None}


def run_navigator(ws: Path, budget: float) -> dict:
    search = ["--instance-counts", ",".join(map(str, INSTANCES)), "--max-batch-sizes", ",".join(map(str, MAX_BATCH)),
              "--queue-delays-us", "0", "--concurrency", f"{CONCURRENCY[0]}:{CONCURRENCY[-1]}"]
    t0 = time.perf_counter()
    r = navigator("profile", ws, "--triton", "--cpu-backends", "--perf-analyzer", "on", "--search", "brute",
                  *search, "--budget-s", f"{budget:.0f}", cwd=ws.parent)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"navigator profile failed ({r.returncode}): {r.stderr.strip()[-600:]}")
    sv = yaml.safe_load((ws / "status.yaml").read_text())["serving"]
    best = {c["name"]: c["best"]["throughput"] for c in sv["configurations"] if c.get("best")}
    points = sum(len(c.get("results") or []) for c in sv["configurations"])
    return {"tool": "Navigator", "wall": wall, "best": best, "points": points, "chosen": sv["chosen"],
            "budget": budget}


def judge(ws: Path, repo: Path, picks: list[str], inputs: Path, tmp: Path, rounds: int) -> dict[str, list[float]]:
    """Each pick served alone and measured the same way, interleaved (the order rotates each
    round): perf_analyzer at concurrency 8 and 16, 2 s windows, the higher throughput kept."""
    from navigator.serving import perf_analyzer
    from navigator.triton.server import TritonServer
    from navigator.triton.server_env import prepare

    env = prepare(quiet=True)
    out: dict[str, list[float]] = {p: [] for p in picks}
    for n in range(rounds):
        for pick in picks[n % len(picks):] + picks[:n % len(picks)]:
            served = tmp / "judge" / pick
            shutil.rmtree(served, ignore_errors=True)
            shutil.copytree(repo / MODEL, served / MODEL)
            shutil.copyfile(ws / "serving" / "configs" / f"{pick}.config.pbtxt", served / MODEL / "config.pbtxt")
            with TritonServer(served, cpu_backends=True) as server:
                best = 0.0
                for conc in (8, 16):
                    m, _ = perf_analyzer.measure(env.perf_analyzer, env.process_env(), model=MODEL,
                                                 url=server.grpc_url, input_data=inputs, shapes=["ids:16"],
                                                 concurrency=conc, batch_size=1, window_ms=2000,
                                                 workdir=tmp / "judge" / "pa", tag=f"{pick}_{n}")
                    best = max(best, m.throughput)
            out[pick].append(best)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ma-venv", type=Path, default=Path.home() / ".cache" / "navigator-bench" / "ma158")
    ap.add_argument("--share", type=float, default=0.3, help="Navigator's budget as a share of MA's wall")
    ap.add_argument("--navigator-runs", type=int, default=2)
    ap.add_argument("--judge-rounds", type=int, default=3, help="interleaved re-measurements of the picks")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine_info import cpu_name

    load0 = os.getloadavg()
    exe = ma_venv(args.ma_venv)
    tmp = Path(tempfile.mkdtemp(prefix="nav-vs-ma-"))
    ws, repo = workspace_and_repo(tmp)
    first = run_navigator(ws, 20)   # writes serving/perf_input.json; not counted
    inputs = tmp / "perf_input.json"
    shutil.copyfile(ws / "serving" / "perf_input.json", inputs)
    print(f"warm-up navigator run: {first['wall']:.0f} s", file=sys.stderr)
    server, pa = server_wrapper(tmp)
    runs = [run_ma(exe, tmp, repo, inputs, server, pa)]
    print(f"Model Analyzer: {runs[0]['wall']:.0f} s, chosen {runs[0]['chosen']}", file=sys.stderr)
    budget = max(10.0, args.share * runs[0]["wall"] - 5.0)
    for _ in range(args.navigator_runs):
        runs.append(run_navigator(ws, budget))
        print(f"Navigator: {runs[-1]['wall']:.0f} s, chosen {runs[-1]['chosen']}", file=sys.stderr)

    def key(name: str) -> str:
        return name.replace(" (default)", "")

    # Navigator's last run wrote a config of every configuration it measured
    picks = [p for p in dict.fromkeys(key(run["chosen"]) for run in runs)
             if (ws / "serving" / "configs" / f"{p}.config.pbtxt").is_file()]
    judged = judge(ws, repo, picks, inputs, tmp, args.judge_rounds)
    load1 = os.getloadavg()

    names = sorted({key(n) for run in runs for n in run["best"]},
                   key=lambda n: (int(n.split("_")[1][1:]), int(n.split("_")[0][1:])))
    head = ["configuration", *(f"{run['tool']}" + (f" {i}" if run["tool"] == "Navigator" else "")
                               for i, run in enumerate(runs))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = []
        for run in runs:
            values = [v for n, v in run["best"].items() if key(n) == name]
            cells.append(f"{max(values):,.0f}" if values else "not measured")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ma, navs = runs[0], runs[1:]
    lines += [
        "| **configurations measured** | " + " | ".join(str(len({key(n) for n in run["best"]})) for run in runs) + " |",
        "| points measured | " + " | ".join(str(run["points"]) for run in runs) + " |",
        "| **wall s** | " + " | ".join(f"{run['wall']:.0f}" for run in runs) + " |",
        "| budget s | - | " + " | ".join(f"{run['budget']:.0f}" for run in navs) + " |",
        "| **pick** | " + " | ".join(key(run["chosen"]) for run in runs) + " |",
    ]
    medians = {p: statistics.median(v) for p, v in judged.items()}
    top_pick = max(medians, key=medians.get)
    # the noise: the widest spread of one pick's rounds around its median, at least 5%
    spread = max(0.05, *((max(v) - min(v)) / statistics.median(v) for v in judged.values()))
    verdict = {p: medians[p] >= medians[top_pick] * (1 - spread) for p in picks}
    judge_lines = ["| pick | picked by | " + " | ".join(f"round {i + 1}" for i in range(args.judge_rounds))
                   + " | median | within noise of the best |",
                   "|" + "---|" * (args.judge_rounds + 4)]
    for p in picks:
        by = ", ".join(sorted({run["tool"] + ("" if run["tool"] != "Navigator" else f" {i}")
                               for i, run in enumerate(runs) if key(run["chosen"]) == p}))
        judge_lines.append(f"| {p} | {by} | " + " | ".join(f"{v:,.0f}" for v in judged[p])
                           + f" | {medians[p]:,.0f} | {'yes' if verdict[p] else 'NO'} |")
    coverage = all(len({key(n) for n in run["best"]}) >= len({key(n) for n in ma["best"]}) for run in navs)
    ratio = [run["wall"] / ma["wall"] for run in navs]
    text = "\n".join([
        "# Navigator's serving search beside Model Analyzer 1.58 (CPU)",
        "",
        f"Written by `python benchmarks/vs_model_analyzer.py --share {args.share:g} --navigator-runs "
        f"{args.navigator_runs}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_name()}, "
        f"{os.cpu_count()} cores; load average {load0[0]:.1f} at start, {load1[0]:.1f} at end.",
        "",
        f"Model `{MODEL}` (examples/tiny_classifier.onnx), onnxruntime backend through navigator's CPU stand-in on "
        "tritonserver 2.51 (nvidia-pytriton); perf_analyzer 2.51 for both, the same inputs. Space: instance counts "
        f"{', '.join(map(str, INSTANCES))} x max batch sizes {', '.join(map(str, MAX_BATCH))}, concurrency "
        f"{', '.join(map(str, CONCURRENCY))}, client batch 1. Model Analyzer: a manual brute sweep with its "
        "measurement defaults (it also profiles the repository's config, i1_b64_d0). Navigator: brute search, "
        f"perf_analyzer, `--budget-s` = {args.share:g} x Model Analyzer's wall - 5 s. Best throughput (infer/s) of "
        "each configuration:",
        "",
        *lines,
        "",
        f"Navigator / Model Analyzer wall: {', '.join(f'{x:.2f}' for x in ratio)}. Coverage at least Model "
        f"Analyzer's: {'yes' if coverage else 'NO'}.",
        "",
        f"The picks judged apart ({args.judge_rounds} interleaved rounds, each pick served alone, perf_analyzer at "
        "concurrency 8 and 16 with 2 s windows, the higher kept; noise = the widest spread of one pick's rounds, at "
        f"least 5%: {spread:.0%}):",
        "",
        *judge_lines,
        "",
    ])
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
