"""ResNet-50 on a GPU through Navigator: every PyTorch format at fp32 and fp16,
throughput at batch 1 and 256, compile time, and each one's ratio to eager fp16.

    python benchmarks/gpu_resnet50.py [--workdir DIR] [--budget-s 10] [--batch 256] [--md OUT.md] [--json OUT.json]

Needs a CUDA GPU, torch and torchvision. The model goes in as
``benchmarks/gpu_resnet50.py:resnet50`` so every worker rebuilds it on the GPU
(a live module would stay on the CPU of the calling process). Random weights:
throughput does not depend on them, and nothing is downloaded.

fp32 means fp32 (TF32 off). Profiling on CUDA keeps the inputs on the GPU and
the outputs there (``io: device`` in status.yaml, as ``trtexec
--noDataTransfers``); CNNs run channels-last. "compile s" is the conversion
time of the format plus its runner's load time (torch.compile's first compile
counts as load). Tolerances: fp32 formats at the default table; fp16 formats at
``--fp16-atol`` / ``--fp16-rtol`` (ResNet-50 with random weights has logits of
magnitude ~1-10, so fp16 differs by ~2e-2: the default fp16 atol 1e-2 would
fail it; the smallest passing atol is printed per row).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

FP32 = ["torch", "torchscript", "torch_export", "aoti"]
FP16 = ["torch-fp16", "torch_export-fp16", "aoti-fp16"]
RUNNERS = ["torch", "torch_compile", "torchscript", "torch_export", "aoti"]
MODEL_NAVIGATOR_H100 = 5966.0   # FACTS.md: Model Navigator 0.14's best on an H100 without TensorRT (img/s)


def resnet50():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).eval()


def _gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or "unknown GPU"
    except OSError:
        return "unknown GPU (no nvidia-smi)"


def _convert(targets, workdir, args, **extra):
    import navigator

    return navigator.convert(f"{Path(__file__).resolve()}:resnet50", workdir=workdir, device="cuda",
                             shapes=f"x:{args.batch}x3x224x224", sample_count=1, targets=targets, runners=RUNNERS,
                             profile_batch_sizes=[1, args.batch], max_batch_size=args.batch,
                             profile_budget_s=args.budget_s, timeout=900, progress=True, **extra)


def _rows(result, batch: int) -> list[dict]:
    rows = []
    for key, fs in result.status.formats.items():
        for rkey, rs in fs.runners.items():
            at = {r.batch_size: r.throughput for r in rs.profile.results}
            outs = rs.verify.outputs.values()
            rows.append({"format": key, "runner": rkey, "convert": fs.convert.status, "verify": rs.verify.status,
                         "reason": rs.verify.reason or fs.convert.reason or rs.profile.reason,
                         "compile_s": (fs.convert.duration_s or 0.0) + (rs.verify.load_s or 0.0),
                         "bs1": at.get(1), "bsN": at.get(batch),
                         "io": next((r.io for r in rs.profile.results), None),
                         "max_abs": max((c.max_abs or 0.0 for c in outs), default=None),
                         "min_atol": max((c.min_atol or 0.0 for c in outs), default=None)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir")
    parser.add_argument("--budget-s", type=float, default=10.0, help="profile budget per format")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--fp16-atol", default="3e-2")
    parser.add_argument("--fp16-rtol", default="1e-2")
    parser.add_argument("--only", choices=["fp32", "fp16"], help="one precision only")
    parser.add_argument("--skip", default="", help="comma-separated formats to leave out (e.g. aoti,aoti-fp16)")
    parser.add_argument("--md", help="write the table as markdown here")
    parser.add_argument("--json")
    args = parser.parse_args()

    import torch

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nav-gpu-"))
    start = time.perf_counter()
    rows = []
    skip = set(filter(None, args.skip.split(",")))
    if args.only != "fp16":
        rows += _rows(_convert([f for f in FP32 if f not in skip], workdir / "fp32", args), args.batch)
    if args.only != "fp32":
        rows += _rows(_convert([f for f in FP16 if f not in skip], workdir / "fp16", args, atol=args.fp16_atol,
                               rtol=args.fp16_rtol), args.batch)
    wall = time.perf_counter() - start
    N = args.batch
    base = next((r["bsN"] for r in rows if r["format"] == "torch-fp16" and r["runner"] == "torch-cuda"), None)
    best = max((r for r in rows if r["verify"] == "ok" and r["bsN"]), key=lambda r: r["bsN"], default=None)
    gpu = _gpu_name()
    lines = [f"# ResNet-50 on {gpu}",
             "",
             f"`python benchmarks/gpu_resnet50.py --budget-s {args.budget_s:g} --batch {N}` — torch "
             f"{torch.__version__}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
             f"wall {wall:.0f} s for {args.only or 'both precisions'} (conversion, verification, profiling).",
             "",
             f"| format | runner | convert | verify | compile s | bs1 img/s | bs{N} img/s | vs eager fp16 | "
             f"min passing atol |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['bsN'] / base:.2f}×" if r["bsN"] and base else "-"
        atol = "-" if r["min_atol"] is None else f"{r['min_atol']:.2g}"
        lines.append(f"| {r['format']} | {r['runner']} | {r['convert']} | {r['verify']} | {r['compile_s']:.1f} | "
                     f"{(r['bs1'] or 0):,.0f} | {(r['bsN'] or 0):,.0f} | {ratio} | "
                     f"{atol} |")
    lines.append("")
    for r in rows:
        if r["verify"] != "ok" and r["reason"]:
            lines.append(f"- {r['format']} / {r['runner']}: {' '.join(str(r['reason']).split())[:300]}")
    if best:
        lines += ["", f"Best: {best['format']} on {best['runner']}, {best['bsN']:,.0f} img/s at batch {N} "
                      f"(io: {best['io']}); {best['bsN'] / MODEL_NAVIGATOR_H100:.1f}× Model Navigator 0.14's best "
                      f"on an H100 without TensorRT ({MODEL_NAVIGATOR_H100:,.0f} img/s, FACTS.md)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        Path(args.md).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"wall_s": wall, "gpu": gpu, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
