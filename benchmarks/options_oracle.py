"""Navigator's pick of (format, runner, runtime options) beside an exhaustive sweep of the same space.

    python benchmarks/options_oracle.py --workdir /tmp/oracle --out benchmarks/results/options_oracle_cpu.md
    python benchmarks/options_oracle.py --models tiny_classifier,magika --workdir /tmp/o --out /tmp/o.md

For each model, `navigator convert` runs as a user would (default targets and profile budget; the trained
models get real inputs as --samples, made as benchmarks/trained.py makes them). Navigator's search time is
the time its profile took: the race worker's wall (screening, race, tuning), or the profile step of a
run's only (format, runner).

The oracle then measures every verified (format, runner) of that workspace with its defaults and with each
of its runner class's tuning candidates (``Runner.tuning_candidates``) at every batch size from 1 doubling
to the run's max batch size, each point with the full sweep's rule (windows of >= 100 ms and 10
inferences until the last 3 agree within 10%, 3-10 windows: ``navigator.execution.profiling.measure``).
Its time is the sum of those measurements and runner loads. Its best is taken where ``best`` chooses:
a format that a server would not run as verified (OpenVINO where its default precision failed
verification: ``navigator.formats.serving_refusal``) is measured, as Navigator measures it, but not
picked, as Navigator does not pick it. Last, Navigator's pick (its best, with the
options its profile kept, at its batch size) and the oracle's best point are measured again in
alternation, 3 rounds each, and compared on those figures (the first sweep's figures are moments apart
and carry the machine's drift).

Goal (issue "Performance 3"): pick >= 95% of the oracle's best throughput, at <= 0.3x the oracle's time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

ROUNDS = 3
# per model: where the source is, how samples are made, the max batch size of the run (the same space for both)
MODELS = {
    "tiny_classifier": ("example", 64, "examples/tiny_classifier.onnx: token classifier (random weights)"),
    "magika": ("trained", 64, "magika standard_v3_3 (trained, 2048 bytes in)"),
    "ppocr_rec": ("trained", 16, "PP-OCRv4 rec (trained, 48x320 text lines)"),
    "nudenet": ("trained", 8, "nudenet 320n YOLOv8n detector (trained, 320x320)"),
    "mtcnn_onet": ("trained", 64, "facenet-pytorch MTCNN ONet (trained torch module, 48x48 faces)"),
}


def _source_and_samples(name: str, workdir: Path) -> tuple[str, Path | None, int]:
    """The model argument for navigator convert, its samples folder (None: generated) and their count."""
    import numpy as np

    if MODELS[name][0] == "example":
        return str(REPO / "examples" / f"{name}.onnx"), None, 0
    import trained as T

    model = T.MODELS[name]
    cal, _, _ = model.build(True)
    sdir = workdir / "samples" / name
    shutil.rmtree(sdir, ignore_errors=True)
    sdir.mkdir(parents=True)
    for i, b in enumerate(cal):
        np.savez(sdir / f"{i:03d}.npz", **b)
    return model.source(), sdir, len(cal)


def run_navigator(name: str, workdir: Path) -> dict:
    source, samples, count = _source_and_samples(name, workdir)
    max_batch = MODELS[name][1]
    cmd = [sys.executable, "-m", "navigator", "convert", source, "--workdir", str(workdir), "--model-name", name,
           "--max-batch-size", str(max_batch)]
    if samples is not None:
        cmd += ["--samples", str(samples), "--sample-count", str(count)]
    ws = workdir / f"{name}.nav.workspace"
    shutil.rmtree(ws, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    (workdir / f"{name}.convert.log").write_text(f"$ {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    if p.returncode not in (0, 1):
        raise RuntimeError(f"navigator convert {name} exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    import navigator

    res = navigator.load(ws)
    st = res.status
    best = st.best
    pick_rs = st.formats[best.key].runners[best.runner]
    # the profile's search: the race worker's wall when there was one, else the profiled steps
    race_log = ws / "jobs" / "race.log"
    search_s = None
    if race_log.is_file():
        text = race_log.read_text()
        stamps = [line[:23] for line in text.splitlines() if line[:4].isdigit()]
        if len(stamps) >= 2:
            fmt = "%Y-%m-%d %H:%M:%S,%f"
            search_s = (_dt.datetime.strptime(stamps[-1], fmt) - _dt.datetime.strptime(stamps[0], fmt)).total_seconds()
    if search_s is None:
        search_s = sum(rs.profile.duration_s or 0.0 for fs in st.formats.values() for rs in fs.runners.values())
    return {"cmd": " ".join(cmd), "wall_s": round(wall, 1), "search_s": round(search_s, 2), "workspace": str(ws),
            "pick": {"key": best.key, "runner": best.runner, "batch_size": best.batch_size,
                     "options": pick_rs.profile.options or {}, "throughput": best.throughput},
            "tuning": pick_rs.profile.tuning}


def _open(ws: Path, key: str, rkey: str, options: dict):
    from navigator import runners
    from navigator.execution.stages import stored_sample
    from navigator.workspace.layout import Workspace
    from navigator.workspace.status import load

    st = load(ws / "status.yaml")
    fs = st.formats[key]
    rs = fs.runners[rkey]
    names = {"inputs": [fs.io_names.get(n, n) for n in st.signature.input_names],
             "outputs": [fs.io_names.get(n, n) for n in st.signature.output_names]}
    base = runners.verify_options(fs.format, fs.precision, st.config.get("device") or rs.device)
    runner = runners.create(runners.RunnerSpec(rs.runner, rs.device, rs.provider), ws / fs.path, **names,
                            **(base | options)).activate()
    return runner, stored_sample(Workspace(ws), fs.io_names), st.batch_dim


def _measure(infer, sample, batch_dim, size):
    from navigator.execution.profiling import ProfileSettings, batch_of, measure

    feeds = sample if batch_dim is None else batch_of(sample, batch_dim, size)
    result, _ = measure(infer, feeds, size, ProfileSettings(), float("inf"))
    return result["throughput"]


def oracle(ws: Path, max_batch: int) -> dict:
    """Every (format, runner) Navigator profiled x options x batch size, measured fully; each row says
    whether best may pick it (``eligible``: of a format a server runs as verified,
    ``formats.serving_refusal``: not OpenVINO where its default precision, which Triton's backend
    serves, failed verification)."""
    from navigator import formats, runners
    from navigator.workspace.status import load

    st = load(ws / "status.yaml")
    cpus = len(os.sched_getaffinity(0))
    sizes = [1]
    while sizes[-1] * 2 <= max_batch:
        sizes.append(sizes[-1] * 2)
    if st.batch_dim is None:
        sizes = [1]
    rows = []
    t0 = time.perf_counter()
    for key, fs in st.formats.items():
        for rkey, rs in fs.runners.items():
            if rs.verify.status != "ok" or rs.profile.status != "ok":
                continue   # the space Navigator measured
            eligible = not formats.serving_refusal(key, fs)
            cls = runners.runner_class(rs.runner)
            for options in [{}] + cls.tuning_candidates(rs.device, rs.provider, cpus):
                runner, sample, batch_dim = _open(ws, key, rkey, options)
                try:
                    infer, _ = runner.profiling_infer()
                    for size in sizes:
                        rows.append({"key": key, "runner": rkey, "options": options, "batch_size": size,
                                     "throughput": _measure(infer, sample, batch_dim, size), "eligible": eligible})
                        print(f"  oracle {key} {rkey} {options or 'defaults'} b{size}: {rows[-1]['throughput']:.1f}/s",
                              flush=True)
                finally:
                    runner.deactivate()
    return {"rows": rows, "oracle_s": round(time.perf_counter() - t0, 1)}


def judge(ws: Path, pick: dict, best: dict) -> dict:
    """The pick and the oracle's best point, re-measured in alternation."""
    same = all(pick[k] == best[k] for k in ("key", "runner", "options", "batch_size"))
    points = [pick] if same else [pick, best]
    opened = [_open(ws, p["key"], p["runner"], p["options"]) for p in points]
    figures: list[list[float]] = [[] for _ in points]
    try:
        for r in range(ROUNDS):
            order = range(len(points)) if r % 2 == 0 else reversed(range(len(points)))
            for i in order:
                runner, sample, batch_dim = opened[i]
                figures[i].append(_measure(runner.profiling_infer()[0], sample, batch_dim, points[i]["batch_size"]))
    finally:
        for runner, _, _ in opened:
            runner.deactivate()
    mean = [sum(f) / len(f) for f in figures]
    return {"same_point": same, "pick_rounds": figures[0], "best_rounds": figures[-1],
            "ratio": round(mean[0] / mean[-1], 3)}


def run_one(name: str, workdir: Path) -> dict:
    nav = run_navigator(name, workdir)
    ws = Path(nav["workspace"])
    orc = oracle(ws, MODELS[name][1])
    top = max((r for r in orc["rows"] if r["eligible"]), key=lambda r: r["throughput"])
    best = {k: top[k] for k in ("key", "runner", "options", "batch_size")}
    verdict = judge(ws, nav["pick"], best)
    return {"model": name, "what": MODELS[name][2], "navigator": nav, "oracle": orc, "oracle_best": top,
            "judge": verdict, "time_ratio": round(nav["search_s"] / orc["oracle_s"], 3),
            "load": [round(x, 2) for x in os.getloadavg()]}


def _point(p: dict) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in sorted((p.get("options") or {}).items())) or "defaults"
    return f"{p['key']} / {p['runner']} / {opts} @ {p['batch_size']}"


def render(results: list[dict], meta: dict) -> str:
    lines = [f"# Runtime options: Navigator's pick vs an exhaustive oracle ({meta['date']})", "",
             f"Machine: {meta['machine']}; load average at start {meta['load_start']}, at end {meta['load_end']}.",
             f"Command: `{meta['command']}` (navigator {meta['navigator']}).", "",
             "| model | Navigator's pick | oracle's best | pick / best throughput (3 alternating rounds) | "
             "Navigator search s | oracle s | search / oracle time | points measured by the oracle |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error'][:200]} | | | | | | |")
            continue
        j = r["judge"]
        lines.append(f"| {r['model']} | {_point(r['navigator']['pick'])} | {_point(r['oracle_best'])} | "
                     f"{j['ratio']:.3f}{' (same point)' if j['same_point'] else ''} | {r['navigator']['search_s']} | "
                     f"{r['oracle']['oracle_s']} | {r['time_ratio']:.3f} | {len(r['oracle']['rows'])} |")
    lines += ["", "Models: " + "; ".join(f"{n}: {MODELS[n][2]} (max batch {MODELS[n][1]})" for n in meta["models"]),
              "", "What each tuning measured (the pick's profile.tuning):", ""]
    for r in results:
        t = (r.get("navigator") or {}).get("tuning")
        if t:
            cands = "; ".join(f"{', '.join(f'{k}={v}' for k, v in c['options'].items())}: "
                              f"{c.get('throughput', '-')}/s{' (' + c['out'] + ')' if c.get('out') else ''}"
                              for c in t.get("candidates", []))
            lines.append(f"- {r['model']}: defaults {t.get('defaults', {}).get('throughput', '-')}/s; {cands}; "
                         f"{t.get('reason')}")
        elif "error" not in r:
            lines.append(f"- {r['model']}: no tuning record (its winner's runner has no candidates)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from navigator._version import __version__

    names = args.models.split(",")
    args.workdir.mkdir(parents=True, exist_ok=True)
    meta = {"date": _dt.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_start": [round(x, 2) for x in os.getloadavg()], "navigator": __version__, "models": names,
            "command": " ".join(["python", "benchmarks/options_oracle.py", *(argv or sys.argv[1:])])}
    results = []
    for name in names:
        print(f"== {name}", flush=True)
        try:
            results.append(run_one(name, args.workdir))
        except Exception as e:   # noqa: BLE001 - the table says which model failed
            results.append({"model": name, "error": f"{type(e).__name__}: {e}"})
        print(json.dumps({k: v for k, v in results[-1].items() if k != "oracle"}, default=str)[:600], flush=True)
    meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
    (args.workdir / "options_oracle.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1,
                                                                 default=str))
    args.out.write_text(render(results, meta))
    print(render(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
