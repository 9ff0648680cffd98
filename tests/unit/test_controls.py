"""Negative controls (navigator/validators/controls.py): a check that accepts a wrong answer on
its own data is inconclusive, never ok; scale-relative tolerances; the quantized (int8) rule."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.execution.stages import verdict
from navigator.validators import controls
from navigator.validators.numeric import Accumulator, compare_outputs
from navigator.validators.tolerances import OutputRule, robust_magnitude, rule_for

RNG = np.random.default_rng(0)


def _verify(name, outs, refs, inputs, rule, batch_dim=0):
    """Fold several comparisons as the worker does: scale from every reference, controls per comparison."""
    scale = robust_magnitude(refs)
    acc = Accumulator(name, rule.resolve(scale), batch_dim=batch_dim, scale=scale)
    for i, (out, ref, feeds) in enumerate(zip(outs, refs, inputs)):
        j = (i + 1) % len(refs)
        other = (inputs[j], {name: refs[j]}) if len(refs) > 1 else None
        cands = controls.candidates({name: ref}, feeds, batch_dim=batch_dim, other=other)
        acc.add(out, ref, candidates=cands[name])
    return acc.result()


def _inputs(n=2, batch=4):
    return [{"x": RNG.random((batch, 3)).astype(np.float32)} for _ in range(n)]


def test_an_informative_output_is_conclusive():
    refs = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
    outs = [r + 1e-7 for r in refs]
    c = _verify("y", outs, refs, _inputs(), rule_for("y", "float32"))
    assert c.passed and c.conclusive is True
    assert "wrong answers rejected" in c.control and c.cure is None


def test_a_constant_output_is_inconclusive():
    """Softmax of a dead head: 1/1000 for every class, every input (Keras MobileNetV2 with random weights)."""
    refs = [np.full((4, 1000), 1e-3, np.float32) for _ in range(2)]
    c = _verify("probs", [r.copy() for r in refs], refs, _inputs(), rule_for("probs", "float32"))
    assert c.passed and c.conclusive is False
    assert "the same for different inputs" in c.control
    assert "--compare probs:skip" in c.cure and "--samples" in c.cure


def test_an_absolute_atol_above_a_tiny_output_is_inconclusive():
    """mobilenet_v3 with random weights: outputs ~1e-9, and an atol of 0.1 accepts anything."""
    refs = [RNG.standard_normal((4, 10)).astype(np.float32) * 1e-9 for _ in range(2)]
    outs = [r * 3e3 for r in refs]                       # relative error 3e3: plainly wrong
    c = _verify("y", outs, refs, _inputs(), rule_for("y", "float32", atol={"": 0.1}))
    assert c.passed and c.conclusive is False
    assert "atol 0.1 exceeds the output's largest magnitude" in c.control


def test_the_scaled_default_keeps_a_tiny_output_checkable():
    """The same tiny output with the default (scale-relative) atol: a real check that catches the error."""
    refs = [RNG.standard_normal((4, 10)).astype(np.float32) * 1e-9 for _ in range(2)]
    good = _verify("y", [r * (1 + 1e-6) for r in refs], refs, _inputs(), rule_for("y", "float32"))
    assert good.passed and good.conclusive is True
    bad = _verify("y", [r * 3e3 for r in refs], refs, _inputs(), rule_for("y", "float32"))
    assert not bad.passed


def test_fp16_rounding_on_large_logits_passes_the_scaled_rule():
    """Logits of magnitude ~30 with fp16 rounding (max abs 0.011, 3.5e-4 of the scale) failed the old
    fixed atol 1e-2; relative to the scale they pass, and a zeroed output still fails."""
    refs = [(RNG.standard_normal((4, 16)) * 30).astype(np.float32) for _ in range(2)]
    for r in refs:
        r[:, 0] = 0.5                                     # near-zero logits: their rounding is all absolute
    outs = [r + RNG.uniform(-0.011, 0.011, r.shape).astype(np.float32) for r in refs]
    outs[0][0, 0] = 0.511
    rule = rule_for("logits", "float32", precision="fp16")
    fixed = OutputRule("tolerance", atol=1e-2, rtol=1e-2)
    assert not _verify("logits", outs, refs, _inputs(), fixed).passed
    c = _verify("logits", outs, refs, _inputs(), rule)
    assert c.passed and c.conclusive is True and c.atol > 0.1
    assert not _verify("logits", [np.zeros_like(r) for r in refs], refs, _inputs(), rule).passed


def test_rolled_rows_are_no_control_when_the_inputs_repeat():
    """A batch whose rows are the same input: the rolled reference is the right answer, not a wrong one."""
    feeds = {"x": np.ones((4, 3), np.float32)}
    ref = {"y": np.tile(RNG.standard_normal((1, 5)), (4, 1))}
    names = [n for n, _ in controls.candidates(ref, feeds, batch_dim=0)["y"]]
    assert names == [controls.ZEROS]
    varied = {"x": RNG.random((4, 3)).astype(np.float32)}
    assert controls.ANOTHER_ROW in [n for n, _ in controls.candidates(ref, varied, batch_dim=0)["y"]]


def test_another_sample_is_a_control_only_with_other_inputs():
    feeds = {"x": RNG.random((1, 3)).astype(np.float32)}
    ref = {"y": RNG.standard_normal((1, 5))}
    same = controls.candidates(ref, feeds, batch_dim=0, other=(dict(feeds), {"y": ref["y"] + 1}))
    assert [n for n, _ in same["y"]] == [controls.ZEROS]
    other = controls.candidates(ref, feeds, batch_dim=0, other=({"x": feeds["x"] + 1}, {"y": ref["y"] + 1}))
    assert [n for n, _ in other["y"]] == [controls.ANOTHER_SAMPLE, controls.ZEROS]


def test_one_conclusive_comparison_makes_the_aggregate_conclusive():
    """Sample A has detections, sample B is all background (zeros): B alone cannot fail, A can."""
    a = RNG.standard_normal((2, 6)).astype(np.float32)
    b = np.zeros((2, 6), np.float32)
    c = _verify("boxes", [a, b], [a, b], _inputs(batch=2), rule_for("boxes", "float32"))
    assert c.passed and c.conclusive is True and "in 1 of 2 comparisons" in c.control


@pytest.mark.parametrize("mode, threshold", [("exact", None), ("mismatch_fraction", 0.1), ("cosine", 0.99),
                                             ("quantized", 0.15)])
def test_every_mode_has_a_control(mode, threshold):
    integer = mode in ("exact", "mismatch_fraction")
    make = (lambda: RNG.integers(0, 100, (4, 8))) if integer else (lambda: RNG.standard_normal((4, 8)) + 5)
    refs = [make() for _ in range(2)]
    rule = OutputRule(mode, atol=1e-5, rtol=1e-4, threshold=threshold)
    c = _verify("y", [r.copy() for r in refs], refs, _inputs(), rule)
    assert c.passed and c.conclusive is True, c
    const = [np.full((4, 8), 7, dtype=refs[0].dtype) for _ in range(2)]
    c = _verify("y", [r.copy() for r in const], const, _inputs(), rule)
    assert c.passed and c.conclusive is False, c


def test_quantized_rule_per_sample_relative_l2():
    ref = RNG.standard_normal((4, 32))
    noisy = ref + 0.05 * np.linalg.norm(ref, axis=1, keepdims=True) / np.sqrt(32) * RNG.standard_normal((4, 32))
    assert controls.worst_relative_l2(noisy, ref, 0) < 0.15
    bad = noisy.copy()
    bad[2] = -ref[2]                                      # one sample ruined
    assert controls.worst_relative_l2(bad, ref, 0) == pytest.approx(2.0)
    assert controls.worst_relative_l2(np.ones(3), np.zeros(3), None) == np.inf
    acc = Accumulator("y", OutputRule("quantized", threshold=0.15), batch_dim=0)
    acc.add(bad, ref)
    assert not acc.result().passed and "relative L2 error 2 of a sample > 0.15" in acc.result().reason


def test_quantized_rule_keeps_confident_predictions():
    probs = np.array([[0.7, 0.2, 0.1], [0.34, 0.33, 0.33]])
    flipped = np.array([[0.2, 0.7, 0.1], [0.33, 0.34, 0.33]])   # row 0 confident and flipped; row 1 a near-tie
    assert controls.confident_flips(flipped, probs, 0) == 1
    assert controls.confident_flips(flipped[1:], probs[1:], 0) == 0
    assert controls.confident_flips(flipped * 5, probs * 5, 0) == 0      # not a distribution: no arg-max rule


def test_error_stat_controls_follow_the_statistic():
    ref = RNG.standard_normal((4, 100))
    cand = ref.copy()
    cand[0, 0] += 10                                       # one element far off: max fails, median passes
    rule = OutputRule("tolerance", atol=1e-3, rtol=1e-3)
    assert not controls.accepted(rule, cand, ref, error_stat="max")
    assert controls.accepted(rule, cand, ref, error_stat="median")
    assert not controls.accepted(rule, cand, ref, error_stat="elemwise")


def test_compare_outputs_passes_controls_per_output():
    feeds = {"x": RNG.random((4, 3)).astype(np.float32)}
    ref = {"a": RNG.standard_normal((4, 5)), "b": np.full((4, 5), 2.0)}
    accs = {n: Accumulator(n, rule_for(n, "float64").resolve(robust_magnitude([ref[n]]))) for n in ref}
    compare_outputs(ref, ref, accs, allow_nan=False, error_stat="elemwise",
                    candidates=controls.candidates(ref, feeds, batch_dim=0))
    assert accs["a"].result().conclusive is True and accs["b"].result().conclusive is False


def test_the_verify_status_from_its_outputs():
    ok = {"passed": True, "conclusive": True, "mode": "tolerance", "reason": None}
    unsure = {"passed": True, "conclusive": False, "mode": "tolerance", "reason": None, "control": "constant"}
    bad = {"passed": False, "conclusive": True, "mode": "tolerance", "reason": "max abs 1 exceed"}
    skip = {"passed": True, "conclusive": None, "mode": "skip", "reason": None}
    assert verdict({"a": ok, "b": skip}) == {"status": "ok", "reason": None}
    assert verdict({"a": ok, "b": unsure}) == {"status": "inconclusive", "reason": "b: inconclusive: constant"}
    assert verdict({"a": bad, "b": unsure})["status"] == "failed"
    assert verdict({"a": skip, "b": skip})["status"] == "inconclusive"


def test_the_cure_does_not_ask_for_real_samples_from_a_user_who_gave_them():
    from navigator.validators.controls import cure
    from navigator.validators.tolerances import rule_for

    rule = rule_for("boxes", "float32", precision="int8")
    assert "--samples DIR" in cure("boxes", rule)
    given = cure("boxes", rule, samples_given=True)
    assert "--samples DIR" not in given and "objects in them" in given and "--compare boxes:skip" in given
