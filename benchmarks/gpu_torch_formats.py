"""PyTorch formats on a GPU through Navigator: ResNet-50 throughput per format at
batch 1 and 256, and each one's ratio to eager fp16 at batch 256.

    python benchmarks/gpu_torch_formats.py [--workdir DIR] [--budget-s 20] [--json OUT.json]

Needs a CUDA GPU, torch and torchvision. The model goes in as
``benchmarks/gpu_torch_formats.py:resnet50`` so every worker rebuilds it on the
GPU (a live module would stay on the CPU of the calling process). Random
weights: throughput does not depend on them, and nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

TARGETS = ["torch", "torchscript", "torch_export", "aoti", "torch-fp16", "torch_export-fp16", "aoti-fp16"]


def resnet50():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir")
    parser.add_argument("--budget-s", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--json")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--atol", help="override the default tolerances (e.g. 1e-3)")
    parser.add_argument("--rtol")
    args = parser.parse_args()
    extra = {k: getattr(args, k) for k in ("atol", "rtol") if getattr(args, k)}

    import navigator

    workdir = args.workdir or tempfile.mkdtemp(prefix="nav-gpu-")
    start = time.perf_counter()
    result = navigator.convert(f"{Path(__file__).resolve()}:resnet50", workdir=workdir, device="cuda",
                               shapes=f"x:{args.batch}x3x224x224", sample_count=1, targets=TARGETS,
                               runners=["torch", "torch_compile", "torchscript", "torch_export", "aoti"],
                               profile_batch_sizes=[1, args.batch], max_batch_size=args.batch,
                               profile_budget_s=args.budget_s, timeout=480, progress=True,
                               no_profile=args.no_profile, **extra)
    wall = time.perf_counter() - start
    rows = []
    for key, fs in result.status.formats.items():
        for rkey, rs in fs.runners.items():
            at = {r.batch_size: r.throughput for r in rs.profile.results}
            rows.append({"format": key, "runner": rkey, "convert": fs.convert.status, "verify": rs.verify.status,
                         "reason": rs.verify.reason or fs.convert.reason, "load_s": rs.verify.load_s,
                         "bs1": at.get(1), f"bs{args.batch}": at.get(args.batch),
                         "max_abs": max((c.max_abs or 0.0 for c in rs.verify.outputs.values()), default=None),
                         "min_atol": max((c.min_atol or 0.0 for c in rs.verify.outputs.values()), default=None),
                         "min_rtol": max((c.min_rtol or 0.0 for c in rs.verify.outputs.values()), default=None)})
    base = next((r[f"bs{args.batch}"] for r in rows if r["format"] == "torch-fp16" and r["runner"] == "torch-cuda"),
                None)
    print(f"\nResNet-50, device {result.status.environment.get('gpu')}, wall {wall:.0f} s")
    print(f"{'format':<18}{'runner':<20}{'convert':<9}{'verify':<9}{'load s':>8}{'bs1 img/s':>11}"
          f"{f'bs{args.batch} img/s':>13}{'vs eager fp16':>15}")
    for r in rows:
        big = r[f"bs{args.batch}"]
        ratio = f"{big / base:.2f}x" if big and base else "-"
        print(f"{r['format']:<18}{r['runner']:<20}{r['convert']:<9}{r['verify']:<9}"
              f"{(r['load_s'] or 0):>8.1f}{(r['bs1'] or 0):>11.0f}{(big or 0):>13.0f}{ratio:>15}")
        print(f"    max abs {r['max_abs']}, smallest passing atol {r['min_atol']} / rtol {r['min_rtol']}"
              + (f"; {r['reason'][:200]}" if r["verify"] != "ok" and r["reason"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"wall_s": wall, "rows": rows, "best": result.best.to_dict()
                                               if result.best else None}, indent=1))


if __name__ == "__main__":
    main()
