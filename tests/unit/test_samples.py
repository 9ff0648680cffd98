"""Unit tests for navigator.sources.samples: generated and user samples, shape profiles."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.sources import samples as S
from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec


def sig(*inputs):
    return ModelSignature(inputs=[TensorSpec(n, d, list(s)) for n, d, s in inputs],
                          outputs=[TensorSpec("out", "float32", [-1])])


SIG = sig(("ids", "int64", (-1, -1)), ("x", "float32", (-1, 3)), ("mask", "bool", (-1, -1)))
ONE = sig(("x", "float32", (-1, 4)))


def gen(signature=SIG, **kw):
    args = dict(shapes=None, count=2, value_ranges=None, dtypes=None, bounds={}, batch_dim=0)
    args.update(kw)
    return S.generate(signature, **args)


def err(fn, *args, **kw) -> str:
    with pytest.raises(UserInputError) as e:
        fn(*args, **kw)
    return str(e.value)


# --- generate ---------------------------------------------------------------

def test_generate_defaults():
    out = gen(count=3)
    assert len(out) == 3
    for s in out:
        assert list(s) == ["ids", "x", "mask"]
        assert s["ids"].shape == (8, 16) and s["ids"].dtype == np.int64
        assert s["x"].shape == (8, 3) and s["x"].dtype == np.float32
        assert s["mask"].shape == (8, 16) and s["mask"].dtype == np.bool_
        assert 0 <= s["ids"].min() and s["ids"].max() < 16
        assert 0.0 <= s["x"].min() and s["x"].max() < 1.0
    # deterministic by seed, different across seeds
    again = gen(count=3)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(out, again))
    assert not np.array_equal(gen(seed=1)[0]["x"], out[0]["x"])


def test_generate_ints_bounded_by_table_rows():
    s = gen(sig(("ids", "int64", (-1, -1))), bounds={"ids": 1000}, shapes=[{"ids": (64, 64)}])[0]
    assert s["ids"].min() >= 0 and s["ids"].max() < 1000
    assert s["ids"].max() >= 16          # really uses the table range, not [0, 16)


def test_generate_int_bound_clamped_to_dtype():
    s = gen(sig(("ids", "int8", (-1, -1))), bounds={"ids": 1000}, shapes=[{"ids": (64, 64)}])[0]
    assert s["ids"].dtype == np.int8
    assert s["ids"].min() >= 0          # no wrap-around into negative indices
    assert s["ids"].max() == 127


def test_generate_floats_stay_below_one_in_float16():
    s = gen(sig(("x", "float16", (-1, -1))), shapes=[{"x": (256, 256)}])[0]
    assert s["x"].dtype == np.float16
    assert float(s["x"].max()) < 1.0
    assert float(s["x"].min()) >= 0.0


def test_generate_value_ranges_override():
    s = gen(value_ranges={"ids": (5, 7), "x": (-2.0, -1.0)}, shapes=[{"ids": (32, 32)}])[0]
    assert set(np.unique(s["ids"]).tolist()) == {5, 6}
    assert -2.0 <= s["x"].min() and s["x"].max() < -1.0


def test_generate_dtypes_override():
    s = gen(dtypes={"ids": "int32", "x": "float16"})[0]
    assert s["ids"].dtype == np.int32
    assert s["x"].dtype == np.float16
    s = gen(dtypes={"x": "int32"}, shapes=[{"x": (64, 3)}])[0]    # ranges follow the generated dtype
    assert s["x"].dtype == np.int32 and s["x"].min() >= 0 and s["x"].max() == 15
    s = gen(dtypes={"x": "bfloat16"})[0]          # numpy has no bfloat16: float32 stands in
    assert s["x"].dtype == np.float32


def test_generate_other_dynamic_dims_and_batch_dim():
    s = gen(sig(("a", "float32", (2, -1, -1))), batch_dim=1)[0]
    assert s["a"].shape == (2, 8, 16)
    s = gen(sig(("a", "float32", (-1, -1))), batch_dim=None)[0]
    assert s["a"].shape == (16, 16)


def test_generate_shapes_override_one_per_profile():
    out = gen(ONE, shapes=[{"x": (2, 4)}, {"x": (5, 4)}], count=3)
    assert [s["x"].shape for s in out] == [(2, 4), (5, 4), (2, 4)]


def test_generate_shapes_errors():
    assert err(gen, ONE, shapes=[{"y": (2, 4)}]) == "--shapes: unknown input 'y'; the model's inputs are 'x'"
    assert err(gen, ONE, shapes=[{"x": (2, 4, 1)}]) == "--shapes: 'x' given 3 dims, the model has 2 ([-1, 4])"
    assert err(gen, ONE, shapes=[{"x": (2, 5)}]) == "--shapes: 'x' dim 1 is 5, the model fixes it at 4"


def test_generate_unknown_names():
    assert err(gen, value_ranges={"nope": (0, 1)}) == (
        "--value-ranges: unknown input 'nope'; the model's inputs are 'ids', 'x', 'mask'")
    assert err(gen, dtypes={"nope": "int32"}) == (
        "--dtypes: unknown input 'nope'; the model's inputs are 'ids', 'x', 'mask'")


# --- from_iterable ----------------------------------------------------------

def _batch(n=2):
    return {"ids": np.zeros((n, 5), np.int64), "x": np.zeros((n, 3), np.float32), "mask": np.ones((n, 5), bool)}


def test_from_iterable_dicts_tuples_and_single_array():
    out = S.from_iterable([_batch(2), _batch(3)], SIG, count=10, batch_dim=0)
    assert [s["ids"].shape for s in out] == [(2, 5), (3, 5)]
    b = _batch()
    out = S.from_iterable([(b["ids"], b["x"], b["mask"])], SIG, count=10, batch_dim=0)
    assert list(out[0]) == ["ids", "x", "mask"] and out[0]["x"].shape == (2, 3)
    out = S.from_iterable([np.ones((2, 4), np.float32)], ONE, count=10, batch_dim=0)
    assert out[0]["x"].shape == (2, 4)
    assert err(S.from_iterable, [np.ones((2, 4))], SIG, count=1, batch_dim=0) == (
        "sample 0: one tensor given for a model with 3 inputs (ids, x, mask); give a dict or a tuple")
    assert err(S.from_iterable, [(b["ids"],)], SIG, count=1, batch_dim=0) == (
        "sample 0: a batch of 1 tensors for a model with 3 inputs (ids, x, mask)")


def test_from_iterable_generator_capped_by_count():
    pulled = []

    def batches():
        for i in range(100):
            pulled.append(i)
            yield np.full((1, 4), i, np.float32)

    out = S.from_iterable(batches(), ONE, count=3, batch_dim=0)
    assert [float(s["x"][0, 0]) for s in out] == [0.0, 1.0, 2.0]
    assert pulled == [0, 1, 2]      # no extra batch pulled from a DataLoader


def test_from_iterable_empty_and_not_iterable():
    assert err(S.from_iterable, [], ONE, count=3, batch_dim=0) == "samples: the iterable gave no batches"
    assert err(S.from_iterable, 5, ONE, count=3, batch_dim=0) == "samples: expected an iterable of batches, got int"
    assert err(S.from_iterable, "dir", ONE, count=3, batch_dim=0).startswith("samples: a path was given")


def test_from_iterable_wrong_names():
    b = _batch()
    b["idz"] = b.pop("ids")
    assert err(S.from_iterable, [b], SIG, count=1, batch_dim=0) == (
        "sample 0: input names do not match the model (missing 'ids'; unknown 'idz'); "
        "the model's inputs are 'ids', 'x', 'mask'")


def test_from_iterable_wrong_rank_and_static_dim_and_zero_batch():
    assert err(S.from_iterable, [np.ones((2, 4, 1), np.float32)], ONE, count=1, batch_dim=0) == (
        "sample 0: input 'x' has 3 dims [2, 4, 1], the model expects 2 [-1, 4]")
    assert err(S.from_iterable, [np.ones((2, 5), np.float32)], ONE, count=1, batch_dim=0) == (
        "sample 0: input 'x' has size 5 at dim 1, the model expects 4 (shape [-1, 4])")
    assert err(S.from_iterable, [np.ones((0, 4), np.float32)], ONE, count=1, batch_dim=0) == (
        "sample 0: input 'x' has a zero-size dim 0 (shape [0, 4]); give at least one element")


def test_from_iterable_batch_sizes_disagree():
    b = _batch()
    b["x"] = np.zeros((3, 3), np.float32)
    assert err(S.from_iterable, [b], SIG, count=1, batch_dim=0) == (
        "sample 0: inputs disagree on the batch size at dim 0: {'ids': 2, 'x': 3, 'mask': 2}")


def test_from_iterable_dtype_casting():
    b = _batch()
    b["ids"] = b["ids"].astype(np.int32)
    out = S.from_iterable([b], SIG, count=1, batch_dim=0)
    assert out[0]["ids"].dtype == np.int64
    b = _batch()
    b["x"] = b["x"].astype(np.float64)
    assert S.from_iterable([b], SIG, count=1, batch_dim=0)[0]["x"].dtype == np.float32
    b = _batch()
    b["ids"] = b["ids"].astype(np.float32)
    assert err(S.from_iterable, [b], SIG, count=1, batch_dim=0) == (
        "sample 0: input 'ids' has dtype float32, the model expects int64")
    small = sig(("ids", "int8", (-1,)))
    assert err(S.from_iterable, [np.array([1, 300])], small, count=1, batch_dim=0) == (
        "sample 0: input 'ids' has values outside int8")


def test_from_iterable_object_array_refused():
    arr = np.array([[1.0, None, 2.0, 3.0]], dtype=object)
    assert err(S.from_iterable, [arr], ONE, count=1, batch_dim=0) == (
        "sample 0, input 'x': expected a numeric or bool tensor, got ndarray of dtype object")


# --- from_folder -------------------------------------------------------------

def test_from_folder(tmp_path):
    for i in range(3):
        np.savez(tmp_path / f"{i:03d}.npz", x=np.full((i + 1, 4), i, np.float64))
    out = S.from_folder(tmp_path, ONE, count=None, batch_dim=0)
    assert [s["x"].shape for s in out] == [(1, 4), (2, 4), (3, 4)]
    assert out[2]["x"].dtype == np.float32 and float(out[2]["x"][0, 0]) == 2.0
    assert len(S.from_folder(tmp_path, ONE, count=2, batch_dim=0)) == 2


def test_from_folder_errors(tmp_path):
    assert err(S.from_folder, tmp_path, ONE, count=None, batch_dim=0) == f"--samples {tmp_path}: no .npz files in it"
    missing = tmp_path / "nope"
    assert err(S.from_folder, missing, ONE, count=None, batch_dim=0) == f"--samples {missing}: no such folder"
    np.savez(tmp_path / "a.npz", y=np.zeros((1, 4), np.float32))
    assert err(S.from_folder, tmp_path, ONE, count=None, batch_dim=0) == (
        f"{tmp_path / 'a.npz'}: input names do not match the model (missing 'x'; unknown 'y'); "
        "the model's inputs are 'x'")


# --- derive_profile / check_profile_covers ----------------------------------

def test_derive_profile():
    s2 = sig(("ids", "int64", (-1, -1)), ("x", "float32", (-1, 3)))
    batches = [{"ids": np.zeros((b, n), np.int64), "x": np.zeros((b, 3), np.float32)}
               for b, n in ((4, 10), (8, 20), (8, 12))]
    profile, warnings = S.derive_profile(s2, batches, batch_dim=0, max_batch_size=64)
    assert profile == {"ids": {"min": [1, 10], "opt": [8, 10], "max": [64, 20]},
                       "x": {"min": [1, 3], "opt": [8, 3], "max": [64, 3]}}
    assert warnings == []
    profile, _ = S.derive_profile(s2, batches, batch_dim=0, max_batch_size=4)
    assert profile["ids"]["max"] == [8, 20]     # max(max_batch_size, largest sample batch)


def test_derive_profile_warns_on_constant_dynamic_dim():
    s1 = sig(("ids", "int64", (-1, -1)))
    batches = [{"ids": np.zeros((b, 16), np.int64)} for b in (1, 2)]
    profile, warnings = S.derive_profile(s1, batches, batch_dim=0, max_batch_size=8)
    assert profile == {"ids": {"min": [1, 16], "opt": [1, 16], "max": [8, 16]}}
    assert warnings == [
        "input 'ids' dim 1 is dynamic in the model but 16 in every sample: an engine built from this profile "
        "accepts only 16; give --min-shapes/--max-shapes or varied samples"]


def test_check_profile_covers():
    batches = [{"x": np.zeros((8, 4), np.float32)}]
    ok = {"x": {"min": [1, 4], "opt": [8, 4], "max": [16, 4]}}
    S.check_profile_covers(ok, ONE, batches)
    assert err(S.check_profile_covers, {"x": ok["x"], "y": ok["x"]}, ONE, batches) == (
        "shape profile names unknown input 'y'; the model's inputs are 'x'")
    assert err(S.check_profile_covers, {}, ONE, batches) == (
        "shape profile misses input 'x'; every dynamic input needs min/opt/max shapes")
    assert err(S.check_profile_covers, {"x": {"min": [1], "opt": [8], "max": [16]}}, ONE, batches) == (
        "shape profile for 'x': min has 1 dims, the model has 2")
    assert err(S.check_profile_covers, {"x": {"min": [1, 2], "opt": [8, 4], "max": [16, 4]}}, ONE, batches) == (
        "shape profile for 'x': dim 1 is static (4) in the model but not in the profile")
    assert err(S.check_profile_covers, {"x": {"min": [1, 4], "opt": [2, 4], "max": [4, 4]}}, ONE, batches) == (
        "sample 0: input 'x' shape [8, 4] lies outside the shape profile (min [1, 4], max [4, 4])")


def test_samples_sha256_changes_with_values():
    batches = [{"x": np.zeros((2, 4), np.float32)}]
    h = S.samples_sha256(batches)
    assert len(h) == 64 and h == S.samples_sha256([{"x": np.zeros((2, 4), np.float32)}])
    changed = [{"x": np.zeros((2, 4), np.float32)}]
    changed[0]["x"][1, 3] = 1e-7
    assert S.samples_sha256(changed) != h
    assert S.samples_sha256([{"x": np.zeros((2, 4), np.float64)}]) != h      # dtype counts
    assert S.samples_sha256([{"x": np.zeros((4, 2), np.float32)}]) != h      # shape counts


def test_a_corner_from_given_samples_keeps_their_structure():
    """Cropped and repeated along each axis: a right-padded mask still starts every row with a
    one (random 0/1 would give a causal model fully masked rows), ids stay the ones given."""
    import numpy as np

    from navigator.sources.samples import resize_sample

    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=np.int64)
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], dtype=np.int64)
    big = resize_sample({"ids": ids, "mask": mask}, {"ids": (3, 6), "mask": (3, 6)})
    assert big["mask"].tolist() == [[1, 1, 1, 0, 1, 1], [1, 1, 0, 0, 1, 1], [1, 1, 1, 0, 1, 1]]
    assert set(big["ids"].ravel()) <= set(ids.ravel())
    small = resize_sample({"ids": ids, "mask": mask}, {"ids": (1, 2), "mask": (1, 2)})
    assert small["mask"].tolist() == [[1, 1]] and small["ids"].tolist() == [[5, 6]]
    assert big["ids"].dtype == ids.dtype and big["ids"].flags.c_contiguous
