"""The GPU check (issue #36): ResNet-50 and BERT-base through `navigator convert` on every GPU
format, one results table.

    python benchmarks/gpu_check.py --out DIR [--cpu] [--models resnet50,bert] [--budget-s 3]
        [--total-s 500] [--skip aoti,...] [--targets [MODEL=]T,...] [--runners [MODEL=]R,...]

Each model is one `navigator convert` run (a fresh process, its console in DIR/<model>.log):
fp32 and fp16 formats together (torch, torchscript, torch_export, aoti, onnx and their fp16
variants), every CUDA runner (eager, torch.compile with and without CUDA graphs, onnxruntime's
CUDA provider in NCHW and NHWC), verified against the fp32 CPU-free eager reference and raced
on the GPU with inputs resident there (``io: device``). The table adds a task-level figure
computed here from the stored outputs: the share of rows whose top-1 class matches the
reference's, and the worst cosine between output rows (random weights: these say whether a
format keeps the function, not whether a trained model stays accurate).

``--cpu`` is the dry run: the same steps on the CPU with small stand-ins of both models, so
the GPU minutes go to measuring. When an AOTInductor package dies loading, a probe loads a
one-convolution package in fresh processes several ways and records which survive
(DIR/aoti_probe.txt). Writes DIR/gpu_check.md, DIR/gpu_check.json and DIR/failures.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    # name: (GPU factory, CPU stand-in, shapes with {b}, batch for throughput, extra CLI flags)
    "resnet50": ("resnet50", "resnet_small", "x:{b}x3x224x224", 256, []),
    "bert": ("bert_base", "bert_small", "input_ids:{b}x128,attention_mask:{b}x128", 128,
             ["--value-ranges", "attention_mask:1,2", "--dtypes", "attention_mask:int64"]),
}
GPU_TARGETS = ["torch", "torch-fp16", "torchscript", "torch_export", "torch_export-fp16", "aoti", "aoti-fp16",
               "onnx", "onnx-fp16"]
CPU_TARGETS = ["torch", "torchscript", "torch_export", "onnx", "onnx-fp16"]
GPU_RUNNERS = ["torch", "torch_compile", "torch_compile-cudagraphs", "torchscript", "torch_export", "aoti",
               "onnxruntime-cuda", "onnxruntime-cuda_nhwc"]
CPU_RUNNERS = ["torch", "torch_compile", "torchscript", "torch_export", "onnxruntime"]


def sh(cmd: list[str], timeout: float = 30) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({type(e).__name__}: {e})"


def environment(cpu: bool) -> dict:
    env = {"python": platform.python_version(), "host_cores": os.cpu_count(), "load": os.getloadavg()}
    if not cpu:
        env["gpu"] = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    probe = ("import json, torch, onnxruntime as o; print(json.dumps({'torch': torch.__version__, "
             "'cuda': torch.version.cuda, 'onnxruntime': o.__version__, 'providers': o.get_available_providers()}))")
    out = sh([sys.executable, "-c", probe], timeout=120)
    try:
        env.update(json.loads(out.splitlines()[-1]))
    except (ValueError, IndexError):
        env["versions"] = out
    return env


def for_model(values: list[str], name: str) -> list[str]:
    """``--targets a,b`` (every model) or ``--targets resnet50=a,b`` (that one): the list for ``name``."""
    chosen: list[str] = []
    for value in values:
        model, sep, items = value.rpartition("=")
        if not sep or model == name:
            chosen = [x for x in items.split(",") if x]
    return chosen


def convert(name: str, args, workdir: Path, timeout_s: float) -> tuple[Path, float, int]:
    factory, small, shapes, batch, extra = MODELS[name]
    batch = 8 if args.cpu else batch
    model = f"{ROOT / 'benchmarks' / 'gpu_models.py'}:{small if args.cpu else factory}"
    targets = [t for t in for_model(args.targets, name) or (CPU_TARGETS if args.cpu else GPU_TARGETS)
               if t not in args.skip]
    runners = for_model(args.runners, name) or (CPU_RUNNERS if args.cpu else GPU_RUNNERS)
    cmd = [sys.executable, "-P", "-m", "navigator", "convert", model, "--model-name", name, "--workdir",
           str(workdir), "--device", "cpu" if args.cpu else "cuda", "--shapes", shapes.format(b=batch),
           "--sample-count", "1", "--max-batch-size", str(batch), "--targets", ",".join(targets),
           "--runners", ",".join(runners), "--profile-batch-sizes", f"1,{batch}",
           "--profile-budget-s", str(args.budget_s), "--timeout", str(args.step_timeout_s), "--allow-failures",
           *extra]
    log = Path(args.out) / f"{name}.log"
    start = time.perf_counter()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:   # SIGTERM: navigator stops its workers and records the run
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = 124
    return workdir / f"{name}.nav.workspace", time.perf_counter() - start, code


def agreement(ws, key: str, runner_key: str) -> dict:
    """Top-1 agreement and the worst row cosine of the first output, over the stored samples."""
    import numpy as np

    from navigator.workspace import npz

    same = rows = 0
    worst = 1.0
    for ref_path in ws.reference_files():
        out_path = ws.output_file(key, runner_key, ref_path.stem)
        if not out_path.is_file():
            continue
        ref, out = npz.load(ref_path), npz.load(out_path)
        name = sorted(ref)[0]
        r = np.asarray(ref[name], dtype=np.float64).reshape(len(ref[name]), -1)
        o = np.asarray(out[name], dtype=np.float64).reshape(r.shape)
        same += int((r.argmax(1) == o.argmax(1)).sum())
        rows += len(r)
        cos = (r * o).sum(1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(o, axis=1), 1e-30)
        worst = min(worst, float(cos.min()))
    return {"top1": same / rows if rows else None, "cosine": worst if rows else None, "rows": rows}


def rows_of(name: str, ws_path: Path, batch: int) -> list[dict]:
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    if not (ws_path / "status.yaml").is_file():
        return [{"model": name, "format": "-", "runner": "-", "convert": "failed", "verify": "-",
                 "reason": "no status.yaml (see the run's log)"}]
    ws = Workspace(ws_path)
    st = status_mod.load(ws_path / "status.yaml")
    best = st.best
    out = []
    for key, fs in st.formats.items():
        for rkey, rs in fs.runners.items():
            at = {r.batch_size: r for r in rs.profile.results}
            peak = rs.profile.peak()
            checks = list(rs.verify.outputs.values())
            row = {"model": name, "format": key, "precision": fs.precision, "runner": rkey,
                   "convert": fs.convert.status, "verify": rs.verify.status, "profile": rs.profile.status,
                   "reason": rs.verify.reason or fs.convert.reason or rs.profile.reason,
                   "convert_s": fs.convert.duration_s, "load_s": rs.verify.load_s,
                   "bs1": at[1].throughput if 1 in at else None,
                   "bsN": at[batch].throughput if batch in at else None,
                   "peak": peak.throughput if peak else None, "peak_batch": peak.batch_size if peak else None,
                   "io": peak.io if peak else None,
                   "conclusive": all(c.conclusive for c in checks) if checks else None,
                   "max_abs": max((c.max_abs or 0.0 for c in checks), default=None),
                   "best": bool(best and best.key == key and best.runner == rkey)}
            if rs.verify.status in ("ok", "failed"):
                row.update(agreement(ws, key, rkey))
            out.append(row)
    return out


def failure_logs(ws_path: Path) -> str:
    """The tails of the logs of every step that failed, for failures.txt."""
    from navigator.workspace import status as status_mod

    if not (ws_path / "status.yaml").is_file():
        return ""
    st = status_mod.load(ws_path / "status.yaml")
    parts = []
    for key, fs in st.formats.items():
        steps = [("convert", fs.convert)] + [(f"{r} {kind}", getattr(rs, kind)) for r, rs in fs.runners.items()
                                             for kind in ("verify", "profile")]
        for label, step in steps:
            if step.status == "failed" and step.log and (ws_path / step.log).is_file():
                tail = (ws_path / step.log).read_text(errors="replace")[-3000:]
                parts.append(f"==== {ws_path.name} {key} {label}: {step.reason}\n{tail}\n")
    return "".join(parts)


def aoti_probe(out: Path, cpu: bool) -> str:
    """Compile a one-convolution package, then load it in fresh processes several ways."""
    device = "cpu" if cpu else "cuda"
    pkg = out / "probe.pt2"
    build = (f"import torch\nm = torch.nn.Conv2d(3, 8, 3).to('{device}').eval()\n"
             f"x = torch.randn(2, 3, 16, 16, device='{device}')\n"
             f"ep = torch.export.export(m, (x,))\n"
             f"torch._inductor.aoti_compile_and_package(ep, package_path={str(pkg)!r})\n")
    load = (f"import torch, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
            f"if 'promote' in sys.argv:\n    from navigator.runners.torch import promote_libstdcxx\n"
            f"    promote_libstdcxx()\n"
            f"torch.empty(1, device='{device}')\n"
            f"r = torch._inductor.aoti_load_package({str(pkg)!r})\n"
            f"print('ran', tuple(r(torch.randn(2, 3, 16, 16, device='{device}')).shape))\n")
    lines = []
    res = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True, timeout=300)
    lines.append(f"build: exit {res.returncode} {res.stderr.strip()[-300:]}")
    libstdcxx = sh(["g++", "-print-file-name=libstdc++.so.6"])
    ways = [("plain", [], {}), ("promote (ctypes RTLD_GLOBAL)", ["promote"], {}),
            ("LD_PRELOAD system libstdc++", [], {"LD_PRELOAD": libstdcxx}),
            ("LD_DEBUG bindings", [], {"LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(out / "ld")})]
    for label, argv, env in ways:
        try:
            res = subprocess.run([sys.executable, "-c", load, *argv], capture_output=True, text=True, timeout=120,
                                 env={**os.environ, **env})
            lines.append(f"{label}: exit {res.returncode} {(res.stdout + res.stderr).strip()[-200:]}")
        except subprocess.TimeoutExpired:
            lines.append(f"{label}: timed out")
    for path in sorted(out.glob("ld.*")):   # which objects the std::regex/locale symbols bound to
        picked = [ln for ln in path.read_text(errors="replace").splitlines()
                  if any(s in ln for s in ("regex", "collate", "locale", "codecvt", "ctype")) and "wrapper" in ln]
        lines += [f"  {path.name}: {ln.strip()}" for ln in picked[:40]]
        path.unlink()
    text = "\n".join(lines) + "\n"
    (out / "aoti_probe.txt").write_text(text)
    pkg.unlink(missing_ok=True)
    return text


def table(rows: list[dict], env: dict, args, walls: dict) -> str:
    card = env.get("gpu") or "CPU dry run"
    lines = [f"# GPU check on {card}", "",
             f"`bash benchmarks/gpu_check.sh{' --cpu' if args.cpu else ''}` on {time.strftime('%Y-%m-%d')}: torch "
             f"{env.get('torch')} (CUDA {env.get('cuda')}), onnxruntime {env.get('onnxruntime')}, Python "
             f"{env.get('python')}, {env.get('host_cores')} host cores; profile budget {args.budget_s:g} s per format. "
             "Random weights. Throughput in samples/s, each figure Navigator's own profile with the inputs on the "
             "device (io), the card named in the title; compile s = conversion + the runner's load (torch.compile's "
             "first compile). top-1 / cosine: agreement of the stored outputs with the fp32 reference, all rows.",
             "", "Wall per model: " + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()), "",
             "| model | format | runner | convert | verify | conclusive | compile s | bs1 /s | bsN /s | peak /s @ batch "
             "| io | top-1 | worst cosine | best |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def num(v, fmt="{:,.0f}"):
        return "-" if v is None else fmt.format(v)

    for r in rows:
        compile_s = (r.get("convert_s") or 0.0) + (r.get("load_s") or 0.0)
        lines.append(f"| {r['model']} | {r['format']} | {r['runner']} | {r['convert']} | {r['verify']} | "
                     f"{num(r.get('conclusive'), '{}')} | {compile_s:.1f} | {num(r.get('bs1'))} | {num(r.get('bsN'))} | "
                     f"{num(r.get('peak'))} @ {num(r.get('peak_batch'), '{}')} | {r.get('io') or '-'} | "
                     f"{num(r.get('top1'), '{:.4f}')} | {num(r.get('cosine'), '{:.6f}')} | "
                     f"{'**best**' if r.get('best') else ''} |")
    lines.append("")
    for r in rows:
        if r.get("verify") not in ("ok",) and r.get("reason"):
            lines.append(f"- {r['model']} {r['format']} / {r['runner']}: {' '.join(str(r['reason']).split())[:400]}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU with small stand-ins")
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--budget-s", type=float, default=3.0, help="profile budget per format")
    parser.add_argument("--total-s", type=float, default=500.0,
                        help="the whole check: a model's run gets what is left of it (less 30 s for the report), "
                             "and none starts with under 120 s left")
    parser.add_argument("--step-timeout-s", type=float, default=300.0, help="navigator's --timeout per step")
    parser.add_argument("--skip", default="", help="targets to leave out, e.g. aoti")
    parser.add_argument("--targets", action="append", default=[],
                        help="T,T for every model, or MODEL=T,T for one (repeat); default: every GPU format")
    parser.add_argument("--runners", action="append", default=[],
                        help="runner names or keys, as --targets (default: every CUDA runner)")
    parser.add_argument("--workdir")
    args = parser.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir or out / "work")
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    env = environment(args.cpu)
    print(json.dumps(env), flush=True)
    rows, walls, notes = [], {}, []
    for name in filter(None, args.models.split(",")):
        left = args.total_s - (time.perf_counter() - start) - 30
        if left < 90:
            notes.append(f"{name}: not run, under 120 s of the check's {args.total_s:g} s were left")
            continue
        ws, wall, code = convert(name, args, work, left)
        walls[name] = wall
        batch = 8 if args.cpu else MODELS[name][3]
        rows += rows_of(name, ws, batch)
        with open(out / "failures.txt", "a") as f:
            f.write(failure_logs(ws))
        print(f"{name}: exit {code} in {wall:.0f} s", flush=True)
    if any("aoti" in r["format"] and r.get("verify") == "failed" and "SIG" in str(r.get("reason")) for r in rows):
        notes.append("AOTInductor probe:\n" + aoti_probe(out, args.cpu))
    text = table(rows, env, args, walls) + "".join(f"\n{n}\n" for n in notes)
    (out / "gpu_check.md").write_text(text)
    (out / "gpu_check.json").write_text(json.dumps({"environment": env, "walls": walls, "rows": rows,
                                                    "notes": notes, "wall_s": time.perf_counter() - start},
                                                   indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
