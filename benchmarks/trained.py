"""Trained models from pip wheels through `navigator convert`, judged on held-out real inputs.

    python benchmarks/trained.py --workdir /tmp/trained --out benchmarks/results/trained_cpu.md
    python benchmarks/trained.py --models magika,ppocr_rec --workdir /tmp/t --out /tmp/t.md
    python benchmarks/trained.py --quick --workdir /tmp/tq --out /tmp/tq.md        # CI-sized subset

Models (each a file in a wheel installed with ``pip install --no-deps nudenet rapidocr-onnxruntime basic-pitch
facenet-pytorch magika`` and ``pip install scikit-image``): nudenet's YOLOv8n ``320n.onnx``, rapidocr's PP-OCR
det/cls/rec ONNX files, basic-pitch's ``nmp.onnx`` (and its SavedModel ``nmp/``), facenet-pytorch's MTCNN
P/R/O-nets (state dicts; the modules are rebuilt in benchmarks/trained_tasks.py, given to Navigator as
``benchmarks/trained_tasks.py:pnet`` ...), and magika's ``standard_v3_3/model.onnx``.

For each model, real inputs (skimage's and matplotlib's sample pictures, LFW crops, text rendered with PIL,
synthetic music at 22050 Hz, files of the Python installation) are preprocessed as the library does and split
into CALIBRATION/VERIFICATION batches, written as ``--samples`` npz files for Navigator, and HELD-OUT batches
Navigator never sees. Navigator runs in a subprocess (`navigator convert ... --no-profile`, timed); then every
(format, runner) it converted is loaded through the public API (``navigator.load(ws).runner(key, runner)``)
and run on the held-out batches, and its outputs are decoded into the task's result (detections, text masks,
strings, labels, notes, faces) and compared with the source's on the same inputs (the ONNX file in an
onnxruntime session with default settings, or the PyTorch module in eager fp32). The OpenVINO IR Navigator
wrote is also compiled with OpenVINO's default CPU settings (no INFERENCE_PRECISION_HINT: bf16 on a CPU with
AMX/avx512_bf16), the way a server would load it ("served by default"). Budgets: trained_tasks.BUDGETS.
Each model runs in a child process of its own (``--one NAME``); the results are JSON, the report markdown.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import trained_tasks as T  # noqa: E402  (numpy only at import)

PACKAGES = ["navigator", "nudenet", "rapidocr-onnxruntime", "basic-pitch", "facenet-pytorch", "magika",
            "scikit-image", "matplotlib", "pillow", "numpy", "onnx", "onnxruntime", "openvino", "onnxconverter-common",
            "onnxslim", "torch", "tensorflow-cpu", "tf2onnx", "polygraphy"]
ONNX_TARGETS = ["onnx", "onnx-optimized", "openvino", "onnx-fp16", "onnx-int8"]
TORCH_TARGETS = ["torch", "torchscript", "torch_export", "onnx", "onnx-optimized", "openvino", "onnx-fp16",
                 "onnx-int8"]
SAVEDMODEL_TARGETS = ["savedmodel", "onnx", "onnx-optimized", "openvino", "onnx-fp16", "onnx-int8"]
QUICK = ["magika", "ppocr_rec", "mtcnn_onet"]


# =========================================================================== the corpus
@dataclass
class Model:
    name: str
    task: str                       # key of trained_tasks.BUDGETS
    kind: str                       # onnx | torch | savedmodel
    source: Callable[[], str]       # what `navigator convert` gets
    build: Callable[[bool], tuple]  # quick -> (calibration batches, held-out batches, meta); batch = {input: arr}
    outputs: dict | list            # artifact output name -> canonical name (dict), or canonical names in order
    metrics: Callable               # (ref batches, out batches, meta) -> metrics; batch = {canonical: arr}
    what: str = ""
    reference_model: Callable[[], str] | None = None   # for a SavedModel: the ONNX file held out inputs run on


def _site(pkg: str, *parts: str) -> str:
    return str(T.package_dir(pkg).joinpath(*parts))


def _ocr(name: str) -> str:
    return _site("rapidocr_onnxruntime", "models", name)


# --- builders: (calibration batches, held-out batches, meta)
def build_nudenet(quick):
    items = T.photo_set(quick)
    cal, held = T.split(items, 12 if quick else 40, seed=1)
    x = lambda its: [{"images": b} for b in T.batches([T.nudenet_preprocess(im) for _, im in its], 4)]
    return x(cal), x(held), {"held_names": [n for n, _ in held]}


def build_ppocr_det(quick):
    h, w = (240, 320) if quick else (480, 640)
    cal = [T.text_page(s, h, w) for s in range(4 if quick else 8)]
    held = [T.text_page(s, h, w) for s in range(100, 104 if quick else 114)]
    if not quick:   # two real pages too (skimage's text.png and page.png, brought to the same size)
        for name in ("text.png", "page.png"):
            held.append(T.resize_linear(T.photo("sk", name), h, w).clip(0, 255).astype("uint8"))
    x = lambda ims: [{"x": b} for b in T.batches([T.det_preprocess(im) for im in ims], 2)]
    return x(cal), x(held), {}


# A classifier's lossy formats are judged on >= 300 rows (top-1 >= 99% cannot be shown on fewer: the
# rule of three): the full corpus gives Navigator that many where inputs are cheap (text lines, files);
# the quick subset gives fewer, and Navigator says inconclusive there.
def build_ppocr_cls(quick):
    lines = T.text_lines(48 if quick else 840, seed=7)
    # half of the crops turned upside down (what the classifier is there to catch)
    ims = [im if i % 2 == 0 else im[::-1, ::-1] for i, (_, im) in enumerate(lines)]
    n_cal = 16 if quick else 640
    x = lambda its: [{"x": b} for b in T.batches([T.ocr_line_preprocess(im, 48, 192) for im in its], 8)]
    return x(ims[:n_cal]), x(ims[n_cal:]), {}


def build_ppocr_rec(quick):
    lines = T.text_lines(40 if quick else 248, seed=3)
    n_cal = 8 if quick else 48
    x = lambda its: [{"x": b} for b in T.batches([T.ocr_line_preprocess(im, 48, 320) for _, im in its], 8)]
    return x(lines[:n_cal]), x(lines[n_cal:]), {"charset": T.ctc_charset(Path(_ocr("ch_PP-OCRv4_rec_infer.onnx"))),
                                                "truth": [t for t, _ in lines[n_cal:]]}


def build_magika(quick):
    files = T.magika_files(3 if quick else 20)
    feats = [(p, T.magika_features(p)) for p in files]
    feats = [(p, f) for p, f in feats if f is not None]
    cal, held = T.split(feats, 32 if quick else 640, seed=2)
    bs = 8 if quick else 12
    x = lambda its: [{"bytes": b} for b in T.batches([f for _, f in its], bs)]
    return x(cal), x(held), {"held_files": [str(p) for p, _ in held]}


def build_basic_pitch(quick):
    name = "serving_default_input_2:0"
    cal_w = [w for s in range(4 if quick else 8) for w in T.bp_windows(T.synth_clip(s))]
    held_w = [w for s in range(100, 104 if quick else 120) for w in T.bp_windows(T.synth_clip(s))]
    return ([{name: b} for b in T.batches(cal_w, 4)], [{name: b} for b in T.batches(held_w, 4)], {})


def build_basic_pitch_savedmodel(quick):
    cal, held, meta = build_basic_pitch(quick)
    re = lambda bs: [{"input_2": b["serving_default_input_2:0"]} for b in bs]
    return re(cal), re(held), meta


def build_pnet(quick):
    items = T.photo_set(True) if quick else T.photo_set(False)
    cal, held = T.split(items, 8 if quick else 24, seed=4)
    if quick:
        held = held[:12]
    x = lambda its: [{"x": b} for b in T.batches([T.pnet_input(im) for _, im in its], 4)]
    return x(cal), x(held), {}


def _build_lfw(side):
    def build(quick):
        faces = T.lfw_faces()
        order = T.split(list(range(len(faces))), 40, seed=5)
        cal, held = order
        if quick:
            cal, held = cal[:16], held[:48]
        x = lambda idx: [{"x": b} for b in T.batches([T.face_crop_input(faces[i], side) for i in idx], 8)]
        return x(cal), x(held), {}
    return build


# --- metrics: (ref batches, out batches, meta) -> dict; batches are {canonical name: array}
def m_nudenet(refs, outs, meta):
    dec = lambda bs: [T.yolo_decode(o) for b in bs for o in b["out"]]
    return T.detection_metrics(dec(refs), dec(outs))


def m_det(refs, outs, meta):
    flat = lambda bs: [o[0] for b in bs for o in b["prob"]]
    return T.mask_metrics(flat(refs), flat(outs))


def m_top1(refs, outs, meta, key="probs"):
    import numpy as np

    r = np.concatenate([b[key] for b in refs]).argmax(-1)
    o = np.concatenate([b[key] for b in outs]).argmax(-1)
    return {"top1": float((r == o).mean()), "changed": f"{int((r != o).sum())}/{r.size}"}


def m_rec(refs, outs, meta):
    cs = meta["charset"]
    r = [s for b in refs for s in T.ctc_greedy(b["probs"], cs)]
    o = [s for b in outs for s in T.ctc_greedy(b["probs"], cs)]
    same = sum(a == b for a, b in zip(r, o))
    truth = meta.get("truth")
    read = sum(a.strip() == t for a, t in zip(o, truth)) / len(truth) if truth else None
    return {"string_match": same / len(r), "changed": f"{len(r) - same}/{len(r)}", "reads_truth": read}


def m_notes(refs, outs, meta):
    f = lambda k: T.f1_cells([b[k] for b in refs], [b[k] for b in outs], 0.5)
    n_on = sum(int((b["note"] > 0.5).sum()) for b in refs)
    return {"note_f1": f("note"), "onset_f1": f("onset"), "ref_note_cells": n_on}


def m_face(refs, outs, meta):
    return T.face_metrics(refs, outs)


def _torch_source(fn):
    return lambda: f"{HERE / 'trained_tasks.py'}:{fn}"


MODELS = {m.name: m for m in [
    Model("nudenet", "detection", "onnx", lambda: _site("nudenet", "320n.onnx"), build_nudenet,
          {"output0": "out"}, m_nudenet, "nudenet 320n.onnx (YOLOv8n, 18 classes), 320x320"),
    Model("ppocr_det", "text_mask", "onnx", lambda: _ocr("ch_PP-OCRv4_det_infer.onnx"), build_ppocr_det,
          {"sigmoid_0.tmp_0": "prob"}, m_det, "PP-OCRv4 det (DB text probability map), 736x992"),
    Model("ppocr_cls", "top1", "onnx", lambda: _ocr("ch_ppocr_mobile_v2.0_cls_infer.onnx"), build_ppocr_cls,
          {"save_infer_model/scale_0.tmp_1": "probs"}, m_top1, "PP-OCR mobile v2 direction cls (0/180), 48x192"),
    Model("ppocr_rec", "ctc_text", "onnx", lambda: _ocr("ch_PP-OCRv4_rec_infer.onnx"), build_ppocr_rec,
          {"softmax_11.tmp_0": "probs"}, m_rec, "PP-OCRv4 rec (CTC over 6625 chars), 48x320"),
    Model("magika", "top1", "onnx", lambda: _site("magika", "models", "standard_v3_3", "model.onnx"),
          build_magika, {"target_label": "probs"}, m_top1, "magika standard_v3_3 (214 content types), 2048 bytes"),
    Model("basic_pitch", "notes", "onnx", lambda: _site("basic_pitch", "saved_models", "icassp_2022", "nmp.onnx"),
          build_basic_pitch, {"StatefulPartitionedCall:0": "contour", "StatefulPartitionedCall:1": "note",
                              "StatefulPartitionedCall:2": "onset"}, m_notes,
          "basic-pitch nmp.onnx (audio 43844 samples -> note/onset/contour)"),
    Model("basic_pitch_tf", "notes", "savedmodel", lambda: _site("basic_pitch", "saved_models", "icassp_2022", "nmp"),
          build_basic_pitch_savedmodel, {"Identity": "contour", "Identity_1": "note", "Identity_2": "onset"},
          m_notes, "basic-pitch SavedModel nmp/ (same network, TF source)"),
    Model("mtcnn_pnet", "face", "torch", _torch_source("pnet"), build_pnet, ["box", "face"], m_face,
          "facenet-pytorch MTCNN PNet (state dict, module rebuilt), 144x192 pyramid level"),
    Model("mtcnn_rnet", "face", "torch", _torch_source("rnet"), _build_lfw(24), ["box", "face"], m_face,
          "MTCNN RNet, 24x24 LFW crops"),
    Model("mtcnn_onet", "face", "torch", _torch_source("onet"), _build_lfw(48), ["box", "landmarks", "face"], m_face,
          "MTCNN ONet, 48x48 LFW crops"),
]}


# =========================================================================== child: one model
class SourceRef:
    """The source's own outputs on held-out batches (the truth a format is judged against)."""

    def __init__(self, model: Model):
        self.model = model
        if model.kind == "torch":
            import torch

            torch.set_num_threads(os.cpu_count() or 1)
            self.module = getattr(T, model.source().rsplit(":", 1)[1])()
        elif model.kind == "onnx":
            import onnxruntime as ort

            self.sess = ort.InferenceSession(model.source(), providers=["CPUExecutionProvider"])
            self.names = [o.name for o in self.sess.get_outputs()]
        else:   # SavedModel: run with TensorFlow when it loads it, else no reference
            import tensorflow as tf

            self.fn = tf.saved_model.load(model.source()).signatures["serving_default"]

    def __call__(self, batch: dict) -> dict:
        if self.model.kind == "torch":
            import torch

            with torch.no_grad():
                outs = self.module(*[torch.from_numpy(v) for v in batch.values()])
            return {n: o.numpy() for n, o in zip(self.model.outputs, outs)}
        if self.model.kind == "onnx":
            outs = self.sess.run(None, batch)
            return {self.model.outputs[n]: o for n, o in zip(self.names, outs)}
        import tensorflow as tf

        outs = self.fn(**{k: tf.constant(v) for k, v in batch.items()})
        return {self.model.outputs[k]: v.numpy() for k, v in outs.items()}


def canon(model: Model, out: dict, sig_outputs: list[str]) -> dict:
    """A runner's {output name: array} under the model's canonical names."""
    if isinstance(model.outputs, list):
        return {model.outputs[i]: out[n] for i, n in enumerate(sig_outputs)}
    res = {}
    for i, n in enumerate(sig_outputs):
        base = n.split(":")[0] if n not in model.outputs and n.split(":")[0] in model.outputs else n
        res[model.outputs.get(base, model.outputs.get(n, n))] = out[n]
    return res


def evaluate(model: Model, refs: list[dict], outs: list[dict], meta: dict) -> dict:
    import numpy as np

    m = model.metrics(refs, outs, meta)
    m["cosine_min"] = min(T.cosine(np.concatenate([r[k].ravel() for r in refs]),
                                   np.concatenate([o[k].ravel() for o in outs])) for k in refs[0])
    m["max_abs"] = max(float(np.max(np.abs(r[k].astype(np.float64) - o[k]))) for r, o in zip(refs, outs) for k in r)
    m["within"] = T.within_budget(model.task, m)
    return m


def run_navigator(model: Model, workdir: Path, samples: Path, n_batches: int, timeout: float) -> dict:
    targets = {"onnx": ONNX_TARGETS, "torch": TORCH_TARGETS, "savedmodel": SAVEDMODEL_TARGETS}[model.kind]
    cmd = [sys.executable, "-m", "navigator", "convert", model.source(), "--workdir", str(workdir),
           "--model-name", model.name, "--samples", str(samples), "--sample-count", str(n_batches),
           "--targets", ",".join(targets), "--no-profile"]
    ws = workdir / f"{model.name}.nav.workspace"
    if ws.exists():
        shutil.rmtree(ws)           # a fresh run: its wall time is the whole conversion and verification
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    try:
        # cwd: not the repository (python -m puts the cwd first on sys.path: that would import the checkout's
        # navigator even where PYTHONPATH names another install, while the workers (python -P) would not)
        p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    wall = time.perf_counter() - t0
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    (workdir / f"{model.name}.convert.log").write_text(f"$ {' '.join(cmd)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    return {"cmd": " ".join(cmd), "rc": rc, "wall_s": round(wall, 1), "load_at_start": round(load0, 2),
            "stderr_last": lines[-1] if lines else "", "stdout_tail": stdout.strip().splitlines()[-12:],
            "workspace": str(ws)}


def run_one(name: str, workdir: Path, quick: bool, timeout: float) -> dict:
    import numpy as np

    model = MODELS[name]
    rec: dict = {"model": name, "task": model.task, "what": model.what, "kind": model.kind, "rows": []}
    t0 = time.perf_counter()
    cal, held, meta = model.build(quick)
    sdir = workdir / "samples" / name
    if sdir.exists():
        shutil.rmtree(sdir)
    sdir.mkdir(parents=True)
    for i, b in enumerate(cal):
        np.savez(sdir / f"{i:03d}.npz", **b)
    rec["inputs"] = {"calibration_batches": len(cal), "calibration_items": sum(len(next(iter(b.values()))) for b in cal),
                     "heldout_batches": len(held), "heldout_items": sum(len(next(iter(b.values()))) for b in held),
                     "shapes": {k: list(v.shape) for k, v in cal[0].items()}, "build_s": round(time.perf_counter() - t0, 1)}
    rec["navigator"] = run_navigator(model, workdir, sdir, len(cal), timeout)

    # the truth: the source's outputs on the held-out batches
    try:
        ref_src = SourceRef(model)
        refs = [ref_src(b) for b in held]
        del ref_src
    except Exception as e:   # noqa: BLE001  (a SavedModel TensorFlow cannot load)
        rec["reference_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        refs = None

    status_path = Path(rec["navigator"]["workspace"]) / "status.yaml"
    if not status_path.exists():
        rec["error"] = "no status.yaml"
        return rec
    import yaml

    st = yaml.safe_load(status_path.read_text())
    sig_out = [o["name"] for o in st["signature"]["outputs"]]
    rec["signature_outputs"] = sig_out
    import navigator

    try:
        res = navigator.load(rec["navigator"]["workspace"])
    except Exception as e:   # noqa: BLE001  (the verdicts are still read from status.yaml below)
        rec["error"] = f"navigator.load: {type(e).__name__}: {e}"[:600]
        res = None
    for key, fs in (st.get("formats") or {}).items():
        conv = fs.get("convert") or {}
        if conv.get("status") != "ok":
            rec["rows"].append({"format": key, "runner": "-", "verify": f"convert {conv.get('status')}",
                                                "reason": (conv.get("reason") or "")[:600]})
            continue
        for rkey, rs in (fs.get("runners") or {}).items():
            v = rs.get("verify") or {}
            checks = v.get("outputs") or {}
            row = {"format": key, "runner": rkey, "verify": v.get("status"),
                   "conclusive": all(c.get("conclusive") is True for c in checks.values()) if checks else None,
                   "reason": (v.get("reason") or "")[:300],
                   "checks": {o: {k: c.get(k) for k in ("mode", "passed", "max_abs", "atol", "scale", "measured",
                                                          "threshold", "conclusive")} for o, c in checks.items()}}
            if res is None:
                row["task_error"] = "navigator.load failed (see the notes)"
            elif refs is not None:
                try:
                    runner = res.runner(key, rkey)
                    try:
                        t1 = time.perf_counter()
                        outs = [canon(model, runner(b), sig_out) for b in held]
                        row["heldout_s"] = round(time.perf_counter() - t1, 2)
                    finally:
                        runner.deactivate()
                    row["task"] = evaluate(model, refs, outs, meta)
                except Exception as e:   # noqa: BLE001
                    row["task_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            rec["rows"].append(row)

    # served by default: the OpenVINO IR compiled with OpenVINO's defaults
    xml = Path(rec["navigator"]["workspace"]) / "formats" / "openvino" / "model.xml"
    if xml.exists() and refs is not None:
        try:
            import openvino as ov

            core = ov.Core()
            compiled = core.compile_model(str(xml), "CPU")
            hint = compiled.get_property("INFERENCE_PRECISION_HINT")
            prec = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
            ov_names = [o.get_any_name() for o in compiled.outputs]
            outs = []
            for b in held:
                r = compiled(b)
                raw = {n: r[compiled.outputs[i]] for i, n in enumerate(ov_names)}
                mapped = {sig_out[i]: raw[n] if n in sig_out else raw[ov_names[i]] for i, n in enumerate(ov_names)}
                outs.append(canon(model, mapped, sig_out))
            rec["rows"].append({"format": "openvino", "runner": f"openvino default ({prec})",
                                "served_default": True, "task": evaluate(model, refs, outs, meta)})
        except Exception as e:   # noqa: BLE001
            rec["rows"].append({"format": "openvino", "runner": "openvino default", "verify": None,
                                "served_default": True, "task_error": f"{type(e).__name__}: {e}"[:300]})
    rec["total_s"] = round(time.perf_counter() - t0, 1)
    return rec


# =========================================================================== parent: table and report
def versions() -> dict:
    from importlib import metadata

    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def navigator_code() -> str:
    """Which navigator the runs import (PYTHONPATH may point at an install of another commit) and, when it is
    this checkout, the checkout's commit and whether its work tree had uncommitted changes."""
    p = subprocess.run([sys.executable, "-c", "import navigator; print(navigator.__file__)"], capture_output=True,
                       text=True, cwd="/")
    where = p.stdout.strip() or p.stderr.strip()[-200:]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    checkout = (f"checkout {REPO} at {head.stdout.strip()}"
                f"{' with uncommitted changes' if dirty.stdout.strip() else ' (clean)'}")
    if not where.startswith(str(REPO)):
        return f"navigator imported from {where}, NOT this checkout ({checkout} at the start)"
    return f"navigator imported from this {checkout} at the start"


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.4f}" if 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"
    return str(v)


def task_cell(task: str, m: dict) -> str:
    keys = [k for k, _, _ in T.BUDGETS[task]]
    extra = {"detection": ["det_found", "det_extra", "max_score_change"], "top1": ["changed"],
             "ctc_text": ["changed"], "text_mask": ["min_image_iou"], "notes": [], "face": []}[task]
    return ", ".join(f"{k} {_fmt(m.get(k))}" for k in keys + extra) + f", cos {_fmt(m.get('cosine_min'))}"


def verdict_cell(row: dict) -> str:
    """Navigator's verify status and how many of its output checks were conclusive (able to fail)."""
    v = row.get("verify")
    if v is None:
        return "-"
    if str(v).startswith("convert"):
        return v
    checks = row.get("checks") or {}
    n = len(checks)
    k = sum(1 for c in checks.values() if c.get("conclusive") is True)
    cell = f"{v}; conclusive {'all' if n and k == n else f'{k}/{n}'}" if n else f"{v}"
    if row.get("served_default"):
        cell = f"(Navigator's {row.get('verdict_from')}: {cell})"
    return cell


def short_reason(text: str, n: int = 220) -> str:
    """A reason for a table cell: long quoted node names cut, pipes escaped."""
    import re

    text = re.sub(r"'([^']{40})[^']{20,}'", lambda m: f"'{m.group(1)}…'", text or "")
    text = re.sub(r"node name: [^)]{40,}\)", "node name: …)", text)
    return text[:n].replace("|", "\\|").replace("\n", " ")


def _attribute_served(rows: list[dict]) -> None:
    """The verdict a served-by-default row answers to: Navigator's own `openvino-default` runner where the run
    had one (the row is then our cross-check of it and is not counted), else the `openvino-cpu` verdict (the
    format Navigator verified, then served with OpenVINO's defaults)."""
    by = {(r["format"], r["runner"]): r for r in rows}
    for row in rows:
        if not row.get("served_default"):
            continue
        src = by.get(("openvino", "openvino-default"))
        row["cross_check"] = src is not None
        src = src or by.get(("openvino", "openvino-cpu")) or {}
        row["verdict_from"] = src.get("runner", "openvino-cpu")
        row["verify"], row["conclusive"], row["checks"] = src.get("verify"), src.get("conclusive"), src.get("checks")


def classify(row: dict) -> str:
    """Navigator's verdict beside the task on held-out inputs: agrees, verified-but-wrong,
    correct-but-failed, inconclusive (no claim), unjudged (too few held-out rows to show the budget),
    cross-check (a duplicate row), or none (no verdict or no measurement)."""
    m = row.get("task")
    within = m.get("within") if m else None
    if row.get("cross_check"):
        return "cross-check"
    if m is None or row.get("verify") in (None, "skipped") or str(row.get("verify")).startswith("convert"):
        return "none"
    if row.get("verify") == "inconclusive":
        return "inconclusive"
    if within is None:   # the held-out rows are too few to show the budget either way
        return "unjudged"
    ok = row.get("verify") == "ok"
    if ok == within:
        return "agrees"
    return "verified-but-wrong" if ok else "correct-but-failed"


def render(results: list[dict], meta: dict) -> str:
    lines = ["# Trained models from pip wheels: Navigator's verdict vs the task on held-out inputs", "",
             f"Generated by `{meta['command']}` on {meta['date']}.", "",
             f"Machine: {meta['machine']}. Load average (1/5/15 min) at start {meta['load_start']}, at end "
             f"{meta['load_end']}.", "", f"Navigator code: {meta.get('navigator_code')}.", ""]
    lines += ["## Budgets (benchmarks/trained_tasks.py `BUDGETS`)", "", "| task | budget on held-out inputs | metric |",
              "|---|---|---|"]
    for task, rules in T.BUDGETS.items():
        lines.append(f"| {task} | {', '.join(f'{k} {op} {b}' for k, op, b in rules)} | {T.BUDGET_NOTES[task]} |")
    lines += ["", "The truth on held-out inputs: the source run by its own runtime with default settings "
              "(onnxruntime's default session for an ONNX file, the module in eager fp32 for PyTorch). "
              "`agrees?`: Navigator's verdict ok ⇔ within budget; an inconclusive verdict claims neither. `openvino default (…)`: Navigator's OpenVINO IR "
              "compiled here with OpenVINO's default CPU settings (no precision hint), judged against the verdict of "
              "Navigator's own `openvino-default` runner where the run has one (then only a cross-check, not "
              "counted), else against `openvino-cpu`'s (verified at f32, served at the default).", ""]
    lines += ["## Results", "", "| model | format | runner | Navigator verdict | task metric on held-out | within budget? | "
              "agrees? |", "|---|---|---|---|---|---|---|"]
    vbw = cbf = agree = n = unsure = 0
    vbw_rows, cbf_rows, unsure_rows = [], [], []
    for r in results:
        _attribute_served(r.get("rows", []))
        for row in r.get("rows", []):
            m = row.get("task")
            within = m.get("within") if m else None
            what = classify(row)
            name = f"{r['model']} {row['format']} {row['runner']}"
            ag = {"cross-check": "(cross-check of the openvino-default row)", "none": "-",
                  "inconclusive": "no claim (inconclusive)", "agrees": "yes",
                  "unjudged": "- (too few held-out rows to show the budget)",
                  "verified-but-wrong": "**no: verified but wrong**",
                  "correct-but-failed": "**no: correct but failed**"}[what]
            if what == "inconclusive":   # no claim either way: not verified, not failed
                unsure += 1
                unsure_rows.append(name)
            elif what in ("agrees", "verified-but-wrong", "correct-but-failed"):
                n += 1
                agree += what == "agrees"
                if what == "verified-but-wrong":
                    vbw += 1
                    vbw_rows.append(name)
                elif what == "correct-but-failed":
                    cbf += 1
                    cbf_rows.append(name)
            metric = task_cell(r["task"], m) if m else short_reason(row.get("task_error") or row.get("reason") or "-")
            lines.append(f"| {r['model']} | {row['format']} | {row['runner']} | {verdict_cell(row)} | {metric} | "
                         f"{'-' if within is None else ('yes' if within else 'NO')} | {ag} |")
    lines += ["", f"**Summary**: {n} (format, runner) rows with both a verdict and a task measurement; {agree} agree; "
              f"**verified-but-wrong: {vbw}**" + (f" ({'; '.join(vbw_rows)})" if vbw_rows else "") +
              f"; **correct-but-failed: {cbf}**" + (f" ({'; '.join(cbf_rows)})" if cbf_rows else "") +
              f". Inconclusive (neither verified nor failed; the record says why and the cure): {unsure}" +
              (f" ({'; '.join(unsure_rows)})" if unsure_rows else "") + ".", ""]
    lines += ["## Per model: inputs, `navigator convert` wall time and exit", "",
              "| model | what | calibration (batches/items) | held-out (batches/items) | convert wall s | exit | "
              "stderr's last line |", "|---|---|---|---|---|---|---|"]
    for r in results:
        i, nv = r.get("inputs", {}), r.get("navigator", {})
        last = (nv.get("stderr_last") or "").replace("|", "\\|")[:160]
        lines.append(f"| {r['model']} | {r.get('what', '')} | {i.get('calibration_batches')}/{i.get('calibration_items')}"
                     f" | {i.get('heldout_batches')}/{i.get('heldout_items')} | {nv.get('wall_s')} | {nv.get('rc')} | "
                     f"{last} |")
    notes = [f"* {r['model']}: reference could not run: {r['reference_error']}" for r in results
             if r.get("reference_error")]
    notes += [f"* {r['model']}: {r['error']}" for r in results if r.get("error")]
    if notes:
        lines += ["", *notes]
    if meta.get("notes"):
        lines += ["", meta["notes"].rstrip()]
    lines += ["", "## Versions", "", "| package | version |", "|---|---|"]
    lines += [f"| {k} | {v or 'not installed'} |" for k, v in meta["versions"].items()]
    lines += ["", "## Commands", "", "```", meta["command"]]
    lines += [r["navigator"]["cmd"] for r in results if r.get("navigator")]
    lines += ["```", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help=f"comma-separated, of: {', '.join(MODELS)} (default all; --quick: {','.join(QUICK)})")
    ap.add_argument("--workdir", default="/tmp/trained")
    ap.add_argument("--out", help="markdown report (default WORKDIR/trained.md)")
    ap.add_argument("--json", help="raw results (default WORKDIR/trained.json)")
    ap.add_argument("--quick", action="store_true", help="small inputs; default models " + ",".join(QUICK))
    ap.add_argument("--timeout", type=float, default=1800.0, help="per navigator convert, seconds")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--from-json", help="render the report from an earlier --json")
    ap.add_argument("--notes", help="a markdown file (hand-written analysis) embedded after the tables")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    if args.one:
        try:
            rec = run_one(args.one, workdir, args.quick, args.timeout)
        except Exception:   # noqa: BLE001
            rec = {"model": args.one, "task": MODELS[args.one].task, "rows": [], "error": traceback.format_exc()[-2000:]}
        (workdir / f"{args.one}.trained.json").write_text(json.dumps(rec, indent=1, default=str))
        return 0

    command = "python benchmarks/trained.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        results, meta = data["results"], data["meta"]
    else:
        names = args.models.split(",") if args.models else (QUICK if args.quick else list(MODELS))
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            ap.error(f"unknown model(s) {unknown}; have {', '.join(MODELS)}")
        import machine_info

        meta = {"command": command, "date": _dt.datetime.now().isoformat(timespec="seconds"),
                "machine": machine_info.one_line(), "load_start": [round(x, 2) for x in os.getloadavg()],
                "versions": versions(), "quick": args.quick, "navigator_code": navigator_code()}
        results = []
        for n in names:
            t0 = time.perf_counter()
            out = workdir / f"{n}.trained.json"
            out.unlink(missing_ok=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--one", n, "--workdir", str(workdir),
                   "--timeout", str(args.timeout)] + (["--quick"] if args.quick else [])
            p = subprocess.run(cmd, cwd=REPO)
            rec = json.loads(out.read_text()) if out.exists() else {
                "model": n, "task": MODELS[n].task, "rows": [], "error": f"child exited {p.returncode}"}
            rec["child_s"] = round(time.perf_counter() - t0, 1)
            results.append(rec)
            nv = rec.get("navigator", {})
            print(f"{n}: navigator rc={nv.get('rc')} wall={nv.get('wall_s')}s, {len(rec['rows'])} rows, "
                  f"total {rec['child_s']}s" + (f"; ERROR {rec['error'][-300:]}" if rec.get("error") else ""), flush=True)
        meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
        jpath = Path(args.json) if args.json else workdir / "trained.json"
        jpath.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    if args.notes:
        meta["notes"] = Path(args.notes).read_text()
    text = render(results, meta)
    out = Path(args.out) if args.out else workdir / "trained.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
