"""Unit tests for navigator.validators.tolerances: default rules and user overrides."""

from __future__ import annotations

import numpy as np

from navigator.validators.numeric import Accumulator
from navigator.validators.tolerances import TABLE, OutputRule, format_floor, rule_for


def test_table_values():
    assert TABLE["fp32"] == (1e-5, 1e-4, 0.0)
    assert TABLE["fp16"] == (1e-2, 1e-2, 0.01)
    assert format_floor("openvino") == (1e-3, 1e-3)
    assert format_floor("onnx") is None and format_floor(None) is None


def test_fp32_defaults():
    assert rule_for("logits", "float32") == OutputRule("tolerance", atol=1e-5, rtol=1e-4, threshold=None)
    assert rule_for("idx", "int64") == OutputRule("exact", atol=1e-5, rtol=1e-4, threshold=None)
    assert rule_for("mask", "bool").mode == "exact"
    assert rule_for("u", "uint8").mode == "exact"
    assert rule_for("h", "float16").mode == "tolerance"


def test_reduced_precision_ints_use_mismatch_fraction():
    assert rule_for("idx", "int64", precision="fp16") == OutputRule("mismatch_fraction", atol=1e-2, rtol=1e-2,
                                                                     threshold=0.01)
    assert rule_for("idx", "int32", precision="int8") == OutputRule("mismatch_fraction", atol=1e-1, rtol=1e-1,
                                                                     threshold=0.05)
    assert rule_for("logits", "float32", precision="bf16") == OutputRule("tolerance", atol=5e-2, rtol=5e-2)
    # an unknown precision falls back to fp32
    assert rule_for("logits", "float32", precision="fp4") == rule_for("logits", "float32")


def test_openvino_floor():
    assert rule_for("logits", "float32", fmt="openvino") == OutputRule("tolerance", atol=1e-3, rtol=1e-3)
    # the floor never lowers a looser precision default
    assert rule_for("logits", "float32", precision="fp16", fmt="openvino") == OutputRule("tolerance", atol=1e-2,
                                                                                      rtol=1e-2)
    # the user's tolerances win over the floor
    r = rule_for("logits", "float32", fmt="openvino", atol={"": 1e-6})
    assert (r.atol, r.rtol) == (1e-6, 1e-3)


def test_per_output_overrides_with_default_key():
    atol = {"": 1e-3, "logits": 5e-2}
    rtol = {"probs": 0.2}
    assert (rule_for("logits", "float32", atol=atol, rtol=rtol).atol,
            rule_for("logits", "float32", atol=atol, rtol=rtol).rtol) == (5e-2, 1e-4)
    r = rule_for("probs", "float32", atol=atol, rtol=rtol)
    assert (r.atol, r.rtol) == (1e-3, 0.2)
    r = rule_for("probs", "float32", atol={"other": 1.0})
    assert r.atol == 1e-5


def test_compare_modes_and_star():
    compare = {"idx": ("mismatch_fraction", 0.05), "*": ("cosine", 0.99)}
    assert rule_for("idx", "int64", compare=compare) == OutputRule("mismatch_fraction", 1e-5, 1e-4, 0.05)
    assert rule_for("emb", "float32", compare=compare) == OutputRule("cosine", 1e-5, 1e-4, 0.99)
    assert rule_for("ids", "int64", compare={"*": ("skip", None)}).mode == "skip"
    assert rule_for("logits", "float32", compare={"logits": ("exact", None), "*": ("skip", None)}).mode == "exact"


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
