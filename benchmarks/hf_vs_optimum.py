"""Navigator against Hugging Face Optimum's ONNX exporter on the same model folders (CPU).

    python benchmarks/hf_vs_optimum.py [--models bert_classifier,gpt2_lm] [--workdir DIR]
        [--optimum-venv ~/.cache/navigator-bench/optimum-onnx] [--out benchmarks/results/hf_vs_optimum_cpu.md]

The folders are tests/hf_models.py's: one tiny model per task, built offline, saved with
transformers 5.23 (the version Navigator uses here). Optimum's exporter is the
`optimum-onnx` package; its only release on the index, 0.1.0, requires
`transformers<4.58` and `optimum~=2.1.0`, so it cannot be installed beside transformers 5
(pip would downgrade transformers to 4.57.6; torch 2.13.0 would stay). It gets a venv of its
own outside the repository (created when absent, then reused): torch 2.13.0,
`optimum-onnx[onnxruntime]==0.1.0` and what that pulls (transformers 4.57.6, optimum 2.1.0).

Per model, each tool runs once in a fresh process, timed by its wall clock:
* Navigator: `navigator convert DIR --targets onnx --no-profile --runners onnxruntime,torch`
  (its own verification included: eager fp32 reference, every stored sample and each cut to
  batch 1, the default rule atol = 1e-4 x the output's scale, rtol 1e-4, negative controls);
* Optimum: `optimum-cli export onnx --model DIR --task T OUT` with its own validation on
  (a dummy input, its per-task atol); the task is passed because optimum-onnx 0.1.0 cannot
  infer a task from a local folder. Its validation result is read from its INFO log.
Then Optimum's `model.onnx` is run by onnxruntime on Navigator's stored samples (the
generated ones and the profile corners) and compared with Navigator's reference outputs with
Navigator's own comparison (validators.numeric.Accumulator: the same atol/rtol per output as
Navigator's onnx check, the same negative controls): "same tolerances" literally. An input
Optimum adds (`position_ids` of decoder LMs) is fed what eager transformers uses when it is
not given: 0..seq-1 on every row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import hf_models  # noqa: E402

DEFAULT_VENV = Path.home() / ".cache" / "navigator-bench" / "optimum-onnx"
OPTIMUM = "optimum-onnx[onnxruntime]==0.1.0"
TORCH = "torch==2.13.0"


def _machine() -> dict:
    from machine_info import cpu_name

    cpu = cpu_name()
    return {"cpu": cpu, "cores": os.cpu_count(), "load": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%dT%H:%M:%S")}


def optimum_venv(path: Path) -> Path:
    """The Optimum venv's python (created once)."""
    python = path / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", TORCH], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", OPTIMUM], check=True)
    return python


def _versions(python: Path) -> dict:
    code = ("import importlib.metadata as m, json\nout = {}\n"
            "for p in ('torch', 'transformers', 'optimum', 'optimum-onnx', 'onnxruntime', 'onnx'):\n"
            "    try:\n        out[p] = m.version(p)\n    except m.PackageNotFoundError:\n        pass\n"
            "print(json.dumps(out))")
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout)


# --------------------------------------------------------------------------- the two tools
def run_navigator(folder: Path, workdir: Path) -> dict:
    cmd = [sys.executable, "-m", "navigator", "convert", str(folder), "--workdir", str(workdir), "--targets", "onnx",
           "--no-profile", "--runners", "onnxruntime,torch", "--force"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir.parent)
    wall = time.perf_counter() - t0
    ws = workdir / f"{folder.name}.nav.workspace"
    out = {"exit": proc.returncode, "wall_s": round(wall, 1), "workspace": str(ws)}
    if not (ws / "status.yaml").is_file():
        out["error"] = (proc.stderr.strip().splitlines() or ["no status.yaml"])[-1]
        return out
    import yaml

    st = yaml.safe_load((ws / "status.yaml").read_text())
    onnx = st["formats"].get("onnx", {})
    verify = onnx.get("runners", {}).get("onnxruntime-cpu", {}).get("verify", {})
    out.update(task=st["model"]["huggingface"]["task"], export_s=onnx.get("convert", {}).get("duration_s"),
               exporter=onnx.get("convert", {}).get("exporter"), status=verify.get("status"),
               outputs={name: {k: o.get(k) for k in ("passed", "max_abs", "atol", "rtol", "conclusive")}
                        for name, o in (verify.get("outputs") or {}).items()},
               inputs={i["name"]: i["shape"] for i in st["signature"]["inputs"]},
               samples=[s[next(iter(s))] for s in st["samples"]["shapes"]])
    return out


def run_optimum(python: Path, folder: Path, task: str, out_dir: Path) -> dict:
    cmd = [str(python), "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", str(folder),
           "--task", task, str(out_dir)]
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") == "whisper":   # its dummy input is 3000 frames; this encoder takes 2 x positions
        cmd[-1:-1] = ["--nb_max_frames", str(2 * config["max_source_positions"])]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "info"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out_dir.parent)
    wall = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    (out_dir.parent / f"{folder.name}.optimum.log").write_text(log)
    close = re.findall(r"all values close \(atol: ([0-9.e-]+)\)", log)
    far = re.findall(r"not within the set tolerance ([0-9.e-]+)", log)
    own = "passed" if close and not far else ("failed" if far else "not reported")
    out = {"exit": proc.returncode, "wall_s": round(wall, 1), "own_validation": own,
           "own_atol": float((close or far or ["nan"])[0]), "args": cmd[4:]}
    if proc.returncode != 0:
        out["error"] = next((line for line in reversed(log.splitlines()) if "Error" in line), "exit != 0")[:200]
    return out


# --------------------------------------------------------------------------- Optimum's ONNX at Navigator's tolerances
def verify_onnx(model_path: Path, nav: dict) -> dict:
    """Optimum's model on Navigator's stored samples (full batch and cut to 1) against Navigator's
    reference, with Navigator's rule and controls for each output Navigator checked."""
    import numpy as np
    import onnxruntime as ort

    from navigator.validators import controls
    from navigator.validators.numeric import Accumulator
    from navigator.validators.tolerances import OutputRule

    ws = Path(nav["workspace"])
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds_names = [i.name for i in session.get_inputs()]
    produced = [o.name for o in session.get_outputs()]
    accs = {name: Accumulator(name, OutputRule("tolerance", atol=o["atol"], rtol=o["rtol"]))
            for name, o in nav["outputs"].items() if name in produced}
    samples = sorted((ws / "samples" / "inputs").glob("[0-9][0-9][0-9].npz"))
    errors, extra = [], sorted(set(feeds_names) - set(nav["inputs"]))
    for path in samples:
        inputs = dict(np.load(path))
        reference = dict(np.load(ws / "samples" / "reference" / path.name))
        for rows in sorted({next(iter(inputs.values())).shape[0], 1}, reverse=True):
            feed = {k: v[:rows] for k, v in inputs.items()}
            ref = {k: v[:rows] for k, v in reference.items()}
            if "position_ids" in feeds_names and "position_ids" not in feed:
                b, s = feed["input_ids"].shape
                feed["position_ids"] = np.broadcast_to(np.arange(s, dtype=np.int64), (b, s)).copy()
            try:
                outs = dict(zip(produced, session.run(None, {k: feed[k] for k in feeds_names})))
            except Exception as e:   # noqa: BLE001 - a shape the export cannot take is a result
                errors.append(f"{path.stem} batch {rows} {[list(a.shape) for a in feed.values()]}: "
                              f"{' '.join(str(e).split())[:160]}")
                continue
            wrong = controls.candidates(ref, feed, batch_dim=0)
            for name, acc in accs.items():
                acc.add(outs[name], ref[name], candidates=wrong.get(name, []))
    results = {name: acc.result() for name, acc in accs.items()}
    passed = not errors and bool(results) and all(r.passed for r in results.values())
    return {"status": "ok" if passed else "failed", "extra_inputs": extra,
            "missing_outputs": sorted(set(nav["outputs"]) - set(produced)), "errors": errors,
            "outputs": {name: {"passed": r.passed, "max_abs": r.max_abs, "atol": r.atol, "conclusive": r.conclusive,
                               "reason": r.reason} for name, r in results.items()}}


# --------------------------------------------------------------------------- report
def _fmt(x) -> str:
    return "-" if x is None else f"{x:.1e}"


def _worst(outputs: dict) -> str:
    cells = [f"{n} {_fmt(o.get('max_abs'))} / {_fmt(o.get('atol'))}" for n, o in outputs.items()]
    return "; ".join(cells) or "-"


def report(records: list[dict], meta: dict) -> str:
    lines = ["# Hugging Face folders: Navigator and Optimum's ONNX exporter side by side (CPU)", "",
             f"Run {meta['date']} on {meta['cpu']}, {meta['cores']} cores; load average (1/5/15 min) at start "
             f"{meta['load_start']}, at end {meta['load_end']}. Navigator with {meta['navigator_env']}; Optimum in "
             f"its own venv with {meta['optimum_env']}.", "",
             "Command: `python benchmarks/hf_vs_optimum.py` (folders from tests/hf_models.py, one tiny model per "
             "task; see the script's docstring for the method). Checks: `ok` = every output within Navigator's "
             "atol (1e-4 x the output's scale) / rtol 1e-4 on every stored sample, each also cut to batch 1, with "
             "Navigator's negative controls; cells give max abs error / atol per output.", "",
             "| model | task | Navigator onnx | Navigator max abs / atol | Navigator wall (export) | Optimum export "
             "(own check) | Optimum's ONNX at Navigator's tolerances | max abs / atol | Optimum wall | notes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        nav, opt, cross = r["navigator"], r["optimum"], r.get("cross") or {}
        notes = []
        if cross.get("extra_inputs"):
            notes.append(f"Optimum adds input {', '.join(cross['extra_inputs'])}")
        if cross.get("missing_outputs"):
            notes.append(f"Optimum leaves out {', '.join(cross['missing_outputs'])}")
        for e in cross.get("errors", [])[:2]:
            notes.append(f"refused {e}")
        if opt.get("error"):
            notes.append(f"Optimum: {opt['error']}")
        if "--nb_max_frames" in opt.get("args", []):
            notes.append("Optimum needed --nb_max_frames")
        conclusive = all(o.get("conclusive") for o in (nav.get("outputs") or {}).values())
        lines.append(
            f"| {r['model']} | {nav.get('task', '-')} | {nav.get('status', nav.get('error', '-'))}"
            f"{'' if conclusive else ' (inconclusive)'} | {_worst(nav.get('outputs') or {})} | "
            f"{nav['wall_s']} s ({nav.get('export_s') or 0:.1f} s) | exit {opt['exit']} ({opt['own_validation']}, "
            f"atol {opt['own_atol']:g}) | {cross.get('status', '-')} | {_worst(cross.get('outputs') or {})} | "
            f"{opt['wall_s']} s | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(hf_models.ALL))
    parser.add_argument("--workdir", default="/tmp/hf_vs_optimum")
    parser.add_argument("--optimum-venv", default=str(DEFAULT_VENV))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hf_vs_optimum_cpu.md"))
    parser.add_argument("--json", default=None, help="also write every record here")
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    (work / "nav").mkdir(parents=True, exist_ok=True)
    python = optimum_venv(Path(args.optimum_venv).expanduser())
    meta = {**_machine(), "optimum_env": _versions(python), "navigator_env": _versions(Path(sys.executable))}
    meta["load_start"] = meta.pop("load")
    records = []
    for name in args.models.split(","):
        folder = hf_models.build(name, work / "models")
        nav = run_navigator(folder, work / "nav")
        task = nav.get("task") or next(t for t, bs in hf_models.BUILDERS.items() if any(b.__name__ == name for b in bs))
        out_dir = work / "optimum" / name
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        opt = run_optimum(python, folder, task, out_dir)
        cross = verify_onnx(out_dir / "model.onnx", nav) if opt["exit"] == 0 and nav.get("outputs") else None
        records.append({"model": name, "navigator": nav, "optimum": opt, "cross": cross})
        print(f"{name}: navigator {nav.get('status')} {nav['wall_s']} s; optimum exit {opt['exit']} "
              f"{opt['own_validation']} {opt['wall_s']} s; at navigator's tolerances {cross and cross['status']}",
              flush=True)
    meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).write_text(report(records, meta))
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "records": records}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
