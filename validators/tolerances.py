"""Default tolerances and comparison modes, from one table keyed by precision.

Polygraphy's rule: an element passes when ``absdiff <= atol OR reldiff <= rtol``.
Integer outputs are compared exactly at fp32; at reduced precision they use
``mismatch_fraction`` (TopK indices reorder on near-ties).
"""

from __future__ import annotations

from dataclasses import dataclass

# precision -> (atol, rtol, mismatch fraction allowed for integer outputs)
TABLE: dict[str, tuple[float, float, float]] = {
    "fp32": (1e-5, 1e-4, 0.0),
    "tf32": (1e-3, 1e-3, 0.001),
    "fp16": (1e-2, 1e-2, 0.01),
    "bf16": (5e-2, 5e-2, 0.02),
    "int8": (1e-1, 1e-1, 0.05),
    "fp8": (2e-1, 2e-1, 0.05),
}

MODES = ("tolerance", "exact", "mismatch_fraction", "cosine", "skip")


@dataclass(frozen=True)
class OutputRule:
    mode: str
    atol: float | None = None
    rtol: float | None = None
    threshold: float | None = None     # mismatch_fraction / cosine bound


def _lookup(values: dict | None, name: str, default: float) -> float:
    if not values:
        return default
    if name in values:
        return float(values[name])
    if "" in values:
        return float(values[""])
    return default


# fp32 on a GPU against the CPU reference: cuDNN/cuBLAS pick other algorithms and
# summation orders than the CPU (TF32 is off for fp32 formats). Measured on an H100,
# ResNet-50 (random weights) at batch 256: max abs 1.7e-4, smallest passing atol 3.3e-5
# at rtol 1e-4 for eager, torch.compile and torch.export alike.
DEVICE_FLOOR: dict[tuple[str, str], tuple[float, float]] = {
    ("cuda", "fp32"): (1e-4, 1e-3),
}


def format_floor(fmt: str | None) -> tuple[float, float] | None:
    """The tolerance floor of a format's runtimes (its record's ``tolerance_floor``): runtimes
    whose fp32 kernels legitimately differ more than a reordered sum, e.g. OpenVINO's CPU plugin."""
    from navigator.formats.registry import registry

    return registry.get(fmt).tolerance_floor if fmt and registry.has(fmt) else None


def rule_for(name: str, dtype: str, *, precision: str = "fp32", fmt: str | None = None,
             compare: dict | None = None, atol: dict | None = None, rtol: dict | None = None,
             device: str | None = None) -> OutputRule:
    """The comparison rule for one output: user settings first, then the table."""
    d_atol, d_rtol, d_frac = TABLE.get(precision, TABLE["fp32"])
    for floor in (format_floor(fmt), DEVICE_FLOOR.get((device, precision))):
        if floor:
            d_atol, d_rtol = max(d_atol, floor[0]), max(d_rtol, floor[1])
    a, r = _lookup(atol, name, d_atol), _lookup(rtol, name, d_rtol)
    compare = compare or {}
    mode, value = compare.get(name) or compare.get("*") or (None, None)
    if mode is None:
        is_int = dtype == "bool" or dtype.startswith(("int", "uint"))
        if is_int:
            mode, value = ("exact", None) if d_frac == 0.0 else ("mismatch_fraction", d_frac)
        else:
            mode = "tolerance"
    return OutputRule(mode=mode, atol=a, rtol=r, threshold=value)
