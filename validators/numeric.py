"""Numerical comparison of a format's outputs with the reference.

Every output is checked and every failure collected before deciding; one
``OutputCheck`` per output carries max_abs, max_rel, the tolerances, the
smallest atol that passes at the given rtol and the smallest rtol that passes
at the given atol. ``tolerance`` mode goes through Polygraphy's comparator
(``SimpleCompareFunc``), so the verdict is Polygraphy's rule exactly.

**A verdict must be able to fail.** Beside each comparison the same rule is
applied to candidates that must fail (:mod:`navigator.validators.controls`:
another input's reference, a zero tensor). An output whose checks accepted a
wrong candidate in every comparison could not tell right from wrong on this
data: it is ``conclusive: false`` and its format's verification is
``inconclusive``, with the reason and the cure, never ``ok``.
"""

from __future__ import annotations

import logging
import math
import sys

from navigator.validators import controls
from navigator.validators.elementwise import ZERO_REPLACEMENT, diffs, elementwise_fail, mask_nan  # noqa: F401
from navigator.validators.tolerances import OutputRule
from navigator.workspace.status import OutputCheck

log = logging.getLogger(__name__)



def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


class Accumulator:
    """Folds the comparisons of one output over several samples and batch sizes, each with
    its negative controls. ``batch_dim``: rows of the ``quantized`` mode (None: the whole
    tensor is one sample)."""

    def __init__(self, name: str, rule: OutputRule, *, batch_dim: int | None = 0, scale: float | None = None,
                 kind=None, select: tuple[int, list[int]] | None = None, samples_given: bool = False):
        self.name = name
        self.rule = rule
        self.batch_dim = batch_dim
        self.kind = kind                # navigator.validators.kinds.Kind: top1's axis, detections' layout
        self.select = select            # (axis, indices): this accumulator checks that slice group only
        self.samples_given = samples_given   # the user's own samples: the cure does not ask for them
        self.check = OutputCheck(mode=rule.mode, passed=True, atol=rule.atol, rtol=rule.rtol,
                                 threshold=rule.threshold, scale=scale)
        if rule.mode in ("tolerance",):
            self.check.max_abs = self.check.max_rel = self.check.min_atol = self.check.min_rtol = 0.0
        self._mismatch = [0, 0]          # mismatch_fraction: elements; top1: rows (agreeing, all)
        self._detections = [0, 0, 0]     # detections: matched, extra, missed
        self._masks = [[0, 0] for _ in range(3)]   # mask: (intersection, union) per threshold
        self._cosine: float | None = None
        self._controls = controls.Tally()

    def fail(self, reason: str) -> None:
        self.check.passed = False
        if not self.check.reason:
            self.check.reason = reason

    def add(self, out, ref, *, allow_nan: bool = False, error_stat: str = "elemwise", where: str = "",
            candidates: list | None = None) -> None:
        """Compare ``out`` with ``ref``; ``candidates``: (name, array) answers that must fail the
        same rule (:func:`navigator.validators.controls.candidates`), None when there are none."""
        import numpy as np

        rule, c = self.rule, self.check
        if rule.mode == "skip":
            return
        out = np.asarray(out)
        ref = np.asarray(ref)
        if out.shape != ref.shape:
            self.fail(f"shape {list(out.shape)} != reference {list(ref.shape)}{where}")
            return
        if self.select is not None:
            out, ref = self._take(out), self._take(ref)
            candidates = None if candidates is None else [(n, self._take(np.asarray(a))) for n, a in candidates]
        out, ref, nan = mask_nan(out, ref, allow_nan=allow_nan)
        if nan:
            hint = "" if allow_nan else " (--allow-nan lets NaN pass where the reference has NaN)"
            self.fail(f"{nan}{where}{hint}")
            return
        if candidates is not None:
            self._controls.add(ref, [(name, controls.accepted(rule, cand, ref, allow_nan=allow_nan,
                                                              error_stat=error_stat, batch_dim=self.batch_dim,
                                                              kind=self.kind))
                                     for name, cand in candidates])
        if rule.mode == "top1":
            agree, rows = controls.top1_rows(out, ref, self.kind, self.batch_dim)
            self._mismatch[0] += agree
            self._mismatch[1] += rows
            c.measured = self._mismatch[0] / max(1, self._mismatch[1])
            self._stats(out, ref)      # the verdict is taken over every comparison, in result()
            return
        if rule.mode == "mask":
            from navigator.validators import kinds

            for i, (inter, union) in enumerate(kinds.mask_counts(out, ref)):
                self._masks[i][0] += inter
                self._masks[i][1] += union
            c.measured = kinds.mask_iou(self._masks)
            self._stats(out, ref)
            return
        if rule.mode == "detections":
            from navigator.validators import kinds

            for i, v in enumerate(kinds.detection_counts(out, ref, self.kind)):
                self._detections[i] += v
            c.measured = kinds.f1(*self._detections)
            self._stats(out, ref)
            return
        if rule.mode == "exact":
            if not np.array_equal(out, ref):
                n = int(np.count_nonzero(out != ref))
                self.fail(f"{n} of {out.size} elements differ{where}")
            self._stats(out, ref)
            return
        if rule.mode == "mismatch_fraction":
            self._mismatch[0] += int(np.count_nonzero(controls.mismatches(rule, out, ref)))
            self._mismatch[1] += int(out.size)
            c.measured = self._mismatch[0] / max(1, self._mismatch[1])
            self._stats(out, ref)      # the verdict is taken over every comparison, in result()
            return
        if rule.mode == "cosine":
            cos = controls.cosine(out, ref, self.batch_dim if self.kind is not None else None)
            self._cosine = cos if self._cosine is None else min(self._cosine, cos)
            c.measured = self._cosine
            bound = rule.threshold if rule.threshold is not None else 1.0
            if cos < bound:
                self.fail(f"cosine similarity {cos:.6g} < {bound:g}{where}")
            change = controls.norm_change(out, ref, self.batch_dim if self.kind is not None else None)
            if change > controls.norm_budget(rule.threshold):
                self.fail(f"a row's length changed by {change:.3g} (relative) > "
                          f"{controls.norm_budget(rule.threshold):.3g}, "
                          f"which the cosine rule allows{where}")
            self._stats(out, ref)
            return
        if rule.mode == "quantized":
            worst = controls.worst_relative_l2(out, ref, self.batch_dim)
            c.measured = worst if c.measured is None else max(c.measured, worst)
            bound = rule.threshold if rule.threshold is not None else 0.0
            if worst > bound:
                self.fail(f"relative L2 error {worst:.4g} of a sample > {bound:g} (quantized rule){where}")
            flipped = controls.confident_flips(out, ref, self.batch_dim)
            if flipped:
                self.fail(f"{flipped} confident arg-max prediction(s) changed (reference margin >= "
                          f"{controls.CONFIDENT_MARGIN:g}){where}")
            self._stats(out, ref)
            return
        # tolerance: Polygraphy's comparator decides, we add the statistics
        passed, stats = _polygraphy_compare(self.name, out, ref, rule, error_stat)
        max_abs, max_rel = self._stats(out, ref, error_stat, stats)
        if not passed:
            self.fail(f"max abs {_fmt(max_abs)} / max rel {_fmt(max_rel)} exceed atol {rule.atol:g} / "
                      f"rtol {rule.rtol:g} (Polygraphy rule, {error_stat}){where}")

    def _take(self, a):
        import numpy as np

        axis, indices = self.select
        return np.take(a, indices, axis=axis)

    def _stats(self, out, ref, error_stat: str = "elemwise", stats: dict | None = None):
        """Fold max_abs, max_rel, min_atol and min_rtol of one comparison into the check;
        returns this comparison's (max_abs, max_rel)."""
        import numpy as np

        if out.size == 0:
            return 0.0, 0.0
        c, rule = self.check, self.rule
        absdiff, reldiff = diffs(out, ref)
        nan_abs, nan_rel = np.isnan(absdiff), np.isnan(reldiff)
        max_abs = float(np.max(absdiff[~nan_abs])) if not nan_abs.all() else 0.0
        max_rel = float(np.max(reldiff[~nan_rel])) if not nan_rel.all() else 0.0
        c.max_abs = max(c.max_abs or 0.0, max_abs)
        c.max_rel = max(c.max_rel or 0.0, max_rel)
        if rule.atol is not None and rule.rtol is not None:
            if error_stat != "elemwise" and stats and stats.get(f"{error_stat}_absdiff") is not None:
                # the statistic passes when stat_abs <= atol OR stat_rel <= rtol
                s_abs, s_rel = stats[f"{error_stat}_absdiff"], stats[f"{error_stat}_reldiff"]
                min_atol = 0.0 if s_rel <= rule.rtol else s_abs
                min_rtol = 0.0 if s_abs <= rule.atol else s_rel
            else:
                # an element passes when absdiff <= atol OR reldiff <= rtol: the smallest atol
                # passing at the given rtol is the largest absdiff among elements failing rtol
                fail_rel = ~(reldiff <= rule.rtol)
                min_atol = float(np.max(absdiff[fail_rel])) if fail_rel.any() else 0.0
                fail_abs = ~(absdiff <= rule.atol)
                min_rtol = float(np.max(reldiff[fail_abs])) if fail_abs.any() else 0.0
            c.min_atol = max(c.min_atol or 0.0, min_atol)
            c.min_rtol = max(c.min_rtol or 0.0, min_rtol)
        return max_abs, max_rel

    def result(self) -> OutputCheck:
        c, rule = self.check, self.rule
        if rule.mode == "mismatch_fraction" and c.measured is not None:
            bound = rule.threshold or 0.0
            if c.measured > bound:
                self.fail(f"mismatch fraction {c.measured:.4g} > {bound:g} ({self._mismatch[0]} of "
                          f"{self._mismatch[1]} elements)")
        if rule.mode == "top1" and c.measured is not None and c.measured < (rule.threshold or 0.0):
            self.fail(f"top-1 agreement {c.measured:.4g} < {rule.threshold:g} ({self._mismatch[1] - self._mismatch[0]} "
                      f"of {self._mismatch[1]} rows changed their class{controls.TOP1_NOTE.get(self._kind_name, '')})")
        if rule.mode == "mask" and c.measured is not None and c.measured < (rule.threshold or 0.0):
            self.fail(f"mask IoU {c.measured:.4g} < {rule.threshold:g} (the elements at or above 0.3 / 0.5 / 0.7, "
                      f"the worst of the three)")
        if rule.mode == "detections" and c.measured is not None and c.measured < (rule.threshold or 0.0):
            m, extra, missed = self._detections
            self.fail(f"detections F1 {c.measured:.4g} < {rule.threshold:g} ({m} of {m + missed} reference "
                      f"detections matched, {extra} extra; a match: same class, IoU >= 0.5, score within 0.1)")
        if rule.mode != "skip":
            c.conclusive, c.control = self._controls.verdict(rule)
            if c.passed and c.conclusive is not False:
                short = controls.too_few(rule, self._counted())
                if short:
                    c.conclusive, c.control = False, short
            if c.passed and c.conclusive is False:
                c.cure = controls.cure(self.name, rule, self.samples_given)
        if self.kind is not None:
            c.kind = self.kind.kind
        # status.yaml is also read as JSON: an infinite statistic is recorded as null
        for attr in ("max_abs", "max_rel", "min_atol", "min_rtol"):
            v = getattr(c, attr)
            if v is not None and not math.isfinite(v):
                setattr(c, attr, None)
        return c


    def _counted(self) -> int | None:
        """What a rate-based rule counted: rows for top1, reference detections for detections."""
        if self.rule.mode == "top1":
            return self._mismatch[1]
        if self.rule.mode == "detections":
            return self._detections[0] + self._detections[2]
        if self.rule.mode == "mask":
            return min(u for _, u in self._masks)
        return None

    @property
    def _kind_name(self) -> str:
        return self.kind.kind if self.kind is not None else ""


class SlicedAccumulator:
    """One output checked as slice groups of different magnitude (a detector's box pixels and its
    class scores), each with its own scale, rule and negative controls: the output passes when every
    group passes and is conclusive when every group could fail (a zeroed score group must be
    rejected too). The Accumulator interface, so comparisons do not tell them apart."""

    def __init__(self, name: str, parts: list[tuple[str, Accumulator]], kind=None):
        self.name = name
        self.parts = parts
        self.kind = kind

    def fail(self, reason: str) -> None:
        for _, acc in self.parts:
            acc.fail(reason)

    def add(self, out, ref, **kwargs) -> None:
        for _, acc in self.parts:
            acc.add(out, ref, **kwargs)

    def result(self) -> OutputCheck:
        checks = [(label, acc.result()) for label, acc in self.parts]
        first = checks[0][1]
        merged = OutputCheck(mode=first.mode, passed=all(c.passed for _, c in checks), rtol=first.rtol,
                             threshold=first.threshold, kind=self.kind.kind if self.kind is not None else None)
        for attr in ("max_abs", "max_rel", "min_atol", "min_rtol", "measured"):
            values = [getattr(c, attr) for _, c in checks if getattr(c, attr) is not None]
            if values:
                setattr(merged, attr, max(values))
        failed = [f"[{label}] {c.reason}" for label, c in checks if not c.passed]
        merged.reason = "; ".join(failed) or None
        conclusive = [c.conclusive for _, c in checks]
        merged.conclusive = None if all(x is None for x in conclusive) else all(x is not False for x in conclusive)
        merged.control = "; ".join(f"[{label}] {c.control}" for label, c in checks if c.control) or None
        merged.cure = next((c.cure for _, c in checks if c.cure), None)
        merged.slices = [{"slice": label, **{k: v for k, v in c.to_dict().items() if k not in ("mode", "kind")}}
                         for label, c in checks]
        return merged


class _TorchAbsent:
    """Stands in for Polygraphy's lazy ``torch`` module: not installed, not importable."""

    def is_installed(self) -> bool:
        return False

    def is_importable(self) -> bool:
        return False


def _keep_polygraphy_off_torch() -> None:
    """Polygraphy's ``util.is_torch(x)`` imports torch just to answer "no" for numpy
    arrays: 2-5 s in every worker of a machine with torch installed. We only ever
    hand it numpy arrays, so unless torch is already loaded, tell it torch is absent."""
    if "torch" in sys.modules:
        return
    try:
        from polygraphy.util import array as pg_array
    except ImportError:  # pragma: no cover - a different Polygraphy layout: pay the import
        return
    if hasattr(pg_array, "torch"):
        pg_array.torch = _TorchAbsent()


class _ToNavigatorLog(logging.Handler):
    """Polygraphy's records, handed to the ``navigator`` logger's handlers (the workspace's
    navigator.log; the console only with --verbose), never to the caller's stdout or root logger."""

    def emit(self, record: logging.LogRecord) -> None:
        for handler in logging.getLogger("navigator").handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def route_polygraphy_logs() -> None:
    """Polygraphy prints a report per comparison (and a warning about colours) on stdout, which in
    the calling process is the user's training job: send it through logging to our log instead."""
    from polygraphy.logger import G_LOGGER

    if G_LOGGER.use_python_logging_system:
        return
    G_LOGGER.colors = False          # its colour check prints a warning on stdout by itself
    G_LOGGER.use_python_logging_system = True
    logger = logging.getLogger("Polygraphy")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(_ToNavigatorLog())


def _polygraphy_compare(name: str, out, ref, rule: OutputRule, error_stat: str) -> tuple[bool, dict]:
    """Polygraphy's verdict and its error statistics for one output."""
    import numpy as np
    from polygraphy.comparator.compare import SimpleCompareFunc
    from polygraphy.comparator.struct import IterationResult

    _keep_polygraphy_off_torch()
    route_polygraphy_logs()

    func = SimpleCompareFunc(atol={"": rule.atol}, rtol={"": rule.rtol}, check_error_stat={"": error_stat},
                             check_shapes=True, infinities_compare_equal=True)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):   # inf - inf of matching infinities
        result = func(IterationResult(outputs={name: out}, runner_name="format"),
                      IterationResult(outputs={name: ref}, runner_name="reference"))[name]
    if isinstance(result, bool):
        return result, {}
    stats = {}
    for stat in ("max", "mean", "median", "quantile"):
        for kind in ("absdiff", "reldiff"):
            value = getattr(result, f"{stat}_{kind}", None)
            stats[f"{stat}_{kind}"] = None if value is None else float(value)
    return bool(result), stats


def compare_outputs(outputs: dict, reference: dict, accumulators: dict[str, Accumulator], *, allow_nan: bool,
                    error_stat: str, where: str = "", candidates: dict | None = None,
                    names: set[str] | None = None) -> None:
    """Compare one inference's outputs with the reference, into ``accumulators``; ``candidates``:
    per output, the wrong answers of :func:`navigator.validators.controls.candidates`; ``names``:
    only these outputs (the others have no counterpart in this comparison)."""
    for name, acc in accumulators.items():
        if names is not None and name not in names:
            continue
        if name not in outputs:
            acc.fail(f"output missing from the format's results{where}")
            continue
        if name not in reference:
            acc.fail(f"output missing from the reference{where}")
            continue
        acc.add(outputs[name], reference[name], allow_nan=allow_nan, error_stat=error_stat, where=where,
                candidates=None if candidates is None else candidates.get(name, []))
