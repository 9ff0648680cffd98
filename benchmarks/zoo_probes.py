"""Probes behind the zoo's diagnoses: re-run one conversion edge by hand, with the upstream tool
and other settings, on a workspace's own fp32 ONNX graph, samples and reference outputs.

    python benchmarks/zoo_probes.py fp16 WS [--block-nodes N1,N2] [--fix-casts] [--key onnx]
    python benchmarks/zoo_probes.py int8 WS [--key onnx]          # quantizer settings side by side
    python benchmarks/zoo_probes.py qpath WS NODE                  # Q/DQ nodes upstream of NODE in onnx-int8

Only onnx, onnxruntime and onnxconverter-common are used (not Navigator's converters), so a
probe shows what the upstream tool does with other settings. Errors are max |out - ref| over
the stored batches; ``fail@1e-2`` is the fraction of elements failing Polygraphy's rule at
atol = rtol = 1e-2.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np


def _load(ws: Path, key: str):
    src = ws / "formats" / key / "model.onnx"
    samples = [dict(np.load(f)) for f in sorted((ws / "samples" / "inputs").glob("[0-9][0-9][0-9].npz"))]
    refs = [dict(np.load(f)) for f in sorted((ws / "samples" / "reference").glob("[0-9][0-9][0-9].npz"))]
    return src, samples, refs


def _errors(path: str, samples, refs, atol=None):
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    onames = [o.name for o in s.get_outputs()]
    out = {}
    for b, r in zip(samples, refs):
        got = s.run(None, {n: b[n] for n in names})
        for i, (k, v) in enumerate(zip(onames, got)):
            ref = r[k] if k in r else list(r.values())[i]
            d = np.abs(v.astype(np.float64) - ref)
            e = out.setdefault(k, {"max_abs": 0.0, "scale": 0.0, "fail@1e-2": 0.0})
            e["max_abs"] = max(e["max_abs"], float(d.max()))
            e["scale"] = max(e["scale"], float(np.abs(ref).max()))
            rel = d / np.maximum(np.abs(ref), 1e-30)
            e["fail@1e-2"] = max(e["fail@1e-2"], float(((d > 1e-2) & (rel > 1e-2)).mean()))
    return out


def _fmt(errs: dict) -> str:
    return "; ".join(f"{k}: max_abs {v['max_abs']:.3g} (scale {v['scale']:.3g}, fail@1e-2 {v['fail@1e-2']:.2g})"
                     for k, v in errs.items())


def probe_fp16(ws: Path, key: str, block_nodes: list[str], fix_casts: bool = False):
    import onnx
    from onnxconverter_common import float16

    src, samples, refs = _load(ws, key)
    m = onnx.load(str(src))
    conv = float16.convert_float_to_float16(m, keep_io_types=True, op_block_list=float16.DEFAULT_OP_BLOCK_LIST,
                                            node_block_list=block_nodes or None)
    try:
        onnx.shape_inference.infer_shapes(conv, check_type=True, strict_mode=True)
        print("strict shape inference: ok")
    except Exception as e:  # noqa: BLE001
        print(f"strict shape inference: {str(e)[:400]}")
    bad_casts = []
    vi = {v.name: v.type.tensor_type.elem_type for v in list(conv.graph.value_info) + list(conv.graph.output)}
    for n in conv.graph.node:
        if n.op_type == "Cast":
            to = next(a.i for a in n.attribute if a.name == "to")
            if n.output[0] in vi and vi[n.output[0]] != to:
                bad_casts.append(f"{n.name} (to={to}, value_info={vi[n.output[0]]}, input {n.input[0]})")
    if bad_casts:
        print("Cast nodes whose 'to' disagrees with their output's value_info (onnxconverter-common #320):",
              ", ".join(bad_casts))
    if fix_casts:   # the candidate fix: make each such Cast produce what its value_info says
        for n in conv.graph.node:
            if n.op_type == "Cast" and n.output[0] in vi:
                for a in n.attribute:
                    if a.name == "to" and a.i != vi[n.output[0]]:
                        a.i = vi[n.output[0]]
        onnx.shape_inference.infer_shapes(conv, check_type=True, strict_mode=True)
        print("after --fix-casts: strict shape inference ok")
    out = Path(tempfile.mkdtemp()) / "fp16.onnx"
    onnx.save(conv, str(out))
    try:
        print("onnxruntime:", _fmt(_errors(str(out), samples, refs)))
    except Exception as e:  # noqa: BLE001
        print(f"onnxruntime: {type(e).__name__}: {str(e)[:400]}")


def probe_int8(ws: Path, key: str):
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    src, samples, refs = _load(ws, key)
    import onnxruntime as ort

    names = [i.name for i in ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_inputs()]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{n: b[n] for n in names} for b in samples])

        def get_next(self):
            return next(self.it, None)

    sym = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
    variants = [
        ("navigator's settings: QDQ s8s8 symmetric, per-channel, every op type", {}, sym),
        ("  + reduce_range", {"reduce_range": True}, sym),
        ("  u8 activations (asymmetric)", {"activation_type": QuantType.QUInt8}, {"WeightSymmetric": True}),
        ("  only MatMul/Gemm/Conv quantized", {"op_types_to_quantize": ["MatMul", "Gemm", "Conv"]}, sym),
        ("  only MatMul/Gemm/Conv + reduce_range", {"op_types_to_quantize": ["MatMul", "Gemm", "Conv"],
                                                    "reduce_range": True}, sym),
    ]
    tmp = Path(tempfile.mkdtemp())
    for i, (label, kw, extra) in enumerate(variants):
        out = tmp / f"q{i}.onnx"
        args = dict(quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax, extra_options=extra)
        args.update(kw)
        try:
            quantize_static(str(src), str(out), Reader(), **args)
            print(f"{label:55} {_fmt(_errors(str(out), samples, refs))}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{label:55} {type(e).__name__}: {str(e)[:300]}", flush=True)


def probe_qpath(ws: Path, node: str, key: str = "onnx-int8"):
    import onnx

    m = onnx.load(str(ws / "formats" / key / "model.onnx"))
    prod = {o: n for n in m.graph.node for o in n.output}
    target = next(n for n in m.graph.node if n.name == node)
    seen, todo, found = set(), list(target.input), []
    while todo:
        t = todo.pop()
        if t in seen or t not in prod:
            continue
        seen.add(t)
        n = prod[t]
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            found.append(f"{n.op_type} {n.name} (of {n.input[0]})")
        todo.extend(n.input)
    print(f"Q/DQ nodes upstream of {node}:", *found, sep="\n  ")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fp16")
    f.add_argument("ws", type=Path)
    f.add_argument("--key", default="onnx")
    f.add_argument("--block-nodes", default="")
    f.add_argument("--fix-casts", action="store_true",
                   help="set each Cast's 'to' to its output's value_info type (a candidate fix for #320)")
    q = sub.add_parser("int8")
    q.add_argument("ws", type=Path)
    q.add_argument("--key", default="onnx")
    p = sub.add_parser("qpath")
    p.add_argument("ws", type=Path)
    p.add_argument("node")
    a = ap.parse_args(argv)
    if a.cmd == "fp16":
        probe_fp16(a.ws, a.key, [n for n in a.block_nodes.split(",") if n], a.fix_casts)
    elif a.cmd == "int8":
        probe_int8(a.ws, a.key)
    else:
        probe_qpath(a.ws, a.node)


if __name__ == "__main__":
    sys.exit(main())
