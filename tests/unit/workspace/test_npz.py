"""Tensors on disk as .npz: round trips, and no pickle ever."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from navigator.errors import UserInputError
from navigator.workspace import npz


def test_round_trip_keeps_dtypes_shapes_and_names(tmp_path):
    tensors = {
        "input:0": np.array([[0.5, -1.25], [65504.0, np.inf]], dtype=np.float16),
        "encoder/ids": np.array([[1, 2**40], [-3, 0]], dtype=np.int64),
        "mask": np.array([True, False, True]),
        "pixels": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
        "empty": np.zeros((0, 8), dtype=np.float32),
        "scalar": np.float64(2.5),
        # names np.savez(file, *args, allow_pickle=..., **kwds) would swallow
        "file": np.array([7], dtype=np.int32),
        "allow_pickle": np.array([1.5], dtype=np.float32),
    }
    path = tmp_path / "sub" / "000.npz"
    npz.save(path, tensors)
    loaded = npz.load(path)
    assert list(loaded) == list(tensors)
    for name, expected in tensors.items():
        assert loaded[name].dtype == np.asarray(expected).dtype, name
        assert loaded[name].shape == np.shape(expected), name
        np.testing.assert_array_equal(loaded[name], expected)


def test_saved_file_is_a_plain_uncompressed_npz(tmp_path):
    path = tmp_path / "a.npz"
    npz.save(path, {"x": np.arange(4)})
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["x.npy"]
        assert zf.getinfo("x.npy").compress_type == zipfile.ZIP_STORED
    with np.load(path, allow_pickle=False) as data:  # numpy reads it as its own
        np.testing.assert_array_equal(data["x"], np.arange(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz"]  # no temp file left


def test_load_folder_in_name_order(tmp_path):
    for i in (2, 0, 1):
        npz.save(tmp_path / f"{i:03d}.npz", {"i": np.array(i)})
    (tmp_path / "notes.txt").write_text("ignored")
    assert [int(b["i"]) for b in npz.load_folder(tmp_path)] == [0, 1, 2]


@pytest.mark.parametrize("value", [
    np.array([{"a": 1}, None], dtype=object),
    [1, "two", None],
    np.zeros(2, dtype=[("a", "i4"), ("b", "O")]),
])
def test_object_arrays_are_refused_on_save(tmp_path, value):
    path = tmp_path / "x.npz"
    with pytest.raises(UserInputError, match="tensor 'bad' has dtype object"):
        npz.save(path, {"ok": np.ones(2), "bad": value})
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_pickled_object_array_is_refused_on_load(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, x=np.array([{"payload": 1}, None], dtype=object))  # pickles the object array
    with pytest.raises(UserInputError) as info:
        npz.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "pickle" in str(info.value)


def test_truncated_npz_is_a_user_error(tmp_path):
    good = tmp_path / "good.npz"
    npz.save(good, {"x": np.arange(1000, dtype=np.float64)})
    data = good.read_bytes()
    for cut in (len(data) // 2, len(data) - 10):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(UserInputError, match="not a readable npz file") as info:
            npz.load(bad)
        assert "pickle" not in str(info.value)


def test_corrupt_member_is_a_user_error(tmp_path):
    path = tmp_path / "crc.npz"
    npz.save(path, {"x": np.arange(1000, dtype=np.float64)})
    data = bytearray(path.read_bytes())
    data[2000] ^= 0xFF  # inside the array data: the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(UserInputError, match="not a readable npz file.*CRC"):
        npz.load(path)


@pytest.mark.parametrize("content", [b"hello, this is not a zip file", b"", b"\x80\x04K\x01."])
def test_non_zip_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "x.npz"
    path.write_bytes(content)
    with pytest.raises(UserInputError) as info:
        npz.load(path)
    # numpy would call these "pickled data"; they are simply not npz files
    assert str(info.value) == f"{path}: not an npz file (not a zip archive)"


def test_plain_npy_file_is_a_user_error(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(3))
    with pytest.raises(UserInputError, match="not an npz file"):
        npz.load(path)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(UserInputError, match="no such file"):
        npz.load(tmp_path / "missing.npz")
    with pytest.raises(UserInputError, match="cannot read"):
        npz.load(tmp_path)
