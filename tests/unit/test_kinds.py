"""Output kinds and the checks that judge an output by what the model is for
(navigator.validators.kinds), on tensors shaped like the trained corpus's: a YOLOv8 head
(box pixels beside class probabilities), a peaked 6,625-class softmax (PP-OCR's recognizer),
a sigmoid map. Each rule is shown rejecting the wrong answer it exists to catch."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.execution.jobs import VerifySpec
from navigator.execution.stages import _accumulators, verdict
from navigator.validators import kinds
from navigator.validators.numeric import compare_outputs
from navigator.validators.tolerances import rule_for

RNG = np.random.default_rng(0)


def yolo_head(batch=2, classes=18, anchors=2100, objects=((50, 60, 3), (200, 150, 7))):
    """[B, 4+C, N]: box centre/size in pixels (0-320), class probabilities mostly ~1e-4 with a few
    confident objects."""
    head = np.zeros((batch, 4 + classes, anchors), np.float32)
    head[:, 0:2] = RNG.uniform(0, 320, (batch, 2, anchors))
    head[:, 2:4] = RNG.uniform(5, 80, (batch, 2, anchors))
    head[:, 4:] = RNG.uniform(0, 2e-3, (batch, classes, anchors))
    for b in range(batch):
        for i, (x, y, c) in enumerate(objects):
            n = 100 * (i + 1) + b
            head[b, 0:4, n] = (x + 100 * b, y, 40, 30)
            head[b, 4 + c, n] = 0.9 - 0.1 * i
    return head


def peaked_softmax(rows=(2, 40), classes=6625):
    logits = RNG.normal(0, 1, (*rows, classes))
    logits[..., 0] += 12.0                                # CTC blank: most positions
    hot = RNG.integers(1, classes, rows)
    logits[np.arange(rows[0])[:, None], np.arange(rows[1])[None, :], hot] += 14.0 * (RNG.random(rows) < 0.3)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def check(name, ref, out, *, precision="fp32", batch_dim=0, variation=None, others=()):
    """The worker's verdict on one output: ``out`` against ``ref`` (two stored samples when
    ``others`` gives a second (ref, out) pair, so the controls have another input)."""
    rule = rule_for(name, str(ref.dtype), precision=precision)
    spec = VerifySpec(rules={name: rule.__dict__}, batch_dim=batch_dim)
    refs = {"000": {name: ref}, **{f"{i + 1:03d}": {name: r} for i, (r, _) in enumerate(others)}}
    outs = {"000": {name: out}, **{f"{i + 1:03d}": {name: o} for i, (_, o) in enumerate(others)}}
    var = None if variation is None else {"000": {name: variation}}
    accs = _accumulators(spec, refs, var)
    from navigator.validators import controls

    stems = list(refs)
    for i, stem in enumerate(stems):
        feeds = {"x": np.arange(4 * ref.shape[0], dtype=np.float32).reshape(ref.shape[0], 4) + i}
        other = ({"x": feeds["x"] + 100}, refs[stems[(i + 1) % len(stems)]]) if len(stems) > 1 else None
        compare_outputs(outs[stem], refs[stem], accs, allow_nan=False, error_stat="elemwise",
                        candidates=controls.candidates(refs[stem], feeds, batch_dim=batch_dim, other=other))
    return accs[name].result()


def test_kinds_are_inferred_from_the_values_and_names():
    assert kinds.infer("y", [yolo_head()], 0).kind == "detections"
    assert kinds.infer("y", [yolo_head()], 0).axis == 1
    assert kinds.infer("y", [np.swapaxes(yolo_head(), 1, 2)], 0).axis == 2
    k = kinds.infer("softmax_out", [peaked_softmax()], 0)
    assert (k.kind, k.axis) == ("probabilities", 2)
    assert kinds.infer("map", [RNG.uniform(0, 1, (2, 1, 8, 8)).astype(np.float32)], 0).kind == "scores"
    assert kinds.infer("logits", [RNG.normal(size=(4, 10))], 0).kind == "logits"
    assert kinds.infer("last_hidden_state", [RNG.normal(size=(4, 5, 8))], 0).kind == "embedding"
    assert kinds.infer("out", [RNG.normal(size=(4, 10))], 0).kind == "tensor"
    assert kinds.infer("ids", [np.arange(4)], 0).kind == "tensor"
    assert kinds.infer("out", [RNG.normal(size=(4, 10))], 0, declared="logits").kind == "logits"


def test_a_peaked_softmax_is_scaled_by_its_peaks_and_an_unchanged_copy_passes():
    """PP-OCR's recognizer: p99 of |probabilities| is the near-zero tail (atol ~1e-10 from it): the
    copy of the source failed. Scaled by half the largest probability, it passes, conclusively."""
    ref = peaked_softmax()
    assert float(np.percentile(ref, 99)) < 1e-3 and kinds.scale_of([ref], unit=True) >= 0.45
    noise = ref + RNG.normal(0, 1e-7, ref.shape).astype(np.float32)
    c = check("probs", ref, noise, others=[(peaked_softmax(), peaked_softmax())])
    assert c.passed is False   # another sample's outputs differ: the second pair is not a copy
    c = check("probs", ref, noise)
    assert c.passed and c.conclusive and c.kind == "probabilities", c


def test_a_detector_head_is_checked_per_slice_group_and_zeroed_scores_are_rejected():
    """YOLOv8's [B, 22, N]: one scale (p99 = the box pixels) let an output whose 18 score rows are
    all zero pass. Per slice group, the zeroed scores fail, and the zeroed-score control makes a
    check that could not see them inconclusive."""
    ref = yolo_head()
    zeroed = ref.copy()
    zeroed[:, 4:] = 0.0
    c = check("output0", ref, zeroed)
    assert not c.passed and "[axis 1: 4:22]" in c.reason, c.reason
    assert [s["slice"] for s in c.slices] == ["axis 1: 0:4", "axis 1: 4:22"]
    assert c.slices[1]["scale"] < 1.0 < c.slices[0]["scale"]
    copy = check("output0", ref, ref + RNG.normal(0, 1e-6, ref.shape).astype(np.float32))
    assert copy.passed and copy.conclusive, copy


MANY = tuple((30 + 35 * i, 40, i % 18) for i in range(8))   # 8 objects a row, 7 above the confidence


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_a_lossy_detector_is_judged_by_its_decoded_boxes(precision):
    ref = yolo_head(batch=10, objects=MANY)                              # 70 reference detections
    near = ref.copy()
    near[:, 0:4] += RNG.normal(0, 0.5, near[:, 0:4].shape).astype(np.float32)   # boxes move half a pixel
    c = check("output0", ref, near, precision=precision)
    assert c.mode == "detections" and c.passed and c.measured == 1.0 and c.conclusive, c
    few = yolo_head()                                                     # 4: too few to show F1 >= 0.95
    c = check("output0", few, few.copy(), precision=precision)
    assert c.passed and c.conclusive is False and "only 4 reference detections" in c.control, c
    assert "60 or more reference detections" in c.cure
    lost = ref.copy()
    lost[:, 4:] *= 0.2                        # the noise-calibrated int8: scores collapse, objects lost
    c = check("output0", ref, lost, precision=precision)
    assert not c.passed and "detections F1 0 < 0.95" in c.reason, c.reason


def test_a_lossy_classifier_is_judged_by_top1_agreement():
    """>= 99% of the rows keep their class, on 300 rows or more: with none wrong among n rows the
    95% bound on the wrong rate is 3/n, so 200 rows cannot show 99% (int8 magika: 16 rows of
    samples agreed, 129 held-out files did not, 97.7%)."""
    ref = RNG.normal(0, 3, (400, 10)).astype(np.float32)
    near = ref + RNG.normal(0, 0.001, ref.shape).astype(np.float32)
    c = check("logits", ref, near, precision="int8")
    assert c.mode == "top1" and c.passed and c.measured >= 0.99 and c.conclusive, c
    c = check("logits", ref[:200], near[:200], precision="int8")
    assert c.passed and c.conclusive is False and "only 200 rows" in c.control and "300 or more" in c.control, c
    flipped = near.copy()
    flipped[:20] = flipped[:20, ::-1]         # 5% of the rows change class
    c = check("logits", ref, flipped, precision="int8")
    assert not c.passed and c.measured <= 0.95 and "rows changed their class" in c.reason, c.reason


def test_the_fp32_floor_keeps_a_copy_of_the_source_from_failing():
    """PP-OCR det: the reference (graph optimisations off) and onnxruntime's default differ by
    5.7e-4 > atol 3e-4: the source failed against itself. The floor (3 x that variation) holds."""
    ref = RNG.uniform(0, 1, (2, 1, 16, 16)).astype(np.float32)
    ref[ref < 0.7] = 0.0
    runner = ref + np.where(ref > 0, 5.7e-4, 0).astype(np.float32)
    assert not check("map", ref, runner).passed                     # no floor: the copy fails
    c = check("map", ref, runner, variation=runner)
    assert c.passed and c.conclusive and c.floor == pytest.approx(3 * 5.7e-4, rel=1e-3), c
    assert "floor" in c.atol_rule


def test_decode_and_match():
    dets = kinds.decode(yolo_head(), 1)
    assert [len(d) for d in dets] == [2, 2]
    assert dets[0][0][4] == 3 and dets[0][0][5] == pytest.approx(0.9)
    assert kinds.match(dets[0], dets[0]) == (2, 0, 0)
    moved = [(d[0] + 30, d[1], d[2] + 30, d[3], d[4], d[5]) for d in dets[0]]
    assert kinds.match(moved, dets[0]) == (0, 2, 2)
    assert kinds.f1(0, 0, 0) == 1.0 and kinds.f1(1, 1, 0) == pytest.approx(2 / 3)


def test_verdict_names_the_failing_slice():
    ref = yolo_head()
    zeroed = ref.copy()
    zeroed[:, 4:] = 0.0
    c = check("output0", ref, zeroed)
    v = verdict({"output0": c.to_dict()})
    assert v["status"] == "failed" and "4:22" in v["reason"]


def test_samples_of_other_shapes_are_no_detector_head():
    """A language model's [B, seq, vocab] logits at a profile corner of seq 1: the samples disagree
    along the axis a head would slice (an IndexError before)."""
    logits = [RNG.normal(size=(2, 8, 50)).astype(np.float32), RNG.normal(size=(1, 1, 50)).astype(np.float32)]
    assert kinds.infer("logits", logits, 0).kind == "logits"
    assert kinds.slice_groups(logits, 0, kinds.Kind("logits", 2)) is None


def test_a_sequence_agrees_only_when_all_its_positions_do():
    """PP-OCR's recognizer [B, T, 6625]: 99% of positions agreeing let 2% of strings change; a row
    is a batch entry (a string), agreeing when every character does."""
    ref = peaked_softmax(rows=(320, 40), classes=50)
    out = ref.copy()
    out[:16, 5] = out[:16, 5, ::-1]                 # one character of 5% of the strings
    from navigator.validators import controls

    assert controls.top1_rows(out, ref, kinds.Kind("probabilities", 2), 0) == (304, 320)
    assert controls.top1_rows(out, ref, kinds.Kind("probabilities", 2), None)[1] == 320 * 40
    c = check("probs", ref, out, precision="fp16")
    assert not c.passed and "304" not in c.reason and "16 of 320 rows" in c.reason, c.reason


def test_a_lossy_score_map_is_judged_by_its_decisions():
    """PP-OCR's text detector (a sigmoid map): int8 passed the quantized rule (relative L2 0.32 <=
    0.4) while the text regions it binarizes changed (mask IoU 0.86 on held-out pages). At a lossy
    precision a score map is judged by the IoU of its elements at or above 0.3, 0.5 and 0.7."""
    ref = np.zeros((2, 1, 64, 64), np.float32)
    ref[:, :, 10:30, 10:50] = 0.9
    ref[1, :, 40:60, 5:20] = 0.8
    near = np.clip(ref + RNG.normal(0, 0.01, ref.shape).astype(np.float32), 0, 1)
    c = check("map", ref, near, precision="int8")
    assert c.kind == "scores" and c.mode == "mask" and c.passed and c.conclusive, c
    shrunk = ref.copy()
    shrunk[:, :, 10:30, 40:50] = 0.2                 # a quarter of the text region lost
    c = check("map", ref, shrunk, precision="int8")
    assert not c.passed and "mask IoU 0.7" in c.reason, c.reason


def test_a_softmax_with_rare_classes_is_one_scale_and_a_dense_map_counts_positions():
    """magika's 214 classes: a class seen nowhere has probabilities ~1e-6 beside ~0.9 ones; split by
    magnitude, fp32 noise of 2e-5 on the rare ones failed every copy. A detector's face map
    [B, 2, H, W] (MTCNN's PNet) counts its positions as rows, not whole images."""
    logits = RNG.normal(0, 1, (64, 214))
    logits[:, :20] += 10.0
    probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    kind = kinds.infer("target_label", [probs], 0)
    assert kinds.slice_groups([probs], 0, kind) is None
    c = check("target_label", probs, probs + RNG.normal(0, 2e-7, probs.shape).astype(np.float32))
    assert c.passed and c.slices is None, c
    from navigator.validators import controls

    face = RNG.uniform(0, 1, (4, 1, 6, 6))
    maps = np.concatenate([face, 1 - face], axis=1)
    assert controls.top1_rows(maps, maps, kinds.Kind("probabilities", 1), 0) == (144, 144)
