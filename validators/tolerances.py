"""Default comparison rules, from one table keyed by precision, scaled to each output.

Polygraphy's rule: an element passes when ``absdiff <= atol OR reldiff <= rtol``.
The default ``atol`` is not a fixed number: it is a factor of the output's
**scale**, a robust magnitude of the reference output over every stored sample
(:func:`robust_magnitude`: the 99th percentile of ``|reference|``). A logit of
magnitude 30 and a feature of magnitude 1e-3 are held to the same relative
standard; a fixed atol of 1e-5 would pass anything at 1e-9 and fail ordinary fp16
rounding at 30. The worker resolves the factor once the reference is known
(:meth:`OutputRule.resolve`); status.yaml records the scale and how atol was
derived. ``--atol`` / ``--rtol`` / ``--compare`` always win and are absolute.

int8 is a lossy approximation, not a rounding of the same arithmetic: its floats
use the ``quantized`` mode, a relative L2 error per sample (batch row) bounded by
the table, plus, where an output is a probability distribution, the arg-max of
every row whose reference is confident beyond that error must not change.

Integer outputs are compared exactly at fp32; at reduced precision they use
``mismatch_fraction`` (TopK indices reorder on near-ties).

Where the factors come from: ``benchmarks/tolerance_study.py`` measures, on the
model zoo, the error of each precision relative to the output's scale; the table
keeps a margin above the worst numerically clean model (README, "Verification").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# precision -> (atol as a factor of the output's scale, rtol, mismatch fraction allowed for integer outputs)
# fp32: the deepest clean zoo models reach 9.1e-5 of their scale (keras ResNet50 through OpenVINO,
# 6.7e-5 through onnxruntime); 3e-4 keeps a 3x margin and still rejects every negative control.
TABLE: dict[str, tuple[float, float, float]] = {
    "fp32": (3e-4, 1e-4, 0.0),
    "tf32": (1e-3, 1e-3, 0.001),
    "fp16": (1e-2, 1e-2, 0.01),
    "bf16": (5e-2, 5e-2, 0.02),
    "int8": (1e-1, 1e-1, 0.05),
    "fp8": (2e-1, 2e-1, 0.05),
}

# Precisions whose float outputs are a lossy approximation, compared with ``quantized``:
# precision -> largest relative L2 error per sample (||out - ref|| / ||ref||, one batch row).
# Measured on the zoo (benchmarks/results/tolerance_study.md; static QDQ, minmax, Conv/MatMul/Gemm):
# 11 transformers/CNNs 0.12-0.39 (median 0.16); broken quantizations (the attention mask quantized)
# 1.5-2.5; chaotic randomly initialised deep CNNs 1.5-1.8; another input's output (the negative
# control) ~1-1.4. 0.4 passes the first group and rejects the others.
LOSSY: dict[str, float] = {
    "int8": 0.4,
    "fp8": 0.5,
}

# fp32 on a GPU against the CPU reference: cuDNN/cuBLAS pick other algorithms and
# summation orders than the CPU (TF32 is off for fp32 formats). Measured on an H100,
# ResNet-50 (random weights) at batch 256: max abs 1.7e-4, smallest passing atol 3.3e-5
# at rtol 1e-4 for eager, torch.compile and torch.export alike. Factors of the scale, as TABLE.
DEVICE_FLOOR: dict[tuple[str, str], tuple[float, float]] = {
    ("cuda", "fp32"): (1e-4, 1e-3),
}

# Lossy precisions are judged by what the model is for, where an output's kind says it
# (navigator.validators.kinds): a classifier by its top-1 agreement, a detector by the F1 of its
# decoded boxes, an embedding by its worst row cosine. precision -> mode -> the budget (the least
# agreement / F1 / cosine that passes). Other outputs keep TABLE's tolerance (fp16, bf16) or the
# quantized rule (int8, fp8).
TASK: dict[str, dict[str, float]] = {
    "fp16": {"top1": 0.99, "detections": 0.95, "cosine": 0.999, "mask": 0.95},
    "bf16": {"top1": 0.99, "detections": 0.95, "cosine": 0.999, "mask": 0.95},
    "int8": {"top1": 0.99, "detections": 0.95, "cosine": 0.99, "mask": 0.95},
    "fp8": {"top1": 0.99, "detections": 0.95, "cosine": 0.99, "mask": 0.95},
}
TASK_MODE = {"probabilities": "top1", "logits": "top1", "detections": "detections", "embedding": "cosine",
             "scores": "mask"}

# fp32 is never held below the source's own legitimate variation: the reference against the same
# source run the way the runners run it (onnxruntime with its graph optimisations on; a PyTorch
# module in float64), this many times its largest difference.
FLOOR_FACTOR = 3.0

# mode -> the range of its value (None: the mode takes no value). The one list of modes:
# --compare, gate policies and the comparison itself read it.
MODES: dict[str, tuple[float, float] | None] = {
    "tolerance": None,
    "exact": None,
    "skip": None,
    "mismatch_fraction": (0.0, 1.0),
    "cosine": (-1.0, 1.0),
    "quantized": (0.0, 1.0),
    "top1": (0.0, 1.0),
    "detections": (0.0, 1.0),
    "mask": (0.0, 1.0),
}

ROBUST_QUANTILE = 99.0    # the scale: this percentile of |reference| (max when it is 0)


@dataclass(frozen=True)
class OutputRule:
    """How one output is compared. ``atol`` is absolute; a default rule has ``atol=None`` and
    ``atol_factor`` instead until :meth:`resolve` scales it to the reference output."""

    mode: str
    atol: float | None = None
    rtol: float | None = None
    threshold: float | None = None     # mismatch_fraction / cosine / quantized / top1 / detections bound
    atol_factor: float | None = None   # default rules: atol = atol_factor x the output's scale
    # a default mode's precision (provenance, not part of the rule): the worker may judge it by kind
    precision: str | None = dataclasses.field(default=None, compare=False)

    def resolve(self, scale: float | None, floor: float | None = None) -> "OutputRule":
        """The rule with an absolute atol: ``atol_factor x scale`` for a default rule, never below
        ``floor`` (the source's own variation times FLOOR_FACTOR)."""
        if self.atol is not None or self.atol_factor is None:
            return self
        return dataclasses.replace(self, atol=max(self.atol_factor * float(scale or 0.0), float(floor or 0.0)))

    def for_kind(self, kind: str) -> "OutputRule":
        """A default rule at a lossy precision, judged by the task its output kind names (TASK)."""
        mode = TASK_MODE.get(kind)
        if self.precision not in TASK or mode is None or self.mode in ("exact", "mismatch_fraction", "skip"):
            return self
        return dataclasses.replace(self, mode=mode, threshold=TASK[self.precision][mode], atol=None, rtol=None,
                                   atol_factor=None)

    def derivation(self, scale: float | None, floor: float | None = None, unit: bool = False) -> str:
        """How atol was chosen, for status.yaml and the report."""
        if self.atol_factor is None:
            return "given" if self.atol is not None else "none"
        how = "max(p99, half the largest) of |reference|" if unit else f"p{ROBUST_QUANTILE:g} of |reference|"
        text = f"{self.atol_factor:g} x scale {float(scale or 0.0):.4g} ({how})"
        if floor and floor > self.atol_factor * float(scale or 0.0):
            text = f"floor {floor:.4g} ({FLOOR_FACTOR:g} x the source's own variation), above {text}"
        return text


def finite_magnitudes(arrays):
    """``|value|`` of every finite element of ``arrays``, flat (float64; empty when there is none)."""
    import numpy as np

    values = [np.abs(np.asarray(a, dtype=np.float64)).ravel() for a in arrays if np.asarray(a).size]
    if not values:
        return np.zeros(0)
    flat = np.concatenate(values)
    return flat[np.isfinite(flat)]


def robust_magnitude(arrays) -> float:
    """The scale of an output over every sample: the 99th percentile of ``|value|`` over its
    finite elements, or the largest when that percentile is 0 (a mostly-zero output); 0.0 for
    an empty or all-zero output."""
    import numpy as np

    flat = finite_magnitudes(arrays)
    if not flat.size:
        return 0.0
    p = float(np.percentile(flat, ROBUST_QUANTILE))
    return p if p > 0 else float(flat.max())


def format_floor(fmt: str | None) -> tuple[float, float] | None:
    """The tolerance floor of a format's runtimes (its record's ``tolerance_floor``): runtimes
    whose fp32 kernels legitimately differ more than a reordered sum, e.g. OpenVINO's CPU plugin.
    The atol part is a factor of the output's scale, like TABLE's."""
    from navigator.formats.registry import registry

    return registry.get(fmt).tolerance_floor if fmt and registry.has(fmt) else None


def _lookup(values: dict | None, name: str) -> float | None:
    if not values:
        return None
    if name in values:
        return float(values[name])
    if "" in values:
        return float(values[""])
    return None


def rule_for(name: str, dtype: str, *, precision: str = "fp32", fmt: str | None = None,
             compare: dict | None = None, atol: dict | None = None, rtol: dict | None = None,
             device: str | None = None) -> OutputRule:
    """The comparison rule for one output: user settings first (absolute), then the table
    (atol relative to the output's scale, resolved later)."""
    d_atol, d_rtol, d_frac = TABLE.get(precision, TABLE["fp32"])
    for floor in (format_floor(fmt), DEVICE_FLOOR.get((device, precision))):
        if floor:
            d_atol, d_rtol = max(d_atol, floor[0]), max(d_rtol, floor[1])
    given_atol, given_rtol = _lookup(atol, name), _lookup(rtol, name)
    r = d_rtol if given_rtol is None else given_rtol
    factor = None if given_atol is not None else d_atol
    compare = compare or {}
    mode, value = compare.get(name) or compare.get("*") or (None, None)
    auto = None
    if mode is None:
        is_int = dtype == "bool" or dtype.startswith(("int", "uint"))
        if is_int:
            mode, value = ("exact", None) if d_frac == 0.0 else ("mismatch_fraction", d_frac)
        elif precision in LOSSY and given_atol is None and given_rtol is None:
            mode, value = "quantized", LOSSY[precision]
        else:
            mode = "tolerance"
        if not is_int and given_atol is None and given_rtol is None:
            auto = precision
    return OutputRule(mode=mode, atol=given_atol, rtol=r, threshold=value, atol_factor=factor, precision=auto)
