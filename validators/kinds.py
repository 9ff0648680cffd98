"""What an output means, so that a check can judge it by what the model is for.

Kinds, inferred from the reference outputs (or declared: ``--output-kinds NAME:KIND``):

* ``probabilities``: non-negative rows summing to 1 along ``axis`` (a softmax);
* ``scores``: values in [0, 1] that are not such rows (sigmoid maps, confidences);
* ``detections``: a detector's candidates, ``boxes`` slices of box coordinates along ``axis``
  followed by class scores in [0, 1] (YOLOv8's ``[B, 4+C, N]``, or ``[B, N, 4+C]``);
* ``logits`` / ``embedding``: named so (``*logit*``; ``*embed*``, ``*hidden*``, ``*feature*``,
  ``*pool*``); a classifier's scores along the last axis, or one vector per row;
* ``tensor``: anything else.

Two facts of a trained model that a single scale per output hides (a YOLO head's box pixels
beside its class probabilities; a peaked softmax whose 99th percentile is its near-zero tail):
:func:`slice_groups` splits an output along an axis whose slices differ in magnitude by orders,
each group checked with its own scale and its own negative controls, and :func:`scale_of` takes
the scale of values in [0, 1] from the mass that matters (half the largest), not the tail.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("probabilities", "scores", "detections", "logits", "embedding", "tensor")
ORDERS = 100.0            # slices whose magnitudes differ by this factor or more are checked apart
SUM_TOLERANCE = 1e-3      # a probability row sums to 1 within this
CONFIDENCE = 0.25         # detections: a candidate counts when its best class score reaches this
NMS_IOU = 0.45            # ... and survives non-maximum suppression at this IoU, per class
MATCH_IOU = 0.5           # a detection matches the reference's at this IoU, same class ...
SCORE_DELTA = 0.1         # ... and a score within this
_NAME_HINTS = (("logits", ("logit",)), ("embedding", ("embed", "hidden", "feature", "pool", "vector")))
_MIN_AXIS = {"logits": 2, "embedding": 8}


@dataclass(frozen=True)
class Kind:
    kind: str = "tensor"
    axis: int | None = None       # the class axis (probabilities, logits) or the slice axis (detections)
    boxes: int | None = None      # detections: the leading slices that are box coordinates
    reason: str = ""              # how it was found ("declared" or the evidence)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "axis": self.axis, "boxes": self.boxes, "reason": self.reason}


def _floats(arrays) -> list:
    import numpy as np

    return [np.asarray(a, dtype=np.float64) for a in arrays if np.asarray(a).size]


def _sums_to_one(arrays, axis: int) -> bool:
    import numpy as np

    return all(a.ndim > axis and a.shape[axis] >= 2
               and np.allclose(a.sum(axis=axis), 1.0, atol=SUM_TOLERANCE) for a in arrays)


def _unit_interval(arrays) -> bool:
    return all(float(a.min()) >= -1e-6 and float(a.max()) <= 1.0 + 1e-6 for a in arrays)


def _detection_axis(arrays, batch_dim: int | None) -> int | None:
    """The axis of a YOLO-style head: 3-D, along it 4 box slices whose magnitude is orders above the
    rest, and the rest (class scores, 1 or more) in [0, 1]; the other non-batch axis is the longer."""
    import numpy as np

    a0 = arrays[0]
    if a0.ndim != 3 or batch_dim != 0:
        return None
    for axis in (1, 2):
        other = 3 - axis
        k = a0.shape[axis]
        if not 5 <= k <= 1024 or any(a.ndim != 3 or a.shape[axis] != k or a.shape[other] < k for a in arrays):
            continue
        boxes = [np.take(a, range(4), axis=axis) for a in arrays]
        scores = [np.take(a, range(4, k), axis=axis) for a in arrays]
        if not _unit_interval(scores):
            continue
        box_mag = max(float(np.percentile(np.abs(b), 99)) for b in boxes)
        score_mag = max(float(np.abs(s).max()) for s in scores)
        if box_mag >= 10.0 * max(score_mag, 1e-12):
            return axis
    return None


def infer(name: str, arrays, batch_dim: int | None, declared: str | None = None) -> Kind:
    """The kind of output ``name`` from its reference arrays (every stored sample)."""
    floats = _floats(arrays)
    if declared:
        return _declared(declared, floats, batch_dim)
    if not floats or any(a.dtype.kind not in "f" for a in floats):
        return Kind(reason="not a float output")
    a0 = floats[0]
    if _unit_interval(floats):   # the class axis: the last first, then the others but the batch's
        for axis in [a0.ndim - 1] + list(range(a0.ndim - 1)):
            if axis != batch_dim and _sums_to_one(floats, axis):
                return Kind("probabilities", axis=axis, reason=f"non-negative rows summing to 1 along axis {axis}")
    axis = _detection_axis(floats, batch_dim)
    if axis is not None:
        return Kind("detections", axis=axis, boxes=4,
                    reason=f"4 box slices along axis {axis}, orders above class scores in [0, 1]")
    if _unit_interval(floats):
        return Kind("scores", reason="values in [0, 1]")
    lowered = name.lower()
    for kind, hints in _NAME_HINTS:
        # a class axis needs 2 classes for a top-1, a vector 8 values for a cosine to say anything
        if any(h in lowered for h in hints) and a0.ndim >= 2 and a0.shape[-1] >= _MIN_AXIS[kind]:
            return Kind(kind, axis=a0.ndim - 1, reason=f"named {name!r}")
    return Kind(reason="no probabilities, scores, detections or named logits/embedding found")


def _declared(kind: str, floats, batch_dim: int | None) -> Kind:
    ndim = floats[0].ndim if floats else 2
    if kind == "detections":
        axis = _detection_axis(floats, batch_dim) if floats else None
        return Kind(kind, axis=axis if axis is not None else 1, boxes=4, reason="declared")
    if kind in ("probabilities", "logits", "embedding"):
        return Kind(kind, axis=ndim - 1, reason="declared")
    return Kind(kind, reason="declared")


# --------------------------------------------------------------------------- magnitudes
def scale_of(arrays, unit: bool = False) -> float:
    """The robust magnitude of some values: the 99th percentile of ``|value|`` (the largest when
    that is 0); for values in [0, 1] (``unit``) at least half the largest, so a peaked softmax
    or a sparse score map is scaled by its peaks, not its near-zero tail."""
    import numpy as np

    from navigator.validators.tolerances import finite_magnitudes

    flat = finite_magnitudes(arrays)
    if not flat.size:
        return 0.0
    top = float(flat.max())
    p = float(np.percentile(flat, 99.0))
    if unit:
        return max(p, 0.5 * top)
    return p if p > 0 else top


def slice_groups(arrays, batch_dim: int | None, kind: Kind) -> tuple[int, list[list[int]]] | None:
    """(axis, index groups) when the output's slices along a non-batch axis differ in magnitude by
    :data:`ORDERS` or more: the indices split at the geometric mean of the largest and smallest
    slice magnitude, each group checked on its own. A detections head splits at its box slices."""
    import numpy as np

    floats = _floats(arrays)
    if not floats or any(a.dtype.kind != "f" for a in floats) or kind.kind in ("probabilities", "scores"):
        return None   # values in [0, 1] share one unit scale: a rare class is not another magnitude
    if kind.kind == "detections" and kind.axis is not None:
        k = floats[0].shape[kind.axis]
        return kind.axis, [list(range(kind.boxes or 4)), list(range(kind.boxes or 4, k))]
    a0 = floats[0]
    for axis in range(a0.ndim):
        if axis == batch_dim or not 2 <= a0.shape[axis] <= 256 or any(a.shape[axis] != a0.shape[axis] for a in floats):
            continue
        mags = np.array([max(scale_of([np.take(a, i, axis=axis)]) for a in floats) for i in range(a0.shape[axis])])
        live = mags[mags > 0]   # a slice that is zero everywhere is dead, not small: it joins the large group
        if not np.isfinite(mags).all() or not live.size or live.max() < ORDERS * live.min():
            continue
        cut = (float(live.max()) * float(live.min())) ** 0.5
        large = [i for i, m in enumerate(mags) if m >= cut or m == 0]
        small = [i for i, m in enumerate(mags) if 0 < m < cut]
        return axis, [large, small]
    return None


def describe(axis: int, indices: list[int]) -> str:
    """``[axis 1: 0:4]``: a group's name in checks and messages."""
    if indices == list(range(indices[0], indices[-1] + 1)):
        span = f"{indices[0]}:{indices[-1] + 1}"
    else:
        span = ",".join(map(str, indices[:6])) + ("…" if len(indices) > 6 else "")
    return f"axis {axis}: {span}"


# --------------------------------------------------------------------------- task-level figures
def batch_rows(a, batch_dim: int | None):
    """``a`` as (samples, values): one row per batch entry (the whole tensor when unbatched)."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    if batch_dim is None or a.ndim <= batch_dim or a.ndim < 2:
        return a.reshape(1, -1)
    return np.moveaxis(a, batch_dim, 0).reshape(a.shape[batch_dim], -1)


def _rows(a, axis: int):
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    return np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])


def top1(out, ref, axis: int) -> tuple[int, int]:
    """(rows whose arg-max along ``axis`` agrees with the reference's, rows)."""
    o, r = _rows(out, axis), _rows(ref, axis)
    return int((o.argmax(axis=1) == r.argmax(axis=1)).sum()), int(r.shape[0])


def cosine_rows(out, ref, batch_dim: int | None) -> float:
    """The smallest cosine similarity between an output row and the reference's (one row per batch
    entry; the whole tensor when unbatched)."""
    import numpy as np

    o, r = batch_rows(out, batch_dim), batch_rows(ref, batch_dim)
    no, nr = np.linalg.norm(o, axis=1), np.linalg.norm(r, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where((no > 0) & (nr > 0), (o * r).sum(axis=1) / (no * nr), np.where((no == 0) & (nr == 0), 1.0, 0.0))
    return float(cos.min()) if cos.size else 1.0


MAX_CANDIDATES = 3000     # decode: the best candidates NMS considers (YOLO's max_nms is 30000 for 80 classes)
MAX_DETECTIONS = 300      # ... and the detections it keeps (YOLO's max_det)


def decode(head, axis: int, boxes: int = 4) -> list:
    """A YOLO-style head's detections per batch row after the standard decode: the best class per
    candidate at :data:`CONFIDENCE` or more, centre/size boxes as corners, greedy per-class NMS
    at :data:`NMS_IOU`. Each row is an array of ``(x1, y1, x2, y2, class, score)``."""
    import numpy as np

    head = np.asarray(head, dtype=np.float64)
    if axis == 2:
        head = np.swapaxes(head, 1, 2)
    out = []
    for row in head:                       # (K, N)
        scores = row[boxes:]
        best = scores.max(axis=0)
        keep = np.flatnonzero(best >= CONFIDENCE)
        keep = keep[np.argsort(-best[keep], kind="stable")][:MAX_CANDIDATES]
        cx, cy, w, h = row[0, keep], row[1, keep], row[2, keep], row[3, keep]
        cand = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, scores[:, keep].argmax(axis=0),
                         best[keep]], axis=1)
        kept = []
        alive = np.ones(len(cand), bool)
        for i in range(len(cand)):
            if not alive[i]:
                continue
            kept.append(i)
            if len(kept) == MAX_DETECTIONS:
                break
            rest = np.flatnonzero(alive[i + 1:]) + i + 1
            same = rest[cand[rest, 4] == cand[i, 4]]
            alive[same[ious(cand[i], cand[same]) >= NMS_IOU]] = False
        out.append(cand[kept])
    return out


def ious(box, others):
    """IoU of one corner box with each of ``others`` (rows of x1, y1, x2, y2, ...)."""
    import numpy as np

    ix = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = ix * iy
    union = (box[2] - box[0]) * (box[3] - box[1]) + (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1]) \
        - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def iou(a, b) -> float:
    import numpy as np

    return float(ious(np.asarray(a, dtype=np.float64), np.asarray([b], dtype=np.float64))[0])


def match(out_dets, ref_dets) -> tuple[int, int, int]:
    """(matched, extra, missed): a detection matches a reference one of its class at
    :data:`MATCH_IOU` or more with a score within :data:`SCORE_DELTA`, greedily by score."""
    import numpy as np

    out_dets, ref_dets = np.asarray(out_dets, dtype=np.float64).reshape(-1, 6), \
        np.asarray(ref_dets, dtype=np.float64).reshape(-1, 6)
    free = np.ones(len(out_dets), bool)
    matched = 0
    for r in ref_dets[np.argsort(-ref_dets[:, 5], kind="stable")]:
        ok = free & (out_dets[:, 4] == r[4]) & (np.abs(out_dets[:, 5] - r[5]) <= SCORE_DELTA)
        if not ok.any():
            continue
        overlap = np.where(ok, ious(r, out_dets), -1.0)
        j = int(overlap.argmax())
        if overlap[j] >= MATCH_IOU:
            free[j] = False
            matched += 1
    return matched, len(out_dets) - matched, len(ref_dets) - matched


def detection_counts(out, ref, kind: Kind) -> tuple[int, int, int]:
    """(matched, extra, missed) over every batch row of one comparison."""
    axis = kind.axis if kind.axis is not None else 1
    totals = [0, 0, 0]
    for o, r in zip(decode(out, axis, kind.boxes or 4), decode(ref, axis, kind.boxes or 4)):
        for i, v in enumerate(match(o, r)):
            totals[i] += v
    return totals[0], totals[1], totals[2]


def f1(matched: int, extra: int, missed: int) -> float:
    """F1 of the detections; 1.0 when neither side found anything."""
    total = 2 * matched + extra + missed
    return 1.0 if total == 0 else 2 * matched / total


MASK_THRESHOLDS = (0.3, 0.5, 0.7)   # the decisions a score map is read at (PP-OCR's text detector binarizes at 0.3)


def mask_counts(out, ref) -> list[tuple[int, int]]:
    """Per threshold of :data:`MASK_THRESHOLDS`: (intersection, union) of the elements at or above it."""
    import numpy as np

    o, r = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    counts = []
    for t in MASK_THRESHOLDS:
        a, b = o >= t, r >= t
        counts.append((int((a & b).sum()), int((a | b).sum())))
    return counts


def mask_iou(counts) -> float:
    """The worst IoU over the thresholds (1.0 where neither side reaches a threshold)."""
    return min((i / u for i, u in counts if u), default=1.0)

