"""Numerical comparison of a format's outputs with the reference.

Every output is checked and every failure collected before deciding; one
``OutputCheck`` per output carries max_abs, max_rel, the tolerances, the
smallest atol that passes at the given rtol and the smallest rtol that passes
at the given atol. ``tolerance`` mode goes through Polygraphy's comparator
(``SimpleCompareFunc``), so the verdict is Polygraphy's rule exactly.
"""

from __future__ import annotations

import logging
import math

from navigator.validators.tolerances import OutputRule
from navigator.workspace.status import OutputCheck

log = logging.getLogger(__name__)

ZERO_REPLACEMENT = 2.22e-16   # Polygraphy replaces exact zeros of the reference by this in reldiff


class ShapeMismatch(Exception):
    pass


class DtypeMismatch(Exception):
    pass


class Accumulator:
    """Folds the comparisons of one output over several samples and batch sizes."""

    def __init__(self, name: str, rule: OutputRule):
        self.name = name
        self.rule = rule
        self.check = OutputCheck(mode=rule.mode, passed=True, atol=rule.atol, rtol=rule.rtol,
                                 threshold=rule.threshold)
        if rule.mode in ("tolerance",):
            self.check.max_abs = self.check.max_rel = self.check.min_atol = self.check.min_rtol = 0.0
        self._mismatch = [0, 0]
        self._cosine: float | None = None

    def fail(self, reason: str) -> None:
        self.check.passed = False
        if not self.check.reason:
            self.check.reason = reason

    def add(self, out, ref, *, allow_nan: bool = False, error_stat: str = "elemwise", where: str = "") -> None:
        import numpy as np

        rule, c = self.rule, self.check
        if rule.mode == "skip":
            c.passed = True
            return
        out = np.asarray(out)
        ref = np.asarray(ref)
        if out.shape != ref.shape:
            self.fail(f"shape {list(out.shape)} != reference {list(ref.shape)}{where}")
            return
        out_f = out.astype(np.float64) if out.dtype.kind in "fc" or out.dtype == np.float16 else out
        ref_f = ref.astype(np.float64) if ref.dtype.kind in "fc" else ref
        if out.dtype.kind == "f" or ref.dtype.kind == "f":
            out_nan = np.isnan(out_f) if out.dtype.kind == "f" else np.zeros(out.shape, bool)
            ref_nan = np.isnan(ref_f) if ref.dtype.kind == "f" else np.zeros(ref.shape, bool)
            if out_nan.any() or ref_nan.any():
                if allow_nan and np.array_equal(out_nan, ref_nan):
                    out = np.where(out_nan, 0, out)
                    ref = np.where(ref_nan, 0, ref)
                    out_f = np.where(out_nan, 0.0, out_f)
                    ref_f = np.where(ref_nan, 0.0, ref_f)
                else:
                    where_nan = "output" if out_nan.any() and not ref_nan.any() else (
                        "reference" if not out_nan.any() else "output and reference")
                    hint = "" if allow_nan else " (--allow-nan lets NaN pass where the reference has NaN)"
                    self.fail(f"NaN in the {where_nan}{where}{hint}")
                    return
        if rule.mode == "exact":
            if not np.array_equal(out, ref):
                n = int(np.count_nonzero(out != ref))
                self.fail(f"{n} of {out.size} elements differ{where}")
            self._stats(out_f, ref_f)
            return
        if rule.mode == "mismatch_fraction":
            mism = out != ref if out.dtype.kind not in "fc" else ~_elementwise_pass(out_f, ref_f, rule)
            self._mismatch[0] += int(np.count_nonzero(mism))
            self._mismatch[1] += int(out.size)
            frac = self._mismatch[0] / max(1, self._mismatch[1])
            c.measured = frac
            if frac > (rule.threshold or 0.0):
                self.fail(f"mismatch fraction {frac:.4g} > {rule.threshold}")
            self._stats(out_f, ref_f)
            return
        if rule.mode == "cosine":
            a = out_f.astype(np.float64).ravel()
            b = ref_f.astype(np.float64).ravel()
            na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
            cos = 1.0 if na == 0 and nb == 0 else (float(a @ b) / (na * nb) if na and nb else 0.0)
            self._cosine = cos if self._cosine is None else min(self._cosine, cos)
            c.measured = self._cosine
            if cos < (rule.threshold if rule.threshold is not None else 1.0):
                self.fail(f"cosine similarity {cos:.6g} < {rule.threshold}{where}")
            self._stats(out_f, ref_f)
            return
        # tolerance: Polygraphy's comparator decides, we add the statistics
        passed = _polygraphy_pass(self.name, out, ref, rule, error_stat)
        self._stats(out_f, ref_f)
        if not passed:
            self.fail(f"max abs {c.max_abs:.3g} / max rel {c.max_rel:.3g} exceed atol {rule.atol:g} / "
                      f"rtol {rule.rtol:g} (Polygraphy rule, {error_stat}){where}")

    def _stats(self, out_f, ref_f) -> None:
        import numpy as np

        if out_f.size == 0:
            return
        c, rule = self.check, self.rule
        absdiff = np.abs(np.asarray(out_f, dtype=np.float64) - np.asarray(ref_f, dtype=np.float64))
        denom = np.abs(np.asarray(ref_f, dtype=np.float64))
        denom = np.where(denom == 0, ZERO_REPLACEMENT, denom)
        reldiff = absdiff / denom
        with np.errstate(invalid="ignore"):
            max_abs = float(np.nanmax(absdiff)) if absdiff.size else 0.0
            max_rel = float(np.nanmax(reldiff)) if reldiff.size else 0.0
        c.max_abs = max(c.max_abs or 0.0, max_abs)
        c.max_rel = max(c.max_rel or 0.0, max_rel)
        if rule.atol is not None and rule.rtol is not None:
            # smallest atol passing at the given rtol: the largest absdiff among elements failing rtol
            fail_rel = reldiff > rule.rtol
            min_atol = float(absdiff[fail_rel].max()) if fail_rel.any() else 0.0
            fail_abs = absdiff > rule.atol
            min_rtol = float(reldiff[fail_abs].max()) if fail_abs.any() else 0.0
            c.min_atol = max(c.min_atol or 0.0, min_atol)
            c.min_rtol = max(c.min_rtol or 0.0, min_rtol)
        for attr in ("max_abs", "max_rel", "min_atol", "min_rtol"):
            v = getattr(c, attr)
            if v is not None and not math.isfinite(v):
                setattr(c, attr, None)

    def result(self) -> OutputCheck:
        return self.check


def _elementwise_pass(out_f, ref_f, rule: OutputRule):
    import numpy as np

    absdiff = np.abs(out_f - ref_f)
    denom = np.where(ref_f == 0, ZERO_REPLACEMENT, np.abs(ref_f))
    return (absdiff <= rule.atol) | (absdiff / denom <= rule.rtol)


def _polygraphy_pass(name: str, out, ref, rule: OutputRule, error_stat: str) -> bool:
    from polygraphy.comparator.compare import SimpleCompareFunc
    from polygraphy.comparator.struct import IterationResult

    func = SimpleCompareFunc(atol={"": rule.atol}, rtol={"": rule.rtol}, check_error_stat={"": error_stat},
                             check_shapes=True, infinities_compare_equal=True)
    result = func(IterationResult(outputs={name: out}, runner_name="format"),
                  IterationResult(outputs={name: ref}, runner_name="reference"))
    return bool(result[name])


def compare_outputs(outputs: dict, reference: dict, accumulators: dict[str, Accumulator], *, allow_nan: bool,
                    error_stat: str, where: str = "") -> None:
    """Compare one inference's outputs with the reference, into ``accumulators``."""
    for name, acc in accumulators.items():
        if name not in outputs:
            acc.fail(f"output missing from the format's results{where}")
            continue
        if name not in reference:
            acc.fail(f"output missing from the reference{where}")
            continue
        acc.add(outputs[name], reference[name], allow_nan=allow_nan, error_stat=error_stat, where=where)
