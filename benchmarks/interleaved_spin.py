"""Two onnxruntime sessions measured window after window, as the race and the tuning do, with
onnxruntime's default idle spin and with the 1 ms one Navigator's worker processes set
(``navigator.runners.onnxruntime.MEASURING_SPIN_US``).

    python benchmarks/interleaved_spin.py [--rounds 16] [--repeats 3]

Exports examples/cnn.py's small CNN to ONNX (batch 64), opens two sessions of it (the race's
onnx and onnx-optimized are near this: one graph, two files) and, per spin setting, measures
first one session alone (``alone``: windows back to back, as a server runs it), then both in
alternating order round by round (the race's order) with the race's window and re-warm
(navigator.execution.profiling.race_window). Also tiny_classifier.onnx alone at batch 64
(30 us a call, the median of 7 windows: what a shorter spin would cost back-to-back calls, if anything). Prints a table:
the median window throughput alone and interleaved, the interleaved windows' spread
((max - min) / mean) and the standard deviation of the per-round ratio of the two sessions (what
the race's paired rules read; two copies of one model should give 1.0 with no spread).
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


def export_cnn(path: Path) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from cnn import small_cnn

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript-based exporter's deprecation notice
        torch.onnx.export(small_cnn(), (torch.rand(64, 3, 32, 32),), str(path), input_names=["x"], dynamo=False)


def session(path: Path, spin_us: int | None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if spin_us is not None:
        options.add_session_config_entry("session.intra_op.spin_duration_us", str(spin_us))
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feed: s.run(None, feed)


def throughput(infer, feed, batch: int) -> float:
    from navigator.execution.profiling import RACE_WINDOW_S, REWARM_S, ProfileSettings, race_window

    settings = ProfileSettings()
    settings.window_s = RACE_WINDOW_S
    lat = race_window(infer, feed, settings, REWARM_S)
    return len(lat) * batch / sum(lat)


def measure(model: Path, feed: dict, batch: int, spin_us: int | None, rounds: int) -> dict:
    a, b = session(model, spin_us), session(model, spin_us)
    for infer in (a, b):
        for _ in range(20):
            infer(feed)
    alone = [throughput(a, feed, batch) for _ in range(rounds // 2)]
    ra, rb = [], []
    for r in range(rounds):
        order = ((a, ra), (b, rb)) if r % 2 == 0 else ((b, rb), (a, ra))
        for infer, out in order:
            out.append(throughput(infer, feed, batch))
    both = ra + rb
    ratios = [x / y for x, y in zip(ra, rb)]
    return {"alone": statistics.median(alone), "interleaved": statistics.median(both),
            "spread": (max(ra) - min(ra)) / statistics.mean(ra), "ratio_sd": statistics.stdev(ratios)}


def main() -> None:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cnn = Path(tmp) / "cnn.onnx"
        export_cnn(cnn)
        feed = {"x": np.random.default_rng(0).random((64, 3, 32, 32), dtype=np.float32)}
        tiny = ROOT / "examples" / "tiny_classifier.onnx"
        tiny_feed = {"ids": np.random.default_rng(0).integers(0, 1000, (64, 16)).astype(np.int64)}
        rows = []
        for rep in range(args.repeats):
            for spin in (None, 1000):   # alternated so the machine's drift falls on both
                m = measure(cnn, feed, 64, spin, args.rounds)
                infer = session(tiny, spin)
                t = statistics.median(throughput(infer, tiny_feed, 64) for _ in range(7))
                rows.append((rep, "default" if spin is None else f"{spin} us", m, t))
    print(f"onnxruntime interleaved windows, {args.rounds} rounds; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| repeat | idle spin | cnn alone /s | cnn interleaved /s | interleaved spread | paired ratio sd "
          "| tiny_classifier alone /s |")
    print("|---|---|---|---|---|---|---|")
    for rep, name, m, t in rows:
        print(f"| {rep + 1} | {name} | {m['alone']:,.0f} | {m['interleaved']:,.0f} | {m['spread']:.2f} | "
              f"{m['ratio_sd']:.3f} | {t:,.0f} |")


if __name__ == "__main__":
    main()
