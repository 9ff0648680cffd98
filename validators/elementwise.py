"""Polygraphy's element-wise arithmetic, the bottom of the validators: cast-up, NaN masking,
absdiff / reldiff and the mismatch rule. Imported by the checks (:mod:`.numeric`) and by the
controls that must fail them (:mod:`.controls`); it imports neither."""

from __future__ import annotations

from typing import Any

# Polygraphy adds this (float64 machine epsilon) to exact zeros of the reference
# before dividing, so reldiff there is absdiff / 2.220446049250313e-16.
ZERO_REPLACEMENT = 2.220446049250313e-16


def _cast_up(arr: Any) -> Any:
    """Polygraphy's ``cast_up``: float16 to float32, small integers to int32/int64."""
    import numpy as np

    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    if arr.dtype in (np.int8, np.uint8, np.int16, np.uint16):
        return arr.astype(np.int32)
    if arr.dtype == np.uint32:
        return arr.astype(np.int64)
    return arr


def mask_nan(out: Any, ref: Any, *, allow_nan: bool) -> tuple[Any, Any, str | None]:
    """(out, ref, problem). NaN always fails, even NaN == NaN (Polygraphy's rule), unless
    ``allow_nan`` and the reference has NaN in exactly the same places: then both are masked
    (zeroed) before the comparison. ``problem`` says where NaN is when it fails, else None."""
    import numpy as np

    if not (out.dtype.kind in "fc" or ref.dtype.kind in "fc"):
        return out, ref, None
    out_nan = np.isnan(out) if out.dtype.kind in "fc" else np.zeros(out.shape, bool)
    ref_nan = np.isnan(ref) if ref.dtype.kind in "fc" else np.zeros(ref.shape, bool)
    if not (out_nan.any() or ref_nan.any()):
        return out, ref, None
    if allow_nan and np.array_equal(out_nan, ref_nan):
        return np.where(out_nan, np.zeros((), out.dtype), out), np.where(ref_nan, np.zeros((), ref.dtype), ref), None
    where = "output" if out_nan.any() and not ref_nan.any() else (
        "reference" if not out_nan.any() else "output and reference")
    return out, ref, f"NaN in the {where}"


def diffs(out: Any, ref: Any) -> tuple[Any, Any]:
    """absdiff and reldiff exactly as Polygraphy computes them: floats in their own
    (cast-up) precision, matching infinities equal, zeros of the reference replaced."""
    import numpy as np

    o, r = _cast_up(out), _cast_up(ref)
    if o.dtype.kind == "f" and r.dtype.kind == "f":
        dt = np.result_type(o.dtype, r.dtype)
    else:
        dt = np.dtype(np.float64)
    o, r = o.astype(dt), r.astype(dt)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.abs(o - r)
        absdiff = np.where(np.isinf(o) & (o == r), np.zeros((), dt), absdiff)
        denom = np.abs(r)
        denom = np.where(denom == 0, np.asarray(ZERO_REPLACEMENT, dt), denom)
        reldiff = absdiff / denom
    return absdiff, reldiff


def elementwise_fail(absdiff: Any, reldiff: Any, atol: float, rtol: float) -> Any:
    """Polygraphy's elemwise mismatch: fails both tolerances (NaN fails)."""
    return ~(absdiff <= atol) & ~(reldiff <= rtol)
