"""Where the time of `navigator convert` goes, on the shipped example or any ONNX file.

    python benchmarks/pipeline_breakdown.py [MODEL.onnx] [--runs 3] [--profile-budget-s 20]

Prints one table per run: wall time of the whole run, the in-process
preparation, and per worker its wall time split into stage time (reference,
convert, verify, profile as the worker measured them) and the rest, which is
process start, imports and runner loading. Figures are for this machine only;
compare ratios within one run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(ROOT / "examples" / "tiny_classifier.onnx"))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--profile-budget-s", type=float, default=20.0)
    args = parser.parse_args()

    from navigator.config import NavigatorConfig
    from navigator.console import Reporter
    from navigator.pipeline import run

    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = NavigatorConfig(workdir=tmp, profile_budget_s=args.profile_budget_s)
            out = run(args.model, None, cfg, Reporter("quiet"))
            t = out.timings
            total = t["total_s"]
            print(f"\nrun {i + 1}: {Path(args.model).name}, exit {out.exit_code}, best {out.status.best.key} "
                  f"on {out.status.best.runner}")
            print(f"{'part':<28}{'seconds':>10}{'share':>9}")
            print(f"{'total wall':<28}{total:>10.2f}{100:>8.0f}%")
            print(f"{'prepare (in process)':<28}{t['prepare_s']:>10.2f}{100 * t['prepare_s'] / total:>8.1f}%")
            stage_sums: dict[str, float] = {}
            overhead = 0.0
            for name, wall, stages in t["workers"]:
                rest = wall - sum(stages.values())
                overhead += rest
                for k, v in stages.items():
                    stage_sums[k] = stage_sums.get(k, 0.0) + v
                print(f"{'worker ' + name:<28}{wall:>10.2f}{100 * wall / total:>8.1f}%   "
                      + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + f", start+load {rest:.2f}")
            for k, v in stage_sums.items():
                print(f"{'  all ' + k:<28}{v:>10.2f}{100 * v / total:>8.1f}%")
            n = t["process_starts"]
            print(f"{'  start+load, ' + str(n) + ' workers':<28}{overhead:>10.2f}{100 * overhead / total:>8.1f}%"
                  f"   ({overhead / max(1, n):.2f} s per worker)")


if __name__ == "__main__":
    main()
