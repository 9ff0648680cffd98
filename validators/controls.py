"""Negative controls: the answers a check must reject.

Beside each comparison of a format's output with the reference, the same rule is
applied to wrong answers built from the reference itself:

* **another input's reference**: the reference rows rolled by one along the batch
  dim (when the rolled inputs differ), or another stored sample's reference of the
  same shape (when its inputs differ): what a model that ignores its input would
  give;
* **a zero output**: what a dead model gives.

When the rule accepts such a candidate in every comparison, the check cannot tell
right from wrong on this data (a reference that is constant across inputs, or a
tolerance above the output's magnitude): the output is *inconclusive*. One
comparison whose candidates were all rejected is enough to make the aggregated
check conclusive, because the aggregate fails when any comparison fails.
"""

from __future__ import annotations

from collections import Counter

from navigator.validators.kinds import batch_rows as _rows

ANOTHER_ROW = "another input's reference (rows rolled)"
ANOTHER_SAMPLE = "another sample's reference"
ZEROS = "a zero output"
CONFIDENT_MARGIN = 0.1     # quantized mode: a probability row whose top-1 leads top-2 by this is confident
QUANTILE = 0.99            # Polygraphy's default error quantile (check_error_stat quantile)


# --------------------------------------------------------------------------- candidates
def _rows_differ(arrays: dict, batch_dim: int) -> bool:
    """The inputs rolled by one along the batch dim differ from the inputs (some row differs)."""
    import numpy as np

    for a in arrays.values():
        a = np.asarray(a)
        if a.ndim > batch_dim and a.shape[batch_dim] > 1 and not np.array_equal(a, np.roll(a, 1, axis=batch_dim)):
            return True
    return False


def _same_inputs(a: dict, b: dict) -> bool:
    import numpy as np

    return set(a) == set(b) and all(np.shape(a[k]) == np.shape(b[k]) and np.array_equal(a[k], b[k]) for k in a)


def candidates(reference: dict, inputs: dict, *, batch_dim: int | None,
               other: tuple[dict, dict] | None = None) -> dict[str, list]:
    """Per output name: [(control name, wrong answer)] for one comparison. ``other``:
    (inputs, reference) of another stored sample, used when its shapes match."""
    import numpy as np

    out: dict[str, list] = {}
    roll = batch_dim is not None and _rows_differ(inputs, batch_dim)
    other_ok = other is not None and not _same_inputs(inputs, other[0])
    for name, ref in reference.items():
        ref = np.asarray(ref)
        found = []
        if roll and ref.ndim > batch_dim and ref.shape[batch_dim] > 1:
            found.append((ANOTHER_ROW, np.roll(ref, 1, axis=batch_dim)))
        if other_ok and name in other[1] and np.shape(other[1][name]) == ref.shape:
            found.append((ANOTHER_SAMPLE, np.asarray(other[1][name])))
        found.append((ZEROS, np.zeros_like(ref)))
        out[name] = found
    return out


# --------------------------------------------------------------------------- the rules on any candidate
def mismatches(rule, out, ref):
    """Elements that fail: Polygraphy's OR rule for floats, inequality for integers."""
    from navigator.validators.elementwise import diffs, elementwise_fail

    if out.dtype.kind in "fc" or ref.dtype.kind in "fc":
        absdiff, reldiff = diffs(out, ref)
        return elementwise_fail(absdiff, reldiff, rule.atol, rule.rtol)
    return out != ref


# why a top-1 rule may reject a format whose arg-max agrees, by kind
TOP1_NOTE = {"probabilities": ", or moved the reference class's probability by more than 0.1"}


def top1_rows(out, ref, kind, batch_dim: int | None = None) -> tuple[int, int]:
    """(rows that agree, rows) along the kind's class axis: the same arg-max and, for
    probabilities, the reference class's probability within 0.1 (a cat must not become another
    class, nor a confident answer a guess). A sequence's ``[B, T, C]`` (a recognizer's characters, a
    tagger's tokens; the class axis last) counts a row per batch entry, agreeing when all its
    positions do: one changed character changes the string. A dense map's (``[B, C, H, W]``) rows
    are its positions."""
    import numpy as np

    from navigator.validators.kinds import SCORE_DELTA

    ref = np.asarray(ref, dtype=np.float64)
    axis = kind.axis if kind is not None and kind.axis is not None else ref.ndim - 1
    axis %= max(ref.ndim, 1)
    if not ref.size:
        return 0, 0
    o = np.moveaxis(np.asarray(out, dtype=np.float64), axis, -1)
    r = np.moveaxis(ref, axis, -1)
    best = r.argmax(axis=-1)
    agree = o.argmax(axis=-1) == best
    if kind is not None and kind.kind == "probabilities":
        picked = np.take_along_axis(o, best[..., None], -1)[..., 0] - np.take_along_axis(r, best[..., None], -1)[..., 0]
        agree &= np.abs(picked) <= SCORE_DELTA
    # a sequence [B, T, C] (class axis last) is judged per entry; a dense map [B, C, H, W] per position
    entries = batch_dim is not None and batch_dim != axis and agree.ndim == 2 and axis == ref.ndim - 1
    if entries:   # the batch dim keeps its place unless it came after the class axis
        b = batch_dim if batch_dim < axis else batch_dim - 1
        agree = np.moveaxis(agree, b, 0).reshape(agree.shape[b], -1).all(axis=1)
    return int(agree.sum()), int(agree.size)


def cosine(out, ref, batch_dim: int | None = None) -> float:
    """Cosine similarity of the whole tensors, or with ``batch_dim`` the smallest over its rows."""
    import numpy as np

    if batch_dim is not None:
        from navigator.validators.kinds import cosine_rows

        return cosine_rows(out, ref, batch_dim)
    a = np.asarray(out, dtype=np.float64).ravel()
    b = np.asarray(ref, dtype=np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return 1.0 if na == 0 and nb == 0 else (float(a @ b) / (na * nb) if na and nb else 0.0)


def norm_change(out, ref, batch_dim: int | None = None) -> float:
    """The largest relative change of a row's length, ``| ||out|| / ||ref|| - 1 |`` (the whole tensor
    when unbatched): what a cosine cannot see (an embedding scaled by 10 keeps cosine 1)."""
    import numpy as np

    o, r = _rows(out, batch_dim), _rows(ref, batch_dim)
    no, nr = np.linalg.norm(o, axis=1), np.linalg.norm(r, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(nr > 0, np.abs(no / nr - 1.0), np.where(no > 0, np.inf, 0.0))
    return float(change.max()) if change.size else 0.0


def norm_budget(threshold: float | None) -> float:
    """The length change a cosine rule allows: ten times its angle budget (cosine 0.999: 1%)."""
    return 10.0 * (1.0 - (threshold if threshold is not None else 1.0))


def worst_relative_l2(out, ref, batch_dim: int | None) -> float:
    """The largest ``||out - ref|| / ||ref||`` over the samples (batch rows)."""
    import numpy as np

    o, r = _rows(out, batch_dim), _rows(ref, batch_dim)
    if not r.size:
        return 0.0
    err = np.linalg.norm(o - r, axis=1)
    norm = np.linalg.norm(r, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(norm > 0, err / np.where(norm > 0, norm, 1.0), np.where(err > 0, np.inf, 0.0))
    return float(rel.max())


def confident_flips(out, ref, batch_dim: int | None) -> int:
    """For a probability output (rows in [0, 1] summing to 1 along the last axis): the rows whose
    reference top-1 leads its top-2 by CONFIDENT_MARGIN or more and whose arg-max changed."""
    import numpy as np

    r = np.asarray(ref, dtype=np.float64)
    if r.ndim < 2 or r.shape[-1] < 2 or r.size == 0 or (r < 0).any() or (r > 1).any() \
            or not np.allclose(r.sum(axis=-1), 1.0, atol=1e-3):
        return 0
    o = np.asarray(out, dtype=np.float64).reshape(-1, r.shape[-1])
    r = r.reshape(-1, r.shape[-1])
    top2 = np.sort(r, axis=1)[:, -2:]
    confident = top2[:, 1] - top2[:, 0] >= CONFIDENT_MARGIN
    return int(np.count_nonzero(confident & (o.argmax(axis=1) != r.argmax(axis=1))))


def accepted(rule, candidate, ref, *, allow_nan: bool = False, error_stat: str = "elemwise",
             batch_dim: int | None = 0, kind=None) -> bool:
    """Would ``rule`` accept ``candidate`` as the output? (The same rule as the comparison; the
    tolerance mode in numpy, which is Polygraphy's rule: tests/unit/test_numeric.py.)"""
    import numpy as np

    from navigator.validators.elementwise import diffs, mask_nan

    candidate, ref = np.asarray(candidate), np.asarray(ref)
    if candidate.shape != ref.shape:
        return False
    candidate, ref, nan = mask_nan(candidate, ref, allow_nan=allow_nan)
    if nan:
        return False
    mode = rule.mode
    if mode == "exact":
        return bool(np.array_equal(candidate, ref))
    if mode == "mismatch_fraction":
        return np.count_nonzero(mismatches(rule, candidate, ref)) / max(1, ref.size) <= (rule.threshold or 0.0)
    if mode == "cosine":
        rows = batch_dim if kind is not None else None
        return cosine(candidate, ref, rows) >= (rule.threshold if rule.threshold is not None else 1.0) and \
            norm_change(candidate, ref, rows) <= norm_budget(rule.threshold)
    if mode == "top1":
        agree, rows = top1_rows(candidate, ref, kind, batch_dim)
        return rows == 0 or agree / rows >= (rule.threshold or 0.0)
    if mode == "mask":
        from navigator.validators import kinds

        return kinds.mask_iou(kinds.mask_counts(candidate, ref)) >= (rule.threshold or 0.0)
    if mode == "detections":
        from navigator.validators import kinds

        return kinds.f1(*kinds.detection_counts(candidate, ref, kind or kinds.Kind("detections", 1, 4))) \
            >= (rule.threshold or 0.0)
    if mode == "quantized":
        return (worst_relative_l2(candidate, ref, batch_dim) <= (rule.threshold or 0.0)
                and not confident_flips(candidate, ref, batch_dim))
    if error_stat == "elemwise":
        return not bool(np.any(mismatches(rule, candidate, ref)))
    absdiff, reldiff = diffs(candidate, ref)
    if not absdiff.size:
        return True
    stat = {"max": np.max, "mean": np.mean, "median": np.median,
            "quantile": lambda a: np.quantile(a, QUANTILE)}[error_stat]
    return bool(stat(absdiff) <= rule.atol or stat(reldiff) <= rule.rtol)


# --------------------------------------------------------------------------- the verdict
class Tally:
    """Which controls each comparison of one output accepted."""

    def __init__(self):
        self.comparisons = 0
        self.all_rejected = 0
        self.accepted: Counter = Counter()
        self.kinds: set[str] = set()
        self.largest = 0.0

    def add(self, ref, results: list[tuple[str, bool]]) -> None:
        import numpy as np

        self.comparisons += 1
        finite = np.abs(np.asarray(ref, dtype=np.float64))
        finite = finite[np.isfinite(finite)]
        if finite.size:
            self.largest = max(self.largest, float(finite.max()))
        self.kinds.update(name for name, _ in results)
        if not any(ok for _, ok in results):
            self.all_rejected += 1
        for name, ok in results:
            if ok:
                self.accepted[name] += 1

    def verdict(self, rule) -> tuple[bool | None, str | None]:
        """(conclusive, what the controls showed); (None, None) when no control ran."""
        if not self.comparisons:
            return None, None
        if self.all_rejected:
            return True, (f"wrong answers rejected ({', '.join(sorted(self.kinds))}) in {self.all_rejected} of "
                          f"{self.comparisons} comparisons")
        why = []
        if self.accepted[ANOTHER_ROW] or self.accepted[ANOTHER_SAMPLE]:
            why.append("the reference is the same for different inputs: another input's output passes the rule too")
        if self.accepted[ZEROS]:
            if self.largest == 0:
                why.append("the reference is zero (or masked NaN) everywhere: a zero output passes too")
            elif rule.mode == "tolerance" and rule.atol is not None and rule.atol >= self.largest:
                why.append(f"atol {rule.atol:.3g} exceeds the output's largest magnitude {self.largest:.3g}: "
                           "a zero output passes too")
            else:
                why.append(f"a zero output passes the rule too (largest reference magnitude {self.largest:.3g})")
        return False, "; ".join(why) or "every wrong answer tried passes the rule too"


def rows_needed(threshold: float) -> int:
    """How many counted rows a rate budget needs before it can be shown: with none wrong among n,
    the 95% upper bound of the wrong rate is about 3 / n (the rule of three), so ``top1 >= 0.99``
    needs 300 rows, ``detections >= 0.95`` 60 reference detections."""
    import math

    return math.ceil(3.0 / (1.0 - threshold) - 1e-9) if threshold < 1.0 else 1


def too_few(rule, counted: int | None) -> str | None:
    """Why a passing rate-based check (top1, detections) proves nothing yet: it counted fewer rows
    than its budget needs (:func:`rows_needed`); None when it counted enough."""
    if counted is None or rule.mode not in ("top1", "detections", "mask") or rule.threshold is None:
        return None
    need = rows_needed(rule.threshold)
    if counted >= need:
        return None
    what = {"top1": "rows", "detections": "reference detections", "mask": "elements in the masks"}[rule.mode]
    return (f"only {counted} {what}: a {rule.mode} budget of {rule.threshold:g} is shown on {need} or more "
            f"(with none wrong among n, the 95% bound on the wrong rate is 3/n)")


def cure(name: str, rule, samples_given: bool = False) -> str:
    """What makes the check able to fail, for the message beside an inconclusive output; a user who
    gave real samples is not told to give real samples."""
    from navigator.specs import format_name

    n = format_name(name)
    if rule.mode in ("top1", "detections", "mask") and rule.threshold is not None:
        what = {"top1": "rows", "detections": "reference detections", "mask": "elements in the masks"}[rule.mode]
        more = (f"give more real samples ({rows_needed(rule.threshold)} or more {what}), or a budget this data "
                f"can show (--compare {n}:{rule.mode}=0.9)")
        return more if samples_given else f"verify with real inputs (--samples DIR): {more}"
    data = ("use samples on which this output varies and is not near zero (a detector's samples need objects in "
            "them)" if samples_given else "verify with trained weights or real inputs (--samples DIR)")
    return (f"{data}, give an explicit rule for this output (--atol {n}:VALUE or --compare {n}:MODE=VALUE), or "
            f"--compare {n}:skip when it does not depend on the input")
