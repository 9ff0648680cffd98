"""The re-warm before a tuning window of onnxruntime (``Runner.rewarm_s``): the paired ratio of two
sessions of one model under the tuning's own settings -- its defaults and ``intra_op_num_threads=1``
-- read over interleaved 20 ms windows (``navigator.execution.tuning.TUNE_WINDOW_S``) after 20 ms,
5 ms or no re-warm (2 inferences), with the 1 ms idle spin Navigator's workers set.

    python benchmarks/tuning_rewarm.py [--rounds 12] [--repeats 2]

Models: examples/cnn.py's small CNN exported to ONNX and examples/tiny_classifier.onnx, both at
batch 64 (0.9 ms and 30 us a call). The reference ratio of each is the median of 4 pairs of 0.3 s
windows measured alternately (50 ms re-warm). Per re-warm setting (alternated within each repeat,
each first in turn, so the machine's drift falls on all of them): the median per-round ratio, its deviation from the
reference, the per-round ratio's standard deviation (what the race's paired rules read) and the
wall time of a round of the two windows. Prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REWARMS = (0.02, 0.005, 0.0)


def runner(path: Path, **options):
    from navigator.runners.onnxruntime import OnnxruntimeRunner

    r = OnnxruntimeRunner(path, **options)
    r.activate()
    return r


def throughput(infer, feed: dict, batch: int, window_s: float, rewarm_s: float) -> float:
    from navigator.execution.profiling import ProfileSettings, race_window

    settings = ProfileSettings()
    settings.window_s = window_s
    lat = race_window(infer, feed, settings, rewarm_s)
    return len(lat) * batch / sum(lat)


def measure(path: Path, feed: dict, rounds: int, repeats: int) -> tuple[float, list[tuple]]:
    from navigator.execution.tuning import TUNE_WINDOW_S

    defaults, one = runner(path), runner(path, intra_op_num_threads=1)
    try:
        for r in (defaults, one):
            for _ in range(30):
                r.infer(feed)
        reference = statistics.median(throughput(one.infer, feed, 64, 0.3, 0.05)
                                      / throughput(defaults.infer, feed, 64, 0.3, 0.05) for _ in range(4))
        rows = []
        for rep in range(repeats):
            for rewarm in REWARMS[rep % 3:] + REWARMS[:rep % 3]:   # each setting first in turn
                ratios, start = [], time.perf_counter()
                for n in range(rounds):
                    pair = ((one, 0), (defaults, 1)) if n % 2 == 0 else ((defaults, 1), (one, 0))
                    got = [0.0, 0.0]
                    for r, i in pair:
                        got[i] = throughput(r.infer, feed, 64, TUNE_WINDOW_S, rewarm)
                    ratios.append(got[0] / got[1])
                rows.append((rep, rewarm, statistics.median(ratios), statistics.stdev(ratios),
                             (time.perf_counter() - start) / rounds))
        return reference, rows
    finally:
        defaults.deactivate()
        one.deactivate()


def main() -> None:
    import os

    import numpy as np

    import navigator.runners.onnxruntime as ort_runner
    from interleaved_spin import export_cnn

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    ort_runner.MEASURING_SPIN_US = 1000    # as in Navigator's worker processes
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cnn = Path(tmp) / "cnn.onnx"
        export_cnn(cnn)
        models = {"cnn": (cnn, {"x": np.random.default_rng(0).random((64, 3, 32, 32), dtype=np.float32)}),
                  "tiny_classifier": (ROOT / "examples" / "tiny_classifier.onnx",
                                      {"ids": np.random.default_rng(0).integers(0, 1000, (64, 16)).astype(np.int64)})}
        results = {name: measure(path, feed, args.rounds, args.repeats) for name, (path, feed) in models.items()}
    print(f"onnxruntime tuning windows: intra_op_num_threads=1 / defaults, {args.rounds} interleaved rounds; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load:.2f} at start")
    print("| model | reference ratio | repeat | re-warm ms | median ratio | / reference | ratio sd | round ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (reference, rows) in results.items():
        for rep, rewarm, med, sd, per in rows:
            print(f"| {name} | {reference:.3f} | {rep + 1} | {rewarm * 1000:g} | {med:.3f} | {med / reference:.3f} | "
                  f"{sd:.3f} | {per * 1000:.0f} |")


if __name__ == "__main__":
    main()
