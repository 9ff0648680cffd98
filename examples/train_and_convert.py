"""Train a small CNN for a few steps, then hand it to Navigator at the end of training.

    python examples/train_and_convert.py [--workdir DIR] [--steps N]

The validation batches double as Navigator's samples: the formats are verified
on real data, and the script fails (exit 1) when a format does not compute the
same function — the same contract a CI release job relies on. No `__main__`
guard is needed by Navigator itself (workers are fresh `python -m` processes);
this one is only for tidiness.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cnn import SmallCNN  # noqa: E402

import navigator  # noqa: E402


def synthetic_batches(n: int, batch: int = 16, seed: int = 0):
    """Images whose class is the brightest of 10 vertical stripes: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        labels = torch.randint(0, 10, (batch,), generator=g)
        images = torch.rand(batch, 3, 32, 32, generator=g) * 0.5
        for i, label in enumerate(labels):
            images[i, :, :, label * 3:(label + 1) * 3] += 0.5
        yield images, labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="navigator_workdir")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step, (images, labels) in enumerate(synthetic_batches(args.steps)):
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained {args.steps} steps, last loss {loss.item():.3f}")

    model.eval()
    validation = [images for images, _ in synthetic_batches(2, batch=8, seed=1)]
    result = navigator.convert(model, validation, workdir=args.workdir, model_name="small_cnn",
                               targets=["torchscript", "torch_export", "onnx", "onnx-optimized"],
                               runners=["torch", "torchscript", "torch_export", "onnxruntime"],
                               max_batch_size=16, profile_budget_s=5)
    for key, fmt in result.formats.items():
        print(f"{key:16} {'verified' if fmt.verified else 'NOT verified'}")
    if result.best:
        print(f"best: {result.best.key} on {result.best.runner}, {result.best.throughput:.0f} img/s "
              f"at batch {result.best.batch_size}")
    print(f"workspace: {result.workspace}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
