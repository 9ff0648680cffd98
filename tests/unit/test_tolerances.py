"""Unit tests for navigator.validators.tolerances: default rules scaled to the output, user overrides."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.validators.numeric import Accumulator
from navigator.validators.tolerances import (LOSSY, TABLE, OutputRule, format_floor, robust_magnitude,
                                             rule_for)


def test_table_values():
    assert TABLE["fp32"] == (3e-4, 1e-4, 0.0)
    assert TABLE["fp16"] == (1e-2, 1e-2, 0.01)
    assert LOSSY["int8"] == 0.4
    assert format_floor("openvino") is None       # the zoo: OpenVINO errs like onnxruntime
    assert format_floor("onnx") is None and format_floor(None) is None


def test_fp32_defaults_are_relative_to_the_output():
    rule = rule_for("logits", "float32")
    assert rule == OutputRule("tolerance", atol=None, rtol=1e-4, threshold=None, atol_factor=3e-4)
    assert rule.resolve(30.0).atol == pytest.approx(9e-3)      # logits of magnitude 30
    assert rule.resolve(1e-9).atol == pytest.approx(3e-13)     # a near-zero output is held to the same standard
    assert rule.derivation(30.0) == "0.0003 x scale 30 (p99 of |reference|)"
    assert rule_for("idx", "int64") == OutputRule("exact", atol=None, rtol=1e-4, threshold=None, atol_factor=3e-4)
    assert rule_for("mask", "bool").mode == "exact"
    assert rule_for("u", "uint8").mode == "exact"
    assert rule_for("h", "float16").mode == "tolerance"


def test_given_tolerances_are_absolute_and_win():
    rule = rule_for("logits", "float32", atol={"": 1e-3})
    assert rule.atol == 1e-3 and rule.atol_factor is None
    assert rule.resolve(1000.0) is rule and rule.derivation(1000.0) == "given"


def test_reduced_precision():
    assert rule_for("idx", "int64", precision="fp16") == OutputRule("mismatch_fraction", None, 1e-2, 0.01, 1e-2)
    assert rule_for("idx", "int32", precision="int8") == OutputRule("mismatch_fraction", None, 1e-1, 0.05, 1e-1)
    assert rule_for("logits", "float32", precision="bf16") == OutputRule("tolerance", None, 5e-2, None, 5e-2)
    # int8 floats are a lossy approximation: relative L2 per sample, unless the user gives tolerances
    assert rule_for("logits", "float32", precision="int8") == OutputRule("quantized", None, 1e-1, 0.4, 1e-1)
    assert rule_for("logits", "float32", precision="int8", atol={"": 0.2}).mode == "tolerance"
    # an unknown precision falls back to fp32
    assert rule_for("logits", "float32", precision="fp4") == rule_for("logits", "float32")


def test_device_floor():
    assert rule_for("logits", "float32", device="cuda") == OutputRule("tolerance", None, 1e-3, None, 3e-4)
    # the floor never lowers a looser precision default
    assert rule_for("logits", "float32", precision="fp16", device="cuda").atol_factor == 1e-2
    # the user's tolerances win over the floor
    r = rule_for("logits", "float32", device="cuda", atol={"": 1e-6})
    assert (r.atol, r.rtol) == (1e-6, 1e-3)


def test_per_output_overrides_with_default_key():
    atol = {"": 1e-3, "logits": 5e-2}
    rtol = {"probs": 0.2}
    r = rule_for("logits", "float32", atol=atol, rtol=rtol)
    assert (r.atol, r.rtol) == (5e-2, 1e-4)
    r = rule_for("probs", "float32", atol=atol, rtol=rtol)
    assert (r.atol, r.rtol) == (1e-3, 0.2)
    r = rule_for("probs", "float32", atol={"other": 1.0})
    assert r.atol is None and r.atol_factor == 3e-4


def test_compare_modes_and_star():
    compare = {"idx": ("mismatch_fraction", 0.05), "*": ("cosine", 0.99)}
    assert rule_for("idx", "int64", compare=compare) == OutputRule("mismatch_fraction", None, 1e-4, 0.05, 3e-4)
    assert rule_for("emb", "float32", compare=compare) == OutputRule("cosine", None, 1e-4, 0.99, 3e-4)
    assert rule_for("ids", "int64", compare={"*": ("skip", None)}).mode == "skip"
    assert rule_for("logits", "float32", compare={"logits": ("exact", None), "*": ("skip", None)}).mode == "exact"


def test_robust_magnitude():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 100)) * 30.0
    a[0, 0] = 1e6                                           # one outlier does not set the scale
    scale = robust_magnitude([a, a / 2])
    assert 50 < scale < 100
    assert robust_magnitude([np.zeros(99), np.array([0.0, 2.0])]) == 2.0    # mostly zero: the largest
    assert robust_magnitude([np.zeros(4)]) == 0.0 and robust_magnitude([]) == 0.0
    assert robust_magnitude([np.array([np.inf, 1.0, -3.0])]) == pytest.approx(2.98)


def test_fp16_int_rule_tolerates_reordered_topk():
    rule = rule_for("idx", "int64", precision="fp16")
    acc = Accumulator("idx", rule)
    ref = np.arange(200)
    out = ref.copy()
    out[[0, 1]] = out[[1, 0]]          # a near-tie swapped: 2 of 200 = 0.01
    acc.add(out, ref)
    assert acc.result().passed is True
    exact = Accumulator("idx", rule_for("idx", "int64"))
    exact.add(out, ref)
    assert exact.result().passed is False and exact.result().reason == "2 of 200 elements differ"
