"""The two sides of ``navigator debug``: an ONNX graph run by onnxruntime, or an OpenVINO
IR, each with every intermediate tensor exposed as an output, and the per-tensor
comparison (:class:`TensorCheck`, through the comparison core of
:mod:`navigator.validators.numeric`)."""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError

log = logging.getLogger("navigator.tools.debug")

@dataclass
class Node:
    index: int
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    onnx_node: dict | None = None       # for OpenVINO ops: the ONNX node that made the same tensor
    onnx_inputs: list[str] | None = None  # ... and that node's inputs, position by position


@dataclass
class TensorCheck:
    """One intermediate tensor folded over the samples."""

    name: str
    mode: str
    atol: float | None
    rtol: float | None
    threshold: float | None = None
    passed: bool = True
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatched: int = 0
    size: int = 0
    shape: list[int] | None = None
    reason: str | None = None
    scale: float | None = None          # the reference tensor's robust magnitude a default atol is scaled by

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "passed", "mode", "max_abs", "max_rel", "atol", "rtol",
                                              "threshold", "mismatched", "size", "shape", "reason", "scale")}


# --------------------------------------------------------------------------- comparison
def compare_into(chk: TensorCheck, out, ref) -> None:
    import numpy as np

    from navigator.validators.numeric import diffs, elementwise_fail, mask_nan

    out, ref = np.asarray(out), np.asarray(ref)
    chk.shape = list(ref.shape)
    if out.shape != ref.shape:
        chk.passed = False
        chk.reason = chk.reason or f"shape {list(out.shape)} != reference {list(ref.shape)}"
        return
    if out.size == 0:
        return
    floats = out.dtype.kind in "fc" or ref.dtype.kind in "fc"
    masked_out, masked_ref, nan = mask_nan(out, ref, allow_nan=True)   # NaN in the same places: masked
    if nan:
        chk.passed = False
        chk.reason = chk.reason or nan
        chk.size += int(out.size)
        chk.mismatched += int(np.count_nonzero(np.isnan(out.astype(float)) != np.isnan(ref.astype(float))))
        return
    out, ref = masked_out, masked_ref
    absdiff, reldiff = diffs(out, ref)
    with np.errstate(invalid="ignore"):
        finite_abs = absdiff[np.isfinite(absdiff)]
        finite_rel = reldiff[np.isfinite(reldiff)]
    chk.max_abs = max(chk.max_abs, float(finite_abs.max()) if finite_abs.size else 0.0)
    chk.max_rel = max(chk.max_rel, float(finite_rel.max()) if finite_rel.size else 0.0)
    chk.size += int(out.size)
    if chk.mode == "exact" or not floats and chk.mode == "tolerance":
        bad = int(np.count_nonzero(out != ref))
        chk.mismatched += bad
        if bad:
            chk.passed = False
            chk.reason = chk.reason or f"{bad} of {out.size} elements differ"
        return
    if floats:
        bad = int(np.count_nonzero(elementwise_fail(absdiff, reldiff, chk.atol, chk.rtol)))
    else:           # integer tensors at reduced precision: a mismatch is any difference
        bad = int(np.count_nonzero(out != ref))
    chk.mismatched += bad
    if chk.mode == "mismatch_fraction":
        if chk.mismatched / max(1, chk.size) > (chk.threshold or 0.0):
            chk.passed = False
            chk.reason = f"mismatch fraction {chk.mismatched / chk.size:.4g} > {chk.threshold or 0.0:g}"
        return
    if bad:
        chk.passed = False
        chk.reason = chk.reason or (f"max abs {chk.max_abs:.3g} / max rel {chk.max_rel:.3g} exceed atol "
                                    f"{chk.atol:g} / rtol {chk.rtol:g} ({bad} of {out.size} elements)")


def tensor_rule(name: str, dtype: str, key, cfg: dict, atol: float | None, rtol: float | None, is_output: bool):
    from navigator.validators.tolerances import rule_for

    a = {"": atol} if atol is not None else cfg.get("atol")
    r = {"": rtol} if rtol is not None else cfg.get("rtol")
    rule = rule_for(name, dtype, precision=key.precision, fmt=key.format,
                    compare=cfg.get("compare") if is_output else None, atol=a, rtol=r)
    if rule.mode in ("cosine", "quantized", "skip"):   # an output's own mode: intermediates use the tolerance rule
        rule = rule_for(name, dtype, precision=key.precision, fmt=key.format, atol=a, rtol=r)
    return rule


# --------------------------------------------------------------------------- sides
class OnnxSide:
    """An ONNX model with every intermediate marked as an output, run by onnxruntime."""

    engine = "onnxruntime"
    graph = True     # an ONNX graph: a format with this side can be the reference side

    @classmethod
    def compared(cls, ws, key: str, fs, rs, *, reference_key: str, onnx_parent) -> tuple[Any, list[str], str | None]:
        """(side, notes, why none) for KEY run as its runner ``rs`` ran it (device, provider)."""
        device, provider = (rs.device, rs.provider) if rs is not None and rs.runner == "onnxruntime" else ("cpu", None)
        if key != reference_key:
            return cls(ws.abs(fs.path), io_names=fs.io_names, device=device, provider=provider, level="disabled",
                       label=key), [], None
        note = (f"{key} is the reference model itself: it is compared with graph optimisations at onnxruntime's "
                "default level (all), as its runner ran it, against disabled")
        return cls(ws.abs(fs.path), io_names=fs.io_names, device=device, provider=provider, level="all",
                   label=key), [note], None

    def __init__(self, path: Path, *, io_names: dict, device: str = "cpu", provider: str | None = None,
                 level: str = "disabled", label: str = ""):
        import onnx

        self.path = Path(path)
        self.label = label
        self.device, self.provider, self.level = device, provider, level
        self.io_names = dict(io_names or {})
        self.inverse = {v: k for k, v in self.io_names.items()}
        try:
            self.model = onnx.load(str(self.path))
        except Exception as e:
            raise UserInputError(f"{self.path}: cannot load the ONNX model ({type(e).__name__}: {e})") from None
        graph = self.model.graph
        self.initializers = {i.name: i for i in graph.initializer}
        self.graph_inputs = [i.name for i in graph.input if i.name not in self.initializers]
        self.nodes = [Node(i, n.name or f"{n.op_type}#{i}", n.op_type, [self._ours(x) for x in n.input if x],
                           [self._ours(x) for x in n.output if x]) for i, n in enumerate(graph.node)]
        self.producers = {t: n for n in self.nodes for t in n.outputs}
        self._runner = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def _ours(self, name: str) -> str:
        return self.inverse.get(name, name)

    def constant(self, name: str):
        from onnx import numpy_helper

        init = self.initializers.get(self.io_names.get(name, name))
        if init is None:
            return None
        try:
            return numpy_helper.to_array(init, base_dir=str(self.path.parent))
        except Exception:  # external data that cannot be read: not compared
            return None

    def _marked(self, typed: bool):
        import onnx

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        types = {}
        if typed:
            try:
                inferred = onnx.shape_inference.infer_shapes(model)
                types = {vi.name: vi for vi in inferred.graph.value_info}
            except Exception as e:   # > 2 GB, custom ops: mark by name only
                log.info("shape inference failed on %s (%s); marking outputs by name", self.path, e)
        have = {o.name for o in model.graph.output}
        for node in model.graph.node:
            for out in node.output:
                if out and out not in have:
                    vi = onnx.ValueInfoProto()
                    if out in types:
                        vi.CopyFrom(types[out])
                    else:
                        vi.name = out    # onnxruntime infers the type of an output declared by name
                    model.graph.output.append(vi)
                    have.add(out)
        return model

    def _save(self, model) -> Path:
        import onnx

        self._tmp = self._tmp or tempfile.TemporaryDirectory(prefix="navigator-debug-")
        path = Path(self._tmp.name) / f"marked-{len(os.listdir(self._tmp.name))}.onnx"
        large = model.ByteSize() > 1_800_000_000
        onnx.save(model, str(path), save_as_external_data=large, location=path.name + ".data" if large else None)
        return path

    def activate(self) -> None:
        from navigator import runners
        from navigator.runners.base import RunnerError

        spec = runners.RunnerSpec("onnxruntime", self.device, self.provider)
        errors = []
        for typed in (True, False):   # inferred types first; an op shape inference gets wrong: by name only
            runner = runners.create(spec, self._save(self._marked(typed)), graph_optimization_level=self.level)
            try:
                self._runner = runner.activate()
                return
            except RunnerError as e:
                raise UserInputError(f"{self.label}: onnxruntime cannot run on {spec.key} here ({e})",
                                     hint="pick another --runner") from None
            except Exception as e:
                errors.append(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
        raise UserInputError(f"{self.label}: onnxruntime cannot load {self.path.name} with its intermediates "
                             f"marked ({errors[-1]})")

    def run(self, sample: dict) -> dict:
        feeds = {self.io_names.get(k, k): v for k, v in sample.items()}
        return {self._ours(k): v for k, v in self._runner.infer(feeds).items()}

    def describe(self, ws) -> dict:
        return {"key": self.label, "path": ws.rel(self.path), "engine": self.engine,
                "device": self.provider or self.device, "graph_optimization_level": self.level}

    def close(self) -> None:
        if self._runner is not None:
            self._runner.deactivate()
            self._runner = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class OpenVINOSide:
    """An OpenVINO IR with every named op output added as a model output, on the CPU in f32."""

    engine = "openvino"
    graph = False
    _HIDDEN = ("Parameter", "Result", "Constant")

    @classmethod
    def compared(cls, ws, key: str, fs, rs, *, reference_key: str, onnx_parent) -> tuple[Any, list[str], str | None]:
        """(side, notes, why none) for KEY's IR; ``onnx_parent`` (a side or None) names the constants
        its frontend made."""
        from navigator import deps

        if not deps.has("openvino"):
            return None, [], "openvino is not installed here: its per-op outputs cannot be read"
        side = cls(ws.abs(fs.path), io_names=fs.io_names, label=key)
        side.onnx_parent = onnx_parent
        return side, ["OpenVINO ops are matched by the ONNX tensor names its frontend kept on their outputs; an op "
                      "marked as an output is not fused as in the runner's compiled model, so its numbers may "
                      "differ slightly from the runner's"], None

    def __init__(self, path: Path, *, io_names: dict, label: str = ""):
        import openvino as ov

        self.path = Path(path)
        self.label = label
        self.level = None
        self.inverse = {v: k for k, v in (io_names or {}).items()}
        self.io_names = dict(io_names or {})
        self.core = ov.Core()
        self.model = self.core.read_model(str(self.path))
        self.nodes: list[Node] = []
        self._constants: dict[str, Any] = {}
        self._ports = []
        for i, op in enumerate(self.model.get_ordered_ops()):
            kind = op.get_type_name()
            if kind == "Constant":
                for name in op.output(0).get_names():
                    self._constants[self._ours(name)] = op
            if kind in self._HIDDEN:
                continue
            outs = [op.output(j) for j in range(op.get_output_size())]
            named = [o for o in outs if o.get_names()]
            self._ports.extend(named)
            inputs = []
            for inp in op.inputs():
                src = inp.get_source_output()
                names = sorted(src.get_names())
                label = self._ours(names[0]) if names else f"<{src.get_node().get_friendly_name()}>"
                if not names and src.get_node().get_type_name() == "Constant":
                    self._constants[label] = src.get_node()     # folded by the frontend, unnamed
                inputs.append(label)
            self.nodes.append(Node(i, op.get_friendly_name(), kind, inputs,
                                   [self._ours(n) for o in named for n in sorted(o.get_names())]))
        self._request = None

    def _ours(self, name: str) -> str:
        return self.inverse.get(name, name)

    def constant(self, name: str):
        import numpy as np

        op = self._constants.get(name)
        return None if op is None else np.array(op.get_data(), copy=True)

    def activate(self) -> None:
        if self._ports:
            self.model.add_outputs(self._ports)
        self.compiled = self.core.compile_model(self.model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        self._request = self.compiled.create_infer_request()

    def run(self, sample: dict) -> dict:
        import numpy as np

        feeds = {self.io_names.get(k, k): v for k, v in sample.items()}
        result = self._request.infer(feeds)
        out = {}
        for port in self.compiled.outputs:
            value = np.array(result[port], copy=True)
            for name in port.get_names():
                out[self._ours(name)] = value
        return out

    def describe(self, ws) -> dict:
        return {"key": self.label, "path": ws.rel(self.path), "engine": self.engine, "device": "cpu",
                "inference_precision": "f32"}

    def close(self) -> None:
        self._request = None
        self.compiled = None


# --------------------------------------------------------------------------- planning
