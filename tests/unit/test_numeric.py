"""Unit tests for navigator.validators.numeric: the Polygraphy rule and the comparison modes."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.validators.numeric import ZERO_REPLACEMENT, Accumulator, compare_outputs
from navigator.validators.tolerances import OutputRule


def check(out, ref, mode="tolerance", atol=1e-3, rtol=1e-3, threshold=None, **kw):
    acc = Accumulator("y", OutputRule(mode=mode, atol=atol, rtol=rtol, threshold=threshold))
    acc.add(np.asarray(out), np.asarray(ref), **kw)
    return acc.result()


# --- tolerance mode: Polygraphy's rule ----------------------------------------

def test_or_rule_disagrees_with_numpy_allclose():
    ref = np.array([1.0, 2.0], np.float32)
    out = np.array([1.0015, 2.0], np.float32)
    # numpy: |a-b| <= atol + rtol*|b| -> 1.5e-3 <= 2e-3 passes
    assert np.allclose(out, ref, atol=1e-3, rtol=1e-3)
    c = check(out, ref)
    assert c.passed is False
    assert c.reason.startswith("max abs 0.0015 / max rel 0.0015 exceed atol 0.001 / rtol 0.001 "
                               "(Polygraphy rule, elemwise)")


def test_or_rule_passes_where_either_tolerance_holds():
    # element 0 passes by atol only, element 1 passes by rtol only: OR passes
    ref = np.array([1e-6, 1000.0])
    out = np.array([5e-4 + 1e-6, 1000.5])
    assert not np.all(np.abs(out - ref) <= 1e-3 * np.abs(ref))        # rtol alone fails
    assert not np.all(np.abs(out - ref) <= 1e-3)                      # atol alone fails
    c = check(out, ref)
    assert c.passed is True and c.reason is None
    assert c.max_abs == pytest.approx(0.5)
    assert c.max_rel == pytest.approx(500.0)


def test_zero_reference_reldiff_uses_epsilon():
    assert ZERO_REPLACEMENT == 2.220446049250313e-16
    c = check(np.array([1e-10, 1.0]), np.array([0.0, 1.0]), atol=1e-12, rtol=1e-3)
    assert c.passed is False
    assert c.max_rel == 1e-10 / ZERO_REPLACEMENT
    assert c.min_rtol == 1e-10 / ZERO_REPLACEMENT
    assert c.min_atol == 1e-10


def _min_tol_case():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000).astype(np.float32)
    out = (ref + rng.standard_normal(1000).astype(np.float32) * 1e-3).astype(np.float32)
    ref[:5] = 0.0
    return out, ref


@pytest.mark.parametrize("atol,rtol", [(1e-4, 1e-2), (1e-3, 1e-3), (0.0, 0.5)])
def test_min_atol_passes_and_slightly_smaller_fails(atol, rtol):
    out, ref = _min_tol_case()
    c = check(out, ref, atol=atol, rtol=rtol)
    assert c.passed is False
    assert c.min_atol > atol
    assert check(out, ref, atol=c.min_atol, rtol=rtol).passed is True
    assert check(out, ref, atol=c.min_atol * (1 - 1e-4), rtol=rtol).passed is False


@pytest.mark.parametrize("atol,rtol", [(1e-4, 1e-2), (1e-3, 1e-3), (5e-4, 0.0)])
def test_min_rtol_passes_and_slightly_smaller_fails(atol, rtol):
    out, ref = _min_tol_case()
    c = check(out, ref, atol=atol, rtol=rtol)
    assert c.min_rtol > rtol
    assert check(out, ref, atol=atol, rtol=c.min_rtol).passed is True
    assert check(out, ref, atol=atol, rtol=c.min_rtol * (1 - 1e-4)).passed is False


def test_min_tolerances_zero_when_passing_and_accumulated():
    acc = Accumulator("y", OutputRule("tolerance", atol=1e-3, rtol=1e-3))
    acc.add(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    assert (acc.check.min_atol, acc.check.min_rtol, acc.check.max_abs) == (0.0, 0.0, 0.0)
    acc.add(np.array([1.0, 2.5]), np.array([1.0, 2.0]))
    acc.add(np.array([1.1, 2.0]), np.array([1.0, 2.0]))
    c = acc.result()
    assert c.passed is False
    assert c.min_atol == pytest.approx(0.5) and c.max_abs == pytest.approx(0.5)
    assert c.min_rtol == pytest.approx(0.25) and c.max_rel == pytest.approx(0.25)
    # the first failure's reason is kept, with its own statistics
    assert c.reason.startswith("max abs 0.5 / max rel 0.25 exceed")


def test_error_stat_max_and_mean():
    ref = np.ones(100)
    out = ref.copy()
    out[0] += 0.5              # one outlier: mean absdiff 0.005, max 0.5
    assert check(out, ref, atol=0.01, rtol=0.0).passed is False                       # elemwise
    assert check(out, ref, atol=0.01, rtol=0.0, error_stat="mean").passed is True
    assert check(out, ref, atol=0.01, rtol=0.0, error_stat="max").passed is False
    assert check(out, ref, atol=0.5, rtol=0.0, error_stat="max").passed is True
    c = check(out, ref, atol=0.001, rtol=0.0, error_stat="mean")
    assert c.passed is False and "(Polygraphy rule, mean)" in c.reason
    assert c.min_atol == pytest.approx(0.005)          # smallest atol passing the mean check
    assert c.min_rtol == pytest.approx(0.005)
    assert check(out, ref, atol=c.min_atol, rtol=0.0, error_stat="mean").passed is True


def test_shape_mismatch_reason():
    c = check(np.zeros((2, 3)), np.zeros((3, 2)))
    assert c.passed is False and c.reason == "shape [2, 3] != reference [3, 2]"


def test_float16_output_against_float32_reference():
    ref = np.linspace(0, 1, 50, dtype=np.float32)
    out = ref.astype(np.float16)
    assert check(out, ref, atol=1e-3, rtol=1e-3).passed is True
    assert check(out, ref, atol=1e-6, rtol=1e-6).passed is False


def test_matching_infinities_pass():
    c = check(np.array([np.inf, -np.inf, 1.0]), np.array([np.inf, -np.inf, 1.0]))
    assert c.passed is True
    c = check(np.array([np.inf, 1.0]), np.array([1.0, 1.0]))
    assert c.passed is False
    assert c.max_abs is None and c.reason.startswith("max abs inf / max rel inf exceed")


# --- NaN --------------------------------------------------------------------------

def test_nan_fails():
    c = check(np.array([np.nan, 1.0]), np.array([0.5, 1.0]))
    assert c.passed is False
    assert c.reason == "NaN in the output (--allow-nan lets NaN pass where the reference has NaN)"
    c = check(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    assert c.passed is False and c.reason.startswith("NaN in the output and reference")


def test_allow_nan_only_at_matching_positions():
    c = check(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), allow_nan=True)
    assert c.passed is True and c.max_abs == 0.0
    c = check(np.array([np.nan, 1.0]), np.array([1.0, np.nan]), allow_nan=True)
    assert c.passed is False and c.reason == "NaN in the output and reference"
    c = check(np.array([1.0, 1.0]), np.array([np.nan, 1.0]), allow_nan=True)
    assert c.passed is False and c.reason == "NaN in the reference"
    # masked elements do not hide a real difference elsewhere
    c = check(np.array([np.nan, 2.0]), np.array([np.nan, 1.0]), allow_nan=True)
    assert c.passed is False and c.reason.startswith("max abs 1 / max rel 1 exceed")


# --- other modes --------------------------------------------------------------

def test_exact_mode_for_ints():
    assert check(np.array([1, 2, 3]), np.array([1, 2, 3]), mode="exact").passed is True
    c = check(np.array([1, 2, 4]), np.array([1, 2, 3]), mode="exact")
    assert c.passed is False and c.reason == "1 of 3 elements differ"
    assert c.max_abs == 1.0
    c = check(np.array([True, False]), np.array([True, True]), mode="exact")
    assert c.passed is False and c.reason == "1 of 2 elements differ"


def test_mismatch_fraction():
    ref = np.arange(100)
    out = ref.copy()
    out[0] = -1
    c = check(out, ref, mode="mismatch_fraction", threshold=0.01)
    assert c.passed is True and c.measured == 0.01
    out[1] = -1
    c = check(out, ref, mode="mismatch_fraction", threshold=0.01)
    assert c.passed is False and c.measured == 0.02
    assert c.reason == "mismatch fraction 0.02 > 0.01 (2 of 100 elements)"


def test_mismatch_fraction_is_taken_over_all_comparisons():
    acc = Accumulator("idx", OutputRule("mismatch_fraction", atol=0, rtol=0, threshold=0.01))
    ref = np.arange(100)
    bad = ref.copy()
    bad[:2] = -1
    acc.add(bad, ref)          # 2 of 100 alone would fail ...
    acc.add(ref, ref)          # ... but 2 of 200 overall passes
    c = acc.result()
    assert c.passed is True and c.measured == 0.01


def test_mismatch_fraction_on_floats_uses_the_or_rule():
    ref = np.ones(100, np.float32)
    out = ref.copy()
    out[0] = 2.0
    c = check(out, ref, mode="mismatch_fraction", threshold=0.01, atol=1e-3, rtol=1e-3)
    assert c.passed is True and c.measured == 0.01


def test_cosine_mode():
    ref = np.array([1.0, 0.0])
    c = check(np.array([1.0, 0.1]), ref, mode="cosine", threshold=0.99)
    assert c.passed is True and c.measured == pytest.approx(1 / np.sqrt(1.01))
    c = check(np.array([1.0, 1.0]), ref, mode="cosine", threshold=0.99)
    assert c.passed is False
    assert c.reason == "cosine similarity 0.707107 < 0.99"
    assert check(np.zeros(2), np.zeros(2), mode="cosine", threshold=0.99).passed is True
    assert check(np.zeros(2), ref, mode="cosine", threshold=0.99).measured == 0.0


def test_skip_mode():
    c = check(np.array([np.nan]), np.array([1.0, 2.0]), mode="skip")
    assert c.passed is True and c.reason is None and c.max_abs is None


# --- compare_outputs ----------------------------------------------------------------

def test_compare_outputs_missing_outputs_and_where():
    accs = {n: Accumulator(n, OutputRule("tolerance", atol=1e-3, rtol=1e-3)) for n in ("a", "b", "c")}
    compare_outputs({"a": np.ones(2), "c": np.ones(2)}, {"a": np.ones(2), "b": np.ones(2)}, accs,
                    allow_nan=False, error_stat="elemwise", where=" (sample 000)")
    assert accs["a"].result().passed is True
    assert accs["b"].result().reason == "output missing from the format's results (sample 000)"
    assert accs["c"].result().reason == "output missing from the reference (sample 000)"
    compare_outputs({"a": np.zeros(2)}, {"a": np.ones(2)}, {"a": accs["a"]}, allow_nan=False,
                    error_stat="elemwise", where=" (sample 001, batch 1)")
    assert accs["a"].result().reason.endswith("(Polygraphy rule, elemwise) (sample 001, batch 1)")
