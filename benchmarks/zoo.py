"""The model zoo: a conformance corpus of real third-party architectures run through Navigator.

    python benchmarks/zoo.py --workdir /tmp/zoo --out benchmarks/results/zoo_cpu.md
    python benchmarks/zoo.py --subset ci --workdir /tmp/zoo-ci --json /tmp/zoo-ci.json
    python benchmarks/zoo.py --models bert,resnet --serve
    python benchmarks/zoo.py --from-json benchmarks/results/zoo_cpu.json --notes ANALYSIS.md --out REPORT.md

``--notes`` embeds a hand-written analysis (benchmarks/results/zoo_cpu.md carries one: copy its
"Summary and analysis" section out before regenerating). ``--write-expected`` writes the expectations
file that tests/functional/test_zoo.py checks the CI subset against.

Each model (benchmarks/zoo_models.py) runs in its own child process (``--one NAME``) through
Navigator's public API only: ``navigator.convert(...)`` with the family's default targets (+
openvino) and ``target_precisions=fp32,fp16,int8``; the results are read back from the
workspace's ``status.yaml`` and its stored npz files (samples/reference, formats/<key>/outputs),
so nothing here imports Navigator internals. ``--serve`` also emits a Triton repository
(``navigator triton WS``) for one model per family and sends one request through a real
``navigator serve REPO --cpu-backends`` server with tritonclient.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PRECISIONS = ("fp32", "fp16", "int8")
TARGETS = {   # the family's default targets (README), plus openvino for the non-ONNX sources
    "torch": ["torch", "torchscript", "torch_export", "onnx", "onnx-optimized", "openvino"],
    "keras": ["savedmodel", "onnx", "onnx-optimized", "openvino"],
    "onnx": ["onnx", "onnx-optimized", "openvino"],
}
PACKAGES = ["navigator", "torch", "transformers", "tokenizers", "safetensors", "keras", "tensorflow-cpu", "tf2onnx",
            "onnx", "onnxruntime", "onnxscript", "onnxslim", "onnxconverter-common", "openvino", "polygraphy",
            "numpy", "tritonclient", "tensorrt-rtx-cu13"]
DEGENERATE_STD = 1e-3          # an output whose values barely move across samples
DEGENERATE_MAX = 1e-3          # or that is ~0 everywhere


# =========================================================================== child: one model
def _np_stats(ws: Path) -> dict:
    """Per output: shape(s), max |ref|, std across rows (sample-to-sample variation), from
    samples/reference/*.npz (what Navigator verified against)."""
    import numpy as np

    files = sorted(glob.glob(str(ws / "samples" / "reference" / "*.npz")))
    per: dict[str, list] = {}
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            for k in z.files:
                per.setdefault(k, []).append(z[k])
    out = {}
    for k, arrs in per.items():
        maxabs = max(float(np.abs(a).max()) if a.size else 0.0 for a in arrs)
        rows = [a.reshape(a.shape[0], -1).astype(np.float64) for a in arrs if a.ndim >= 1 and a.shape[0] > 1]
        std = None
        if rows:
            # per-position std across the rows of each batch (positions differ in shape across batches)
            std = float(np.mean([r.std(0).mean() for r in rows]))
        out[k] = {"shapes": [list(a.shape) for a in arrs], "dtype": str(arrs[0].dtype), "max_abs": maxabs,
                  "row_std": std,
                  "degenerate": bool(maxabs < DEGENERATE_MAX or (std is not None and std < DEGENERATE_STD))}
    return out


def _output_errors(ws: Path, key: str, runner: str) -> dict:
    """max |out - ref| per output over the stored full-batch outputs, and that error relative to the
    output's scale (max |ref|)."""
    import numpy as np

    res: dict[str, dict] = {}
    dirs = glob.glob(str(ws / "formats" / key / "outputs" / f"{runner}*"))
    if not dirs:
        return res
    d = Path(sorted(dirs)[0])
    for f in sorted(d.glob("[0-9][0-9][0-9].npz")):
        ref_f = ws / "samples" / "reference" / f.name
        if not ref_f.exists():
            continue
        with np.load(f, allow_pickle=False) as o, np.load(ref_f, allow_pickle=False) as r:
            for k in r.files:
                if k not in o.files or o[k].shape != r[k].shape:
                    continue
                a, b = o[k].astype(np.float64), r[k].astype(np.float64)
                if not np.isfinite(a).all():
                    res.setdefault(k, {})["nonfinite"] = True
                err = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
                scale = float(np.abs(b).max()) if b.size else 0.0
                e = res.setdefault(k, {"max_abs": 0.0, "scale": 0.0})
                e["max_abs"] = max(e.get("max_abs", 0.0), err)
                e["scale"] = max(e.get("scale", 0.0), scale)
    for e in res.values():
        if e.get("scale"):
            e["rel_to_scale"] = e["max_abs"] / e["scale"]
    return res


def _invalid_ops(path: Path) -> list[str]:
    """Op types of an ONNX graph that no registered ONNX schema knows (e.g. tf2onnx's Erfc)."""
    try:
        import onnx
        from onnx import defs

        m = onnx.load(str(path), load_external_data=False)
        bad = set()
        graphs = [m.graph]
        while graphs:
            g = graphs.pop()
            for n in g.node:
                if not defs.has(n.op_type, n.domain or ""):
                    bad.add(f"{n.domain + '.' if n.domain else ''}{n.op_type}")
                for a in n.attribute:
                    if a.g is not None and a.g.node:
                        graphs.append(a.g)
                    graphs.extend(a.graphs)
        return sorted(bad)
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return [f"<could not read: {type(e).__name__}: {e}>"]


def sensitivity(ws: Path) -> dict | None:
    """How much the fp32 ONNX graph itself moves (max |out - ref| over the stored batches) when (a)
    its float weights are rounded to fp16, (b) its float inputs get 5e-4 relative noise. An fp16
    format whose error is about (a) fails because the *model* is that sensitive (e.g. a randomly
    initialised deep CNN), not because the conversion is wrong. onnx + onnxruntime only."""
    import numpy as np

    src = ws / "formats" / "onnx" / "model.onnx"
    if not src.exists():
        return None
    try:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        samples = [dict(np.load(f)) for f in sorted((ws / "samples" / "inputs").glob("[0-9][0-9][0-9].npz"))]
        refs = [dict(np.load(f)) for f in sorted((ws / "samples" / "reference").glob("[0-9][0-9][0-9].npz"))]

        def run(model_bytes, noise=0.0):
            sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
            names = [i.name for i in sess.get_inputs()]
            onames = [o.name for o in sess.get_outputs()]
            rng = np.random.RandomState(0)
            out: dict = {}
            for b, r in zip(samples, refs):
                feed = {n: b[n] for n in names if n in b}
                if noise:
                    feed = {n: (v * (1 + noise * rng.standard_normal(v.shape))).astype(v.dtype)
                            if v.dtype.kind == "f" else v for n, v in feed.items()}
                for i, v in enumerate(sess.run(None, feed)):
                    ref = r[onames[i]] if onames[i] in r else list(r.values())[i]
                    if v.shape == ref.shape and v.dtype.kind == "f":
                        out[onames[i]] = max(out.get(onames[i], 0.0), float(np.abs(v.astype(np.float64) - ref).max()))
            return out

        m = onnx.load(str(src))
        for init in m.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT:
                a = numpy_helper.to_array(init)
                with np.errstate(over="ignore"):
                    r16 = np.clip(a, -65504, 65504).astype(np.float16).astype(np.float32)
                r16 = np.where(np.abs(a) > 65504, a, r16)      # fp16 conversion keeps those in fp32 anyway
                init.CopyFrom(numpy_helper.from_array(r16.astype(np.float32), init.name))
        return {"fp16_weights": run(m.SerializeToString()), "input_noise_5e-4": run(str(src), 5e-4)}
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return {"error": f"{type(e).__name__}: {_short(e, 200)}"}


def _short(text, n=400):
    if text is None:
        return None
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def summarise_workspace(ws: Path) -> dict:
    """Everything the report needs from one workspace (status.yaml + npz files)."""
    import yaml

    st = yaml.safe_load((ws / "status.yaml").read_text())
    out = {"workspace": str(ws), "state": st.get("state"), "signature": st.get("signature"),
           "shape_profiles": st.get("shape_profiles"), "samples": {k: v for k, v in (st.get("samples") or {}).items()
                                                                   if k in ("count", "source", "shapes",
                                                                            "value_ranges", "reference")},
           "best": st.get("best"), "formats": {}, "outputs": _np_stats(ws), "sensitivity": sensitivity(ws)}
    for key, fs in (st.get("formats") or {}).items():
        conv = fs.get("convert") or {}
        rec = {"format": fs.get("format"), "precision": fs.get("precision"), "parent": fs.get("parent"),
               "convert": {"status": conv.get("status"), "reason": _short(conv.get("reason"), 600),
                           "duration_s": conv.get("duration_s"), "exporter": conv.get("exporter")},
               "peak_rss_mb": fs.get("peak_rss_mb"), "runners": {}}
        path = fs.get("path")
        if conv.get("status") == "ok" and path and str(path).endswith(".onnx") and (ws / path).exists():
            rec["invalid_ops"] = _invalid_ops(ws / path)
        for rname, rs in (fs.get("runners") or {}).items():
            v = rs.get("verify") or {}
            p = rs.get("profile") or {}
            peak = max(p.get("results") or [], key=lambda r: r.get("throughput") or 0, default=None)
            rec["runners"][rname] = {
                "verify": {"status": v.get("status"), "reason": _short(v.get("reason"), 600),
                           "batch_sizes": v.get("batch_sizes"), "duration_s": v.get("duration_s"),
                           "outputs": {o: {k: c.get(k) for k in ("mode", "passed", "max_abs", "max_rel", "atol",
                                                                 "rtol", "min_atol", "min_rtol", "reason")}
                                       for o, c in (v.get("outputs") or {}).items()}},
                "profile": {"status": p.get("status"), "reason": _short(p.get("reason"), 300),
                            "peak": peak},
                "errors": _output_errors(ws, key, rname),
            }
        out["formats"][key] = rec
    return out


def _navigator_options(m, workdir: Path) -> dict:
    opts = dict(m.options)
    opts.update(workdir=str(workdir), model_name=m.name, targets=TARGETS[m.kind],
                target_precisions=list(PRECISIONS), profile_budget_s=3.0, timeout=400, force=True,
                profile_batch_sizes=None)
    opts = {k: v for k, v in opts.items() if v is not None}
    return opts


def run_one(name: str, workdir: Path) -> dict:
    """Convert one zoo model with Navigator's API; returns the summary (JSON-able)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import zoo_models

    m = zoo_models.MODELS[name]
    rec: dict = {"model": name, "family": m.family, "kind": m.kind, "notes": m.notes}
    t0 = time.perf_counter()
    try:
        source = m.build_source(workdir / "_sources")
        rec["build_s"] = round(time.perf_counter() - t0, 2)
        samples = None if m.generated_samples else m.samples()
        opts = _navigator_options(m, workdir)
        rec["options"] = {k: (v if not isinstance(v, tuple) else list(v)) for k, v in opts.items()}
        import navigator

        t1 = time.perf_counter()
        result = navigator.convert(source, samples, progress=False, **opts)
        rec["convert_wall_s"] = round(time.perf_counter() - t1, 2)
        rec["exit_code"] = result.exit_code
        rec["failures"] = [_short(f, 300) for f in result.failures]
        ws = Path(result.workspace)
        rec.update(summarise_workspace(ws))
    except Exception as e:  # noqa: BLE001 - recorded as the model's error
        rec["error"] = f"{type(e).__name__}: {_short(e, 1500)}"
        rec["traceback"] = traceback.format_exc()[-4000:]
        ws_dirs = sorted(workdir.glob("*.nav.workspace"))
        if ws_dirs and (ws_dirs[0] / "status.yaml").exists():
            try:
                rec.update(summarise_workspace(ws_dirs[0]))
            except Exception:  # noqa: BLE001
                pass
    rec["wall_s"] = round(time.perf_counter() - t0, 2)
    return rec


# =========================================================================== serving
def serve_one(rec: dict, navigator_bin: str) -> dict:
    """navigator triton WS; navigator serve WS/triton --cpu-backends; one request; compare."""
    import numpy as np

    ws = Path(rec["workspace"])
    out: dict = {"model": rec["model"]}
    t0 = time.perf_counter()
    r = subprocess.run([navigator_bin, "triton", str(ws), "--force"], capture_output=True, text=True, timeout=300)
    out["triton_rc"] = r.returncode
    if r.returncode != 0:
        out["status"] = "failed"
        out["reason"] = "navigator triton: " + _short(r.stderr or r.stdout, 600)
        return out
    repo = ws / "triton"
    models = sorted(p.name for p in repo.iterdir() if (p / "config.pbtxt").exists())
    out["repo_models"] = models
    cfg = (repo / models[0] / "config.pbtxt").read_text()
    out["backend"] = (re.findall(r'backend:\s*"([^"]+)"', cfg) or re.findall(r'platform:\s*"([^"]+)"', cfg) or ["?"])[0]
    log = ws / "serve.log"
    proc = subprocess.Popen([navigator_bin, "serve", str(repo), "--cpu-backends", "--log-file", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    url = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                if proc.poll() is not None:
                    break
                continue
            lines.append(line.rstrip())
            mm = re.search(r"HTTP:\s+http://(\S+)", line)
            if mm:
                url = mm.group(1)
                break
        if url is None:
            out["status"] = "failed"
            out["reason"] = "server did not come up: " + _short(" | ".join(lines[-15:]), 900)
            return out
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(url)
        meta = client.get_model_metadata(models[0])
        with np.load(sorted((ws / "samples" / "inputs").glob("*.npz"))[0], allow_pickle=False) as z:
            sample = {k: z[k] for k in z.files}
        with np.load(sorted((ws / "samples" / "reference").glob("*.npz"))[0], allow_pickle=False) as z:
            ref = {k: z[k] for k in z.files}
        names_in = [i["name"] for i in meta["inputs"]]
        keys = list(sample)
        inputs = []
        for i, spec in enumerate(meta["inputs"]):
            arr = sample[spec["name"]] if spec["name"] in sample else sample[keys[i]]
            arr = arr[:2]                         # two rows
            t = httpclient.InferInput(spec["name"], list(arr.shape), spec["datatype"])
            t.set_data_from_numpy(arr.astype(np.dtype(_np_dtype(spec["datatype"]))))
            inputs.append(t)
        res = client.infer(models[0], inputs)
        rkeys = list(ref)
        errs = {}
        for i, spec in enumerate(meta["outputs"]):
            got = res.as_numpy(spec["name"])
            want = ref[spec["name"]] if spec["name"] in ref else ref[rkeys[i]]
            want = want[:2]
            if got.shape != want.shape:
                errs[spec["name"]] = f"shape {list(got.shape)} != reference {list(want.shape)}"
            else:
                errs[spec["name"]] = float(np.abs(got.astype(np.float64) - want).max())
        out.update(status="ok", url=url, inputs=names_in, max_abs=errs, wall_s=round(time.perf_counter() - t0, 2))
    except Exception as e:  # noqa: BLE001
        out["status"] = "failed"
        out["reason"] = f"{type(e).__name__}: {_short(e, 800)}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if log.exists():
            out["server_log_tail"] = _short(" | ".join(log.read_text(errors="replace").splitlines()[-8:]), 1200)
    return out


def _np_dtype(triton_dtype: str) -> str:
    return {"FP32": "float32", "FP16": "float16", "INT64": "int64", "INT32": "int32", "BOOL": "bool",
            "FP64": "float64", "INT8": "int8", "UINT8": "uint8"}[triton_dtype]


# =========================================================================== report
def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
                vnni = "avx512_vnni" in flags or "avx_vnni" in flags
                return f"{name}, {os.cpu_count()} cores, AVX2={'avx2' in flags}, VNNI={vnni}"
    except OSError:
        pass
    return platform.processor()


def cell(fmt: dict) -> str:
    c = fmt["convert"]["status"]
    if c == "skipped":
        return "skip"
    if c != "ok":
        return "**C✗**"
    marks = []
    for rn, r in fmt["runners"].items():
        v = r["verify"]["status"]
        marks.append({"ok": "ok", "failed": "**V✗**", "inconclusive": "**V?**", "skipped": "skip"}.get(v, str(v)))
    return "/".join(marks) if marks else "ok(no runner)"


def _is_noconverter(fmt: dict) -> bool:
    r = fmt["convert"].get("reason") or ""
    return fmt["convert"]["status"] == "skipped" and "no converter produces" in r


def failures_of(rec: dict) -> list[dict]:
    out = []
    if rec.get("error"):
        out.append({"model": rec["model"], "key": "-", "runner": "-", "stage": "model",
                    "reason": rec["error"]})
    for key, f in (rec.get("formats") or {}).items():
        if f["convert"]["status"] == "failed":
            out.append({"model": rec["model"], "key": key, "runner": "-", "stage": "convert",
                        "reason": f["convert"]["reason"]})
            continue
        if f.get("invalid_ops"):
            out.append({"model": rec["model"], "key": key, "runner": "-", "stage": "graph",
                        "reason": f"convert ok but the graph has op(s) outside the ONNX standard: {f['invalid_ops']}"})
        for rn, r in f["runners"].items():
            if r["verify"]["status"] in ("failed", "inconclusive"):
                worst = []
                for o, c in r["verify"]["outputs"].items():
                    if c.get("passed") is False:
                        e = r["errors"].get(o, {})
                        worst.append(f"{o}: max_abs {_g(c.get('max_abs'))} (atol {_g(c.get('atol'))}, "
                                     f"min_atol {_g(c.get('min_atol'))}), scale {_g(e.get('scale'))}, "
                                     f"rel-to-scale {_g(e.get('rel_to_scale'))}")
                out.append({"model": rec["model"], "key": key, "runner": rn, "stage": "verify",
                            "reason": (r["verify"]["reason"] or "") + (" | " + "; ".join(worst) if worst else ""),
                            "hint": _hint(rec, f, r)})
    return out


def _hint(rec: dict, fmt: dict, runner: dict) -> str:
    """A mechanical first diagnosis of a failed verification (the analysis says more)."""
    hints = []
    sens = (rec.get("sensitivity") or {}).get("fp16_weights") or {}
    for o, c in runner["verify"]["outputs"].items():
        if c.get("passed") is not False:
            continue
        e = runner["errors"].get(o, {})
        rel, err = e.get("rel_to_scale"), c.get("max_abs")
        if err is None:
            continue
        if fmt.get("precision") == "fp32" and rel is not None and rel < 1e-4:
            hints.append(f"{o}: fp32 rounding (error {_g(rel)} of the output scale {_g(e.get('scale'))}): "
                         "a fixed absolute atol is too tight at this scale")
        elif fmt.get("precision") == "fp16" and o in sens and err <= 2 * sens[o]:
            hints.append(f"{o}: model-limited: the fp32 graph with fp16-rounded weights already moves {_g(sens[o])}")
        elif fmt.get("precision") == "fp16" and rel is not None and rel < 2e-3:
            hints.append(f"{o}: fp16 rounding ({_g(rel)} of the output scale {_g(e.get('scale'))}): "
                         "atol 1e-2 is below fp16 resolution at this scale")
        elif rel is not None and rel > 0.3:
            hints.append(f"{o}: the format computes something else ({_g(rel)} of the output scale)")
        elif rel is not None:
            hints.append(f"{o}: error {_g(rel)} of the output scale")
    if runner["verify"].get("reason") and not runner["verify"]["outputs"]:
        hints.append("the runner raised")
    return "; ".join(hints)


def _g(x):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def write_report(records: list[dict], serve: list[dict], meta: dict, path: Path, notes: Path | None = None):
    lines: list[str] = []
    add = lines.append
    add("# Model zoo on CPU: real third-party architectures through Navigator\n")
    add(f"Run {meta['date']} on {meta['cpu']}; load average (1/5/15 min) at start "
        f"{meta['load_start']}, at end {meta['load_end']}. Wall time of the whole run: {meta['total_s']:.0f} s.\n")
    add("Command: `" + meta["command"] + "`\n")
    add("Each model: `navigator.convert(zoo_models.py:factory | keras model | file.onnx, samples, "
        "targets=<family defaults + openvino>, target_precisions=fp32,fp16,int8, profile_budget_s=3)`; "
        "results read from the workspace's status.yaml and npz files. Cells: one mark per runner "
        "(`ok` verified, `V✗` verification failed, `V?` inconclusive: no wrong answer could have been "
        "rejected on that data, `skip`), `C✗` conversion failed. Format keys that no "
        "converter makes on a CPU (torch-fp16, torchscript-int8, …) are left out.\n")
    if notes and notes.exists():
        add(notes.read_text())
        add("")

    # ---- matrix
    keys: list[str] = []
    for r in records:
        for k, f in (r.get("formats") or {}).items():
            if not _is_noconverter(f) and k not in keys:
                keys.append(k)
    all_skip = [k for k in keys if all(((r.get("formats") or {}).get(k) or {"convert": {"status": "skipped"}})
                                          ["convert"]["status"] == "skipped" for r in records)]
    keys = [k for k in keys if k not in all_skip]
    add("## Results: model × format\n")
    if all_skip:
        add("Requested but skipped for every model (they run on CUDA only): " + ", ".join(all_skip) + ".\n")
    add("| model | family | " + " | ".join(keys) + " | wall s |")
    add("|" + "---|" * (len(keys) + 3))
    for r in records:
        cells = []
        for i, k in enumerate(keys):
            f = (r.get("formats") or {}).get(k)
            cells.append(cell(f) if f else ("**ERR** (see failures)" if i == 0 and r.get("error")
                                              and not r.get("formats") else ""))
        add(f"| {r['model']} | {r['family']} | " + " | ".join(cells) + f" | {r.get('wall_s', 0):.0f} |")
    add("")
    # runner names per key
    runners_per_key: dict[str, list] = {}
    for r in records:
        for k, f in (r.get("formats") or {}).items():
            for rn in f["runners"]:
                runners_per_key.setdefault(k, [])
                if rn not in runners_per_key[k]:
                    runners_per_key[k].append(rn)
    add("Runner order in the cells: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in runners_per_key.items()) + "\n")

    # ---- counts
    conv_ok = conv_all = ver_ok = ver_all = 0
    edges: dict[str, dict] = {}
    for r in records:
        for k, f in (r.get("formats") or {}).items():
            if _is_noconverter(f) or f["convert"]["status"] == "skipped":
                continue
            edge = f"{f.get('parent') or '(source)'} → {k}"
            e = edges.setdefault(edge, {"convert_ok": 0, "convert": 0, "verify_ok": 0, "verify": 0})
            e["convert"] += 1
            conv_all += 1
            if f["convert"]["status"] == "ok":
                e["convert_ok"] += 1
                conv_ok += 1
                for rn, rr in f["runners"].items():
                    if rr["verify"]["status"] in ("ok", "failed", "inconclusive"):
                        e["verify"] += 1
                        ver_all += 1
                        if rr["verify"]["status"] == "ok":
                            e["verify_ok"] += 1
                            ver_ok += 1
    errors = sum(1 for r in records if r.get("error"))
    add(f"**Totals**: {len(records)} models ({errors} ended with an error before or during `navigator.convert`); "
        f"conversions ok {conv_ok}/{conv_all}; verifications ok {ver_ok}/{ver_all} (format × runner).\n")
    add("## Pass rate per conversion edge\n")
    add("| edge | convert ok | verify ok (format × runner) |")
    add("|---|---|---|")
    for edge, e in sorted(edges.items()):
        add(f"| {edge} | {e['convert_ok']}/{e['convert']} | {e['verify_ok']}/{e['verify']} |")
    add("")

    # ---- output scales
    add("## Reference outputs: scale and sample-to-sample variation\n")
    add("`max |ref|` over the stored reference outputs; `row std`: the std across the rows of a batch, "
        "averaged over positions (near 0 = the output barely depends on the input: any verification is "
        "vacuous). Heads are standardised in the factories (see zoo_models.py).\n")
    add("`fp16 weights` / `input noise`: how far the fp32 ONNX graph itself moves when its weights are "
        "rounded to fp16 / its inputs get 5e-4 relative noise (the floor any fp16 format can reach; a "
        "well-conditioned model stays far below 1e-2).\n")
    add("| model | output | shapes | max abs | row std | degenerate | fp16 weights | input noise |")
    add("|---|---|---|---|---|---|---|---|")
    for r in records:
        sens = r.get("sensitivity") or {}
        for o, s in (r.get("outputs") or {}).items():
            add(f"| {r['model']} | {o} | {' '.join('x'.join(map(str, sh)) for sh in s['shapes'])} | "
                f"{_g(s['max_abs'])} | {_g(s['row_std'])} | {'**yes**' if s['degenerate'] else 'no'} | "
                f"{_g((sens.get('fp16_weights') or {}).get(o))} | {_g((sens.get('input_noise_5e-4') or {}).get(o))} |")
    add("")

    # ---- detail per (model, format, runner)
    add("## Verification detail (every converted format × runner)\n")
    add("max abs / atol per output (`min_atol`: the smallest atol that passes at the stated rtol); "
        "`rel`: max abs error / max |ref|.\n")
    add("| model | format | runner | verify | outputs: max_abs (atol, min_atol, rel) | profile: peak/s @ batch |")
    add("|---|---|---|---|---|---|")
    for r in records:
        for k, f in (r.get("formats") or {}).items():
            if f["convert"]["status"] != "ok":
                continue
            for rn, rr in f["runners"].items():
                outs = []
                for o, c in rr["verify"]["outputs"].items():
                    e = rr["errors"].get(o, {})
                    outs.append(f"{o}: {_g(c.get('max_abs'))} ({_g(c.get('atol'))}, {_g(c.get('min_atol'))}, "
                                f"{_g(e.get('rel_to_scale'))})")
                peak = rr["profile"].get("peak") or {}
                thr = (f"{peak.get('throughput', 0):.0f} @ {peak.get('batch_size')}" if peak
                       else rr["profile"].get("status") or "-")
                if rr["profile"].get("status") == "failed":
                    thr = "failed: " + (rr["profile"].get("reason") or "")
                add(f"| {r['model']} | {k} | {rn} | {rr['verify']['status']} | {'; '.join(outs) or '-'} | {thr} |")
    add("")

    # ---- failures (as recorded)
    add("## Failures as recorded (reasons from status.yaml, shortened)\n")
    add("| model | format | runner | stage | reason | first diagnosis (mechanical) |")
    add("|---|---|---|---|---|---|")
    for r in records:
        for fl in failures_of(r):
            reason = (fl["reason"] or "").replace("|", "\\|")
            add(f"| {fl['model']} | {fl['key']} | {fl['runner']} | {fl['stage']} | {reason} | {fl.get('hint', '')} |")
    add("")

    if serve:
        add("## Serving check (`navigator triton WS` → `navigator serve REPO --cpu-backends` → one request)\n")
        add("| model | backend | status | max abs vs reference / reason |")
        add("|---|---|---|---|")
        for s in serve:
            detail = (json.dumps(s.get("max_abs")) if s.get("status") == "ok" else s.get("reason", "")).replace("|", "\\|")
            add(f"| {s['model']} | {s.get('backend', '-')} | {s.get('status')} | {detail} |")
        add("")

    add("## Wall time per model\n")
    add("| model | build s | convert s | total s | exit code |")
    add("|---|---|---|---|---|")
    for r in records:
        add(f"| {r['model']} | {_g(r.get('build_s'))} | {_g(r.get('convert_wall_s'))} | {_g(r.get('wall_s'))} | "
            f"{r.get('exit_code', 'error')} |")
    add("")
    add("## Versions\n")
    add(" ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def write_expected(records: list[dict], path: Path):
    """Per model, format key (convert attempted) and runner: the verify status of this run; a failed
    conversion as {convert: failed}."""
    import yaml

    models = {}
    for r in records:
        m = models.setdefault(r["model"], {})
        for key, f in (r.get("formats") or {}).items():
            if f["convert"]["status"] == "skipped":
                continue
            if f["convert"]["status"] != "ok":
                m[key] = {"convert": f["convert"]["status"]}
            else:
                m[key] = {rn: rr["verify"]["status"] for rn, rr in f["runners"].items()}
    text = ("# Expected verify status per (model, format key, runner) of `benchmarks/zoo.py --subset ci`\n"
            "# on a 2-core CPU (tests/functional/test_zoo.py). Regenerate with\n"
            "#   python benchmarks/zoo.py --subset ci --workdir /tmp/zoo-ci --write-expected " + str(path) + "\n"
            "# and review the diff: an entry going from ok to failed is a regression.\n")
    path.write_text(text + yaml.safe_dump({"models": models}, sort_keys=True))


def print_table(records: list[dict]):
    print(f"{'model':28} {'format':24} {'runner':22} {'convert':8} {'verify':8} detail")
    for r in records:
        if r.get("error"):
            print(f"{r['model']:28} {'-':24} {'-':22} {'ERROR':8} {'':8} {_short(r['error'], 120)}")
        for k, f in (r.get("formats") or {}).items():
            if _is_noconverter(f):
                continue
            if not f["runners"]:
                print(f"{r['model']:28} {k:24} {'-':22} {f['convert']['status']:8} {'-':8} "
                      f"{_short(f['convert']['reason'], 120) or ''}")
            for rn, rr in f["runners"].items():
                det = "; ".join(f"{o}:{_g(c.get('max_abs'))}/{_g(c.get('atol'))}"
                                for o, c in rr["verify"]["outputs"].items())
                if rr["verify"]["status"] != "ok" and rr["verify"].get("reason"):
                    det = _short(rr["verify"]["reason"], 120)
                print(f"{r['model']:28} {k:24} {rn:22} {f['convert']['status']:8} {rr['verify']['status']:8} {det}")


# =========================================================================== main
def select(models: str | None, subset: str | None) -> list[str]:
    import zoo_models

    if models:
        names = [m.strip() for m in models.split(",") if m.strip()]
        bad = [n for n in names if n not in zoo_models.MODELS]
        if bad:
            raise SystemExit(f"unknown model(s) {bad}; known: {', '.join(zoo_models.MODELS)}")
        return names
    if subset == "ci":
        return [n for n, m in zoo_models.MODELS.items() if m.ci]
    return list(zoo_models.MODELS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="zoo_workdir")
    ap.add_argument("--models")
    ap.add_argument("--subset", choices=["all", "ci"], default="all")
    ap.add_argument("--out", help="markdown report")
    ap.add_argument("--json", help="all records as JSON")
    ap.add_argument("--notes", help="a markdown file included in the report (the hand-written analysis)")
    ap.add_argument("--serve", action="store_true", help="one Triton request per family (first model of each)")
    ap.add_argument("--timeout", type=float, default=1500, help="per model, seconds")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-json", help=argparse.SUPPRESS)
    ap.add_argument("--from-json", help="re-write the report from an earlier --json file")
    ap.add_argument("--resummarise", action="store_true",
                    help="with --from-json: re-read the workspaces of that run (they must still exist)")
    ap.add_argument("--write-expected", help="write the run's verify statuses as an expectations YAML "
                                             "(tests/functional/test_zoo.py reads benchmarks/results/zoo_ci_expected.yaml)")
    a = ap.parse_args(argv)

    if a.one:   # child mode
        rec = run_one(a.one, Path(a.workdir))
        Path(a.one_json).write_text(json.dumps(rec, indent=1, default=str))
        return 0

    if a.from_json:
        data = json.loads(Path(a.from_json).read_text())
        if a.resummarise:   # re-read every workspace that still exists (new diagnostics, same run)
            for i, rec in enumerate(data["records"]):
                ws = rec.get("workspace")
                if ws and (Path(ws) / "status.yaml").exists():
                    rec.update(summarise_workspace(Path(ws)))
            Path(a.from_json).write_text(json.dumps(data, indent=1, default=str))
        if a.out:
            write_report(data["records"], data.get("serve", []), data["meta"], Path(a.out),
                         Path(a.notes) if a.notes else None)
        print_table(data["records"])
        if a.write_expected:
            write_expected(data["records"], Path(a.write_expected))
        return 0

    names = select(a.models, a.subset)
    workdir = Path(a.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    records = []
    for name in names:
        mdir = workdir / name
        out_json = workdir / f"{name}.result.json"
        if out_json.exists():
            out_json.unlink()
        t0 = time.perf_counter()
        print(f"[zoo] {name} ...", flush=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(workdir / f"{name}.child.log", "w") as log:
            try:
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", name,
                                       "--workdir", str(mdir), "--one-json", str(out_json)],
                                      stdout=log, stderr=subprocess.STDOUT, timeout=a.timeout, env=env)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        if out_json.exists():
            rec = json.loads(out_json.read_text())
        else:
            tail = (workdir / f"{name}.child.log").read_text(errors="replace").splitlines()[-20:]
            import zoo_models

            m = zoo_models.MODELS[name]
            rec = {"model": name, "family": m.family, "kind": m.kind,
                   "error": f"child process ended ({rc}) without a result: " + _short(" | ".join(tail), 1500),
                   "wall_s": round(time.perf_counter() - t0, 2)}
        records.append(rec)
        nf = len(failures_of(rec))
        print(f"[zoo] {name}: {rec.get('wall_s', 0):.0f} s, exit {rec.get('exit_code', rec.get('error', '?'))!s:.100}, "
              f"{nf} failure(s)", flush=True)

    serve = []
    if a.serve:
        nav = str(Path(sys.executable).parent / "navigator")
        done_families = set()
        for rec in records:
            if rec.get("error") or not rec.get("workspace") or rec["family"] in done_families or not rec.get("best"):
                continue
            done_families.add(rec["family"])
            print(f"[zoo] serve {rec['model']} ...", flush=True)
            serve.append(serve_one(rec, nav))
            print(f"[zoo] serve {rec['model']}: {serve[-1].get('status')} {_short(serve[-1].get('reason'), 200) or ''}",
                  flush=True)

    meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "cpu": _cpu(), "load_start": load_start,
            "load_end": [round(x, 2) for x in os.getloadavg()], "total_s": time.perf_counter() - start,
            "versions": _versions(), "command": " ".join(["python benchmarks/zoo.py"] + (argv or sys.argv[1:]))}
    print_table(records)
    if a.json:
        Path(a.json).write_text(json.dumps({"meta": meta, "records": records, "serve": serve}, indent=1, default=str))
    if a.out:
        write_report(records, serve, meta, Path(a.out), Path(a.notes) if a.notes else None)
        print(f"[zoo] report: {a.out}")
    if a.write_expected:
        write_expected(records, Path(a.write_expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
