"""First-bad-layer diagnostics: ``navigator debug WS KEY``.

When a format fails verification, every intermediate tensor of its graph is
marked as an output, on both sides:

* the **reference side** is the workspace's ONNX source (``formats/<root>/
  model.onnx``; for a non-ONNX source, the topmost ONNX format made from it),
  run by onnxruntime with graph optimisations *disabled* so no intermediate
  is fused away;
* the **compared side** is KEY: an ONNX format (onnx-optimized, -fp16, ...)
  runs the same way on the device of its runner; an ``openvino`` format runs
  its IR with every named op output added (``ov.Model.add_outputs``; the
  ONNX frontend keeps the ONNX tensor names on the ports). Other formats
  (TensorRT, ...) do not expose their internals: their nearest ONNX parent
  is compared instead and the report says so.

Both run on the stored samples; tensors are matched by name, the compared
side's nodes are walked in topological order and the first node with an
output outside tolerance is named with its op type, its inputs (with their
own agreement, and for constants whether they differ from the reference's)
and the error. Tolerances are the workspace's table for KEY's precision
(``validators/tolerances.rule_for``: ``tolerance`` for floats, ``exact`` for
integers at fp32) unless ``atol``/``rtol`` are given; the elementwise rule is
Polygraphy's (``absdiff <= atol OR reldiff <= rtol``). Only the top-level
graph is marked: tensors inside If/Loop bodies are not compared.

The report goes to ``<ws>/report/debug-<KEY>.json``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from navigator.errors import UserInputError
from navigator.tools.debug_sides import OnnxSide, TensorCheck, compare_into, tensor_rule

log = logging.getLogger(__name__)

MAX_LATER = 10          # later divergent nodes listed in the report


def _chain(st, key: str) -> list[str]:
    chain, seen = [key], {key}
    parent = st.formats[key].parent
    while parent and parent in st.formats and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = st.formats[parent].parent
    return chain


def _pick_runner(fs, key: str, runner: str | None) -> str | None:
    if runner is not None:
        if runner not in fs.runners:
            raise UserInputError(f"{key} has no runner {runner!r}; have: {', '.join(fs.runners) or 'none'}")
        return runner
    failed = [rk for rk, rs in fs.runners.items() if rs.verify.status == "failed"]
    return (failed or list(fs.runners) or [None])[0]


@dataclass
class Plan:
    reference: Any = None
    compared: Any = None
    notes: list[str] = field(default_factory=list)
    reason: str | None = None     # why nothing can be compared


def _side(fmt: str):
    """The debug side class of format ``fmt`` (its descriptor's ``debug_side``), or None."""
    from navigator import formats as formats_mod

    spec = getattr(formats_mod.find(fmt), "debug_side", None)   # None too for a plugin's format not installed
    if spec is None:
        return None
    from navigator.dotted import resolve

    try:
        return resolve(spec)
    except (ImportError, AttributeError, ValueError) as e:
        raise UserInputError(f"format {fmt}: its debug_side {spec!r} cannot be loaded: {e}") from None


def _plan(ws, st, key: str, runner_key: str | None) -> Plan:
    fs = st.formats[key]
    chain = _chain(st, key)
    onnx_keys = [k for k in chain if getattr(_side(st.formats[k].format), "graph", False)
                 and st.formats[k].convert.status == "ok" and st.formats[k].path]
    root = chain[-1]
    ref_key = root if root in onnx_keys else (onnx_keys[-1] if onnx_keys else None)
    plan = Plan()
    if ref_key is None:
        plan.reason = (f"no ONNX model in {key}'s lineage ({' <- '.join(chain)}): there is no graph to mark; "
                       f"compare the final outputs with `navigator status`")
        return plan
    if ref_key != root:
        plan.notes.append(f"the source ({root}, {st.formats[root].format}) is not ONNX: the reference side is "
                          f"{ref_key}, the first ONNX made from it")
    ref_fs = st.formats[ref_key]
    plan.reference = OnnxSide(ws.abs(ref_fs.path), io_names=ref_fs.io_names, level="disabled",
                              label=f"{ref_key} (reference)")
    parent = next((k for k in chain[1:] if k in onnx_keys), None)
    side = _side(fs.format)
    if side is not None:
        parent_side = None
        if parent is not None and not getattr(side, "graph", False):
            parent_side = OnnxSide(ws.abs(st.formats[parent].path), io_names=st.formats[parent].io_names,
                                   label=parent)
        rs = fs.runners.get(runner_key) if runner_key else None
        plan.compared, notes, plan.reason = side.compared(ws, key, fs, rs, reference_key=ref_key,
                                                          onnx_parent=parent_side)
        plan.notes.extend(notes)
        return plan
    if parent is None or parent == ref_key:
        plan.reason = (f"{fs.format} does not expose its internal tensors here, and its ONNX parent "
                       f"{parent or '(none)'} is the reference itself: nothing to compare node by node")
        return plan
    plan.notes.append(f"{fs.format} does not expose its internal tensors: compared its ONNX parent {parent} instead")
    pfs = st.formats[parent]
    plan.compared = OnnxSide(ws.abs(pfs.path), io_names=pfs.io_names, level="disabled", label=parent)
    return plan


# --------------------------------------------------------------------------- the walk
def _input_info(name: str, compared, reference, checks: dict[str, TensorCheck], alias: str | None = None) -> dict:
    """What one input of the divergent node was; ``alias``: its name in the ONNX graph (OpenVINO
    constants the frontend made lose their ONNX name)."""
    import numpy as np

    if name in checks:
        c = checks[name]
        return {"name": name, "kind": "tensor", "within_tolerance": c.passed, "max_abs": c.max_abs,
                "max_rel": c.max_rel}
    const = compared.constant(name)
    if const is not None:
        info: dict = {"name": name, "kind": "constant", "shape": list(const.shape), "dtype": str(const.dtype)}
        ref = reference.constant(name)
        if ref is None and alias and alias != name:
            info["onnx_name"] = alias
            ref = reference.constant(alias)
        if ref is None:
            info["reference"] = "not in the reference model"
        elif ref.size != const.size:
            info["reference"] = f"differs: shape {list(ref.shape)} in the reference"
            info["differs_from_reference"] = True
        else:
            const = const.reshape(ref.shape)     # OpenVINO keeps constants broadcast-ready ([16] -> [1, 16])
            same = bool(np.array_equal(const, ref, equal_nan=const.dtype.kind in "fc"))
            info["differs_from_reference"] = not same
            if not same:
                diff = np.abs(const.astype(np.float64) - ref.astype(np.float64))
                info["max_abs_vs_reference"] = float(np.nanmax(diff)) if diff.size else 0.0
        return info
    if name in getattr(compared, "graph_inputs", ()) or name in (reference.graph_inputs or ()):
        return {"name": name, "kind": "graph input"}
    return {"name": name, "kind": "not compared", "reason": "no tensor of this name on the reference side"}


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def locate(reference, compared, samples: list[dict], rule_of) -> dict:
    """Run both sides on ``samples`` and walk ``compared``'s nodes; returns the report's core."""
    from navigator.validators.tolerances import robust_magnitude

    checks: dict[str, TensorCheck] = {}
    only_here: set[str] = set()
    wanted = [t for n in compared.nodes for t in n.outputs]
    for sample in samples:
        ref = reference.run(sample)
        out = compared.run(sample)
        for t in wanted:
            if t not in out:
                continue
            if t not in ref:
                only_here.add(t)
                continue
            if t not in checks:   # a default atol is scaled to the tensor as the first sample shows it
                scale = robust_magnitude([ref[t]])
                rule = rule_of(t, str(ref[t].dtype)).resolve(scale)
                checks[t] = TensorCheck(t, rule.mode, rule.atol, rule.rtol, rule.threshold, scale=scale)
            compare_into(checks[t], out[t], ref[t])
    divergent = [n for n in compared.nodes if any(t in checks and not checks[t].passed for t in n.outputs)]
    compared_nodes = [n for n in compared.nodes if any(t in checks for t in n.outputs)]
    core: dict = {"nodes": len(compared.nodes), "nodes_compared": len(compared_nodes),
                  "tensors_compared": len(checks), "tensors_not_in_reference": len(only_here),
                  "tensors_failing": sum(not c.passed for c in checks.values()), "first_divergent": None,
                  "later_divergent": [n.name for n in divergent[1:1 + MAX_LATER]],
                  "later_divergent_count": max(0, len(divergent) - 1)}
    if divergent:
        n = divergent[0]
        core["first_divergent"] = {
            "node": n.name, "index": n.index, "op_type": n.op_type,
            "inputs": [_input_info(i, compared, reference, checks,
                                   n.onnx_inputs[j] if n.onnx_inputs and len(n.onnx_inputs) == len(n.inputs)
                                   else None) for j, i in enumerate(n.inputs)],
            "outputs": [checks[t].to_dict() if t in checks else {"name": t, "compared": False} for t in n.outputs]}
        if n.onnx_node:
            core["first_divergent"]["onnx_node"] = n.onnx_node
    core["tensors"] = {t: c.to_dict() for t, c in checks.items()}
    return core


def debug_workspace(workspace: str | os.PathLike, key: str, *, runner: str | None = None,
                    atol: float | None = None, rtol: float | None = None) -> dict:
    """Locate the first divergent node of ``key``; writes ``report/debug-<key>.json`` and returns the report."""
    import json

    from navigator import formats
    from navigator.workspace import npz
    from navigator.workspace import status as status_mod
    from navigator.workspace.atomic import write_text
    from navigator.workspace.layout import Workspace

    for option, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None and not value >= 0:
            raise UserInputError(f"{option}: must be >= 0, got {value}")
    ws = Workspace.find(workspace)
    st = status_mod.load(ws.status_path)
    fs = st.formats.get(key)
    if fs is None:
        raise UserInputError(f"no format {key!r} in {ws.root.name}; have: {', '.join(st.formats) or 'none'}")
    ws.check_no_links(below=ws.samples_dir)      # what it reads: never a FIFO that blocks the read
    if fs.path:
        ws.check_no_links(below=ws.abs(fs.path) if ws.abs(fs.path).is_dir() else ws.abs(fs.path).parent)
    if fs.convert.status != "ok" or not fs.path:
        raise UserInputError(f"{key} was not converted ({fs.convert.status}: {fs.convert.reason}): there is no "
                             "artifact to debug")
    runner_key = _pick_runner(fs, key, runner)
    samples = npz.load_folder(ws.inputs_dir)
    if not samples:
        raise UserInputError(f"{ws.rel(ws.inputs_dir)} holds no samples")
    k = formats.parse_key(key)
    cfg = st.config or {}
    outputs = set(st.signature.output_names)
    rs = fs.runners.get(runner_key) if runner_key else None
    report: dict = {"key": key, "runner": runner_key, "created": status_mod.now(),
                    "verify": {"status": rs.verify.status, "reason": rs.verify.reason} if rs else None,
                    "samples": len(samples), "notes": []}
    plan = _plan(ws, st, key, runner_key)
    report["notes"] = plan.notes
    if plan.compared is None:
        report |= {"status": "not_localized", "reason": plan.reason}
    else:
        sides = [plan.reference, plan.compared]
        parent = getattr(plan.compared, "onnx_parent", None)
        try:
            for side in sides:
                side.activate()
            if parent is not None:     # name the ONNX node that made each OpenVINO op's tensor
                for n in plan.compared.nodes:
                    src = next((parent.producers[t] for t in n.outputs if t in parent.producers), None)
                    if src is not None:
                        n.onnx_node = {"name": src.name, "op_type": src.op_type, "model": parent.label}
                        n.onnx_inputs = src.inputs
            core = locate(plan.reference, plan.compared, samples,
                          lambda t, dtype: tensor_rule(t, dtype, k, cfg, atol, rtol, t in outputs))
        finally:
            for side in sides:
                side.close()
        report["reference"] = plan.reference.describe(ws)
        report["compared"] = plan.compared.describe(ws)
        report |= core
        report["status"] = "diverged" if core["first_divergent"] else "no_divergence"
        if core["first_divergent"] is None:
            report["reason"] = ("no node's output leaves tolerance" + (
                f" although {runner_key} failed verification: the divergence may come from the runtime's own "
                "optimisations or from a device-specific kernel" if rs and rs.verify.status == "failed" else ""))
        if core["tensors_compared"] == 0:
            report["status"] = "not_localized"
            report["reason"] = "no intermediate tensor has the same name on both sides"
    ws.check_no_links(below=ws.report_dir)
    path = ws.debug_report(key)
    write_text(path, json.dumps(report, indent=1, default=str) + "\n")
    report["report_path"] = str(path)
    return report


def summary_lines(report: dict) -> list[str]:
    """A one-screen summary of a debug report."""
    lines = [f"debug {report['key']}" + (f" [{report['runner']}]" if report.get("runner") else "")
             + (f": verification {report['verify']['status']}" if report.get("verify") else "")]
    if report.get("reference"):
        r, c = report["reference"], report["compared"]
        lines.append(f"reference: {r['path']} ({r['engine']}, optimisations {r.get('graph_optimization_level')}); "
                     f"compared: {c['path']} ({c['engine']} on {c['device']})")
        lines.append(f"{report['tensors_compared']} tensors of {report['nodes_compared']}/{report['nodes']} nodes "
                     f"compared over {report['samples']} samples; {report['tensors_failing']} outside tolerance, "
                     f"{report['tensors_not_in_reference']} not in the reference")
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    first = report.get("first_divergent")
    if first:
        onnx_node = first.get("onnx_node")
        lines.append(f"first divergent node: {first['node']} ({first['op_type']}, node #{first['index']})"
                     + (f", from ONNX node {onnx_node['name']} ({onnx_node['op_type']})" if onnx_node else ""))
        for inp in first["inputs"]:
            if inp["kind"] == "tensor":
                state = ("within tolerance" if inp["within_tolerance"] else "already outside tolerance")
                lines.append(f"  input  {inp['name']}: {state} (max abs {_fmt(inp['max_abs'])})")
            elif inp["kind"] == "constant":
                state = ("DIFFERS from the reference's" + (f" (max abs {_fmt(inp['max_abs_vs_reference'])})"
                                                           if "max_abs_vs_reference" in inp else "")
                         if inp.get("differs_from_reference") else inp.get("reference", "same as the reference's"))
                alias = f" (ONNX {inp['onnx_name']})" if inp.get("onnx_name") else ""
                lines.append(f"  input  {inp['name']}{alias}: constant {inp['dtype']} {inp['shape']}, {state}")
            else:
                lines.append(f"  input  {inp['name']}: {inp['kind']}" + (f" ({inp['reason']})" if inp.get("reason")
                                                                         else ""))
        for out in first["outputs"]:
            if out.get("compared") is False:
                lines.append(f"  output {out['name']}: not compared")
            else:
                lines.append(f"  output {out['name']}: " + (out["reason"] or "within tolerance"))
        if report["later_divergent_count"]:
            later = ", ".join(report["later_divergent"])
            more = report["later_divergent_count"] - len(report["later_divergent"])
            lines.append(f"then {report['later_divergent_count']} later nodes diverge: {later}"
                         + (f" and {more} more" if more > 0 else ""))
    else:
        lines.append(f"{report['status']}: {report.get('reason')}")
    if report.get("report_path"):
        lines.append(f"report: {report['report_path']}")
    return lines
