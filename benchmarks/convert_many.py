"""A model zoo on one machine: `navigator convert` one model at a time vs `navigator convert-many`.

    python benchmarks/convert_many.py [--models 8] [--profile-budget-s 2] [--rounds 2] [--scenarios verify,profile]
                                      [--out benchmarks/results/convert_many_cpu.md | --no-write]

Builds N small zoo-like PyTorch models (MLP, CNNs, a residual and a depthwise net, a transformer
encoder, a text classifier, a 1-D conv net, an autoencoder), exported to ONNX once, then for each
scenario times, in one run, on fresh workdirs and ``--rounds`` times interleaved:

* ``one at a time``: a shell loop of ``navigator convert MODEL`` (one process per model);
* ``convert-many, no Ray``: ``navigator convert-many`` with Ray hidden (the models one after
  another in one process);
* ``convert-many, Ray``: ``navigator convert-many`` with a local Ray instance (started and
  stopped inside the timed command).

Scenarios: ``verify`` (--no-profile: convert and verify only) and ``profile`` (also profiled;
measurements run one at a time on the node, by design; the profiler stops when its windows agree
or at its budget, so the seconds it took are shown beside the wall time). Each timed command
reports the machine's load: the 1-minute load average before it, the cores the whole machine kept
busy during it (/proc/stat) and those of our command, so runs disturbed by other work show it.
Every workspace is checked to be complete with the same formats and verdicts in all three ways.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["onnx", "onnx-optimized", "openvino"]


# --------------------------------------------------------------------------- the zoo
def zoo(n: int) -> list[tuple[str, object, tuple, dict]]:
    """(name, module, example input, dynamic axes) for ``n`` models, repeating the kinds with other
    seeds beyond eight."""
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    class TextClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5000, 64)
            self.fc = nn.Linear(64, 10)

        def forward(self, ids):
            return self.fc(self.emb(ids).mean(dim=1))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
            self.head = nn.Linear(64, 8)

        def forward(self, x):
            return self.head(self.layer(x).mean(dim=1))

    def dw(cin, cout):
        return [nn.Conv2d(cin, cin, 3, padding=1, groups=cin), nn.Conv2d(cin, cout, 1), nn.ReLU()]

    img = (torch.rand(2, 3, 32, 32),)
    kinds = [
        ("mlp", lambda: nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                      nn.Linear(512, 10)), (torch.rand(2, 256),)),
        ("cnn", lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(32, 10)), img),
        ("resnet", lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), Residual(16), Residual(16),
                                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)), img),
        ("mobilenet", lambda: nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), *dw(16, 32),
                                            *dw(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)),
         img),
        ("encoder", Encoder, (torch.rand(2, 16, 64),)),
        ("text", TextClassifier, (torch.randint(0, 5000, (2, 16)),)),
        ("conv1d", lambda: nn.Sequential(nn.Conv1d(1, 16, 9, stride=2), nn.ReLU(), nn.Conv1d(16, 32, 9, stride=2),
                                         nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 12)),
         (torch.rand(2, 1, 1024),)),
        ("autoencoder", lambda: nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU(),
                                              nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 784), nn.Sigmoid()),
         (torch.rand(2, 784),)),
    ]
    out = []
    for i in range(n):
        name, make, example = kinds[i % len(kinds)]
        torch.manual_seed(i)
        out.append((name if i < len(kinds) else f"{name}{i // len(kinds)}", make().eval(), example))
    return out


def export(folder: Path, n: int) -> list[Path]:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.backends.mha.set_fastpath_enabled(False)     # the fused encoder kernel has no ONNX export
    paths = []
    for name, module, example in zoo(n):
        path = folder / f"{name}.onnx"
        names = [f"input{i}" for i in range(len(example))]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)    # the TorchScript exporter: fast, and enough here
            torch.onnx.export(module, example, str(path), input_names=names, output_names=["output"],
                              dynamic_axes={**{k: {0: "batch"} for k in names}, "output": {0: "batch"}},
                              opset_version=17, dynamo=False)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- timing
def _busy_jiffies() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _children_cpu_s() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Wall time of ``cmd``, the 1-minute load average before it, the cores the whole machine kept
    busy meanwhile (/proc/stat) and those our command used (its reaped descendants' CPU time;
    Ray's workers, reparented when their raylet stops, are missed, so "others" is an upper bound)."""
    load = os.getloadavg()[0]
    busy0, total0 = _busy_jiffies()
    ours0 = _children_cpu_s()
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    busy1, total1 = _busy_jiffies()
    cores = os.cpu_count() or 1
    busy_cores = cores * (busy1 - busy0) / max(1, total1 - total0)
    ours = (_children_cpu_s() - ours0) / wall
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} … exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return {"wall": wall, "load": load, "busy": busy_cores, "ours": ours, "others": max(0.0, busy_cores - ours)}


def verdicts(workdir: Path) -> dict:
    out = {}
    for ws in sorted(workdir.glob("*.nav.workspace")):
        st = yaml.safe_load((ws / "status.yaml").read_text())
        assert st["state"] == "complete", (ws, st["state"])
        out[ws.name] = {k: (f["convert"]["status"], tuple(sorted((r, v["verify"]["status"])
                                                                 for r, v in f["runners"].items())))
                        for k, f in st["formats"].items()}
    return out


def profiling_s(workdir: Path) -> float:
    """Seconds the workspaces' profile steps took (the profiler stops when its windows agree or at
    its budget, so noise from other processes lengthens it)."""
    total = 0.0
    for ws in workdir.glob("*.nav.workspace"):
        st = yaml.safe_load((ws / "status.yaml").read_text())
        total += sum(r["profile"].get("duration_s") or 0.0 for f in st["formats"].values()
                     for r in f["runners"].values())
    return total


VARIANTS = ("one at a time (navigator convert per model)", "convert-many, no Ray (one process, in order)",
            "convert-many on a local Ray")


def scenario(name: str, paths: list[Path], tmp: Path, budget: float, rounds: int) -> list[tuple[int, str, dict]]:
    """Each variant ``rounds`` times, interleaved (so a change of load touches all three)."""
    options = ["--device", "cpu", "--max-batch-size", "16", "--targets", ",".join(TARGETS), "--allow-failures"]
    defaults = {"device": "cpu", "max_batch_size": 16, "targets": TARGETS, "allow_failures": True}
    if name == "verify":
        options.append("--no-profile")
        defaults["no_profile"] = True
    else:
        options += ["--profile-budget-s", str(budget)]
        defaults["profile_budget_s"] = budget
    manifest = tmp / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump({"defaults": defaults, "models": [str(p) for p in paths]}))
    hide_ray = ("import sys; sys.modules['ray'] = None; from navigator.cli.main import main; "
                "sys.exit(main(sys.argv[1:]))")
    rows = []
    for i in range(rounds):
        one, no_ray, ray_dir = (tmp / f"{name}-{i}-{v}" for v in ("one", "noray", "ray"))
        commands = [
            ["bash", "-c", 'for m in "$@"; do "$0" -m navigator convert "$m" ' + " ".join(options)
             + f' --workdir {one} -q || exit 1; done', sys.executable, *map(str, paths)],
            [sys.executable, "-c", hide_ray, "-q", "convert-many", str(manifest), "--workdir", str(no_ray)],
            [sys.executable, "-m", "navigator", "-q", "convert-many", str(manifest), "--workdir", str(ray_dir)]]
        for label, cmd, wd in zip(VARIANTS, commands, (one, no_ray, ray_dir)):
            r = timed(cmd, tmp)
            r["profile_s"] = profiling_s(wd)
            rows.append((i, label, r))
        reference = verdicts(one)
        for other in (no_ray, ray_dir):
            assert verdicts(other) == reference, f"{other.name}: formats or verdicts differ from one at a time"
    return rows


# --------------------------------------------------------------------------- report
def machine() -> str:
    from machine_info import one_line

    return one_line()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--profile-budget-s", type=float, default=2.0)
    parser.add_argument("--scenarios", default="verify,profile")
    parser.add_argument("--rounds", type=int, default=2, help="times each variant runs, interleaved")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "convert_many_cpu.md")
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    args = parser.parse_args()

    from navigator._version import __version__

    start = time.time()
    with tempfile.TemporaryDirectory(prefix="nav-many-bench-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        paths = export(tmp / "models", args.models)
        export_s = time.perf_counter() - t0
        text = ["# convert-many vs one model at a time (CPU)", "",
                f"Written by `benchmarks/convert_many.py --models {args.models} --profile-budget-s "
                f"{args.profile_budget_s:g} --rounds {args.rounds}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))}, "
                f"Navigator {__version__}.", "", f"Machine: {machine()}.", "",
                f"Models ({len(paths)}, exported to ONNX in {export_s:.1f} s): "
                + ", ".join(f"`{p.stem}` ({p.stat().st_size / 1024:.0f} KiB)" for p in paths)
                + f". Targets {', '.join(TARGETS)}, --max-batch-size 16, --device cpu.", ""]
        for name in args.scenarios.split(","):
            rows = scenario(name, paths, tmp, args.profile_budget_s, args.rounds)
            what = ("convert + verify (--no-profile)" if name == "verify"
                    else f"convert + verify + profile (--profile-budget-s {args.profile_budget_s:g})")
            cores = os.cpu_count() or 1
            text += [f"## {what}", "", f"| round | how | wall s | speed-up vs one at a time (same round) | "
                     f"profiling s (sum) | load avg before | machine busy, cores (of {cores}) | ours | "
                     "others (at most) |", "|---|---|---|---|---|---|---|---|---|"]
            base = {i: r["wall"] for i, label, r in rows if label == VARIANTS[0]}
            for i, label, r in rows:
                text.append(f"| {i + 1} | {label} | {r['wall']:.1f} | {base[i] / r['wall']:.2f}x | "
                            f"{r['profile_s']:.1f} | {r['load']:.2f} | {r['busy']:.2f} | {r['ours']:.2f} | "
                            f"{r['others']:.2f} |")
            ones = [r for i, label, r in rows if label == VARIANTS[0]]
            mean_one = sum(r["ours"] for r in ones) / len(ones)
            free = cores - sum(r["others"] for r in ones) / len(ones)
            ratios = {label: [base[i] / r["wall"] for i, lab, r in rows if lab == label] for label in VARIANTS}
            busy_others = cores - free
            if busy_others > 0.25 * cores:
                # Shared machine: the kernel divides the cores among runnable threads, so more processes
                # of ours take a larger share from the other work; "free" is not a fixed amount then.
                bound = (f"The machine was shared: other work kept {busy_others:.2f} of the {cores} cores busy "
                         f"during the one-at-a-time runs, which used {mean_one:.2f}. Running more processes side by "
                         "side takes a larger share of the cores from that other work, so a speed-up in these rows "
                         "measures that share as much as parallelism, and repeats only under the same load.")
            else:
                bound = (f"During the one-at-a-time runs other work kept {busy_others:.2f} of the {cores} cores "
                         f"busy and one model at a time used {mean_one:.2f} of the {free:.2f} left, so running "
                         f"models side by side could gain at most {max(free, mean_one) / mean_one:.2f}x here "
                         "before any overhead.")
            text += ["", "Speed-up per round: " + "; ".join(f"{label}: {', '.join(f'{x:.2f}x' for x in v)}"
                                                           for label, v in ratios.items() if label != VARIANTS[0])
                     + ". " + bound + " (\"ours\" misses the CPU time of Ray's worker processes, which are not our "
                       "children: for the Ray rows \"others\" is an upper bound.)", ""]
            print("\n".join(text[-len(rows) - 6:]), flush=True)
        text += ["Every workspace ended complete, with the same formats and verdicts in all three ways.", "",
                 "What convert-many on Ray adds inside its timed command: starting and stopping the local Ray "
                 "instance, and for profiled models a second (measure) phase per model, which resumes the "
                 "workspace, starts each format's worker again, verifies and profiles alone on the node "
                 "(measurements never overlap, by design). What it saves: one interpreter start per model "
                 "(also true without Ray), and the idle cores of one model's run when the machine has them."]
    report = "\n".join(text) + "\n"
    print(report)
    if not args.no_write:
        args.out.write_text(report)
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
