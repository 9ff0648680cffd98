"""Sample batches: taken from the user (an iterable, a DataLoader, an npz
folder) or generated from the signature; and the shape profiles derived
from them.

A sample is ``{input name: ndarray}`` holding one batch.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec

log = logging.getLogger(__name__)

DEFAULT_BATCH = 8
DEFAULT_DYNAMIC = 16
DEFAULT_INT_HIGH = 16
DEFAULT_GENERATED = 2     # batches generated when none are given
DEFAULT_TAKEN = 10        # batches taken from an iterable or DataLoader unless --sample-count
GENERATED_MAX_BYTES = 1 << 30   # one generated batch; every format runs it, and it is stored as npz


def as_array(value: Any, where: str):
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # tf.Tensor
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biufc":
        raise UserInputError(f"{where}: expected a numeric or bool tensor, got {type(value).__name__} "
                             f"of dtype {arr.dtype}")
    return arr


def normalize_batch(batch: Any, signature: ModelSignature, where: str) -> dict:
    """One user batch (dict, tuple/list, or one tensor) as ``{input name: ndarray}``."""
    names = signature.input_names
    if isinstance(batch, dict):
        items = {str(k): v for k, v in batch.items()}
    elif isinstance(batch, (tuple, list)):
        if len(batch) != len(names):
            raise UserInputError(f"{where}: a batch of {len(batch)} tensors for a model with {len(names)} inputs "
                                 f"({', '.join(names)})")
        items = dict(zip(names, batch))
    else:
        if len(names) != 1:
            raise UserInputError(f"{where}: one tensor given for a model with {len(names)} inputs "
                                 f"({', '.join(names)}); give a dict or a tuple")
        items = {names[0]: batch}
    return {name: as_array(value, f"{where}, input '{name}'") for name, value in items.items()}


def check_sample(sample: dict, signature: ModelSignature, where: str, batch_dim: int | None) -> dict:
    """Names, ranks, static dims and dtypes of one sample against the signature;
    returns the sample with arrays cast to the model's dtypes where that is safe."""
    import numpy as np

    expected = signature.input_names
    missing = [n for n in expected if n not in sample]
    extra = [n for n in sample if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(repr(n) for n in missing)}")
        if extra:
            parts.append(f"unknown {', '.join(repr(n) for n in extra)}")
        raise UserInputError(f"{where}: input names do not match the model ({'; '.join(parts)}); "
                             f"the model's inputs are {', '.join(repr(n) for n in expected)}")
    out = {}
    for spec in signature.inputs:
        arr = sample[spec.name]
        if arr.ndim != spec.rank:
            raise UserInputError(f"{where}: input '{spec.name}' has {arr.ndim} dims {list(arr.shape)}, "
                                 f"the model expects {spec.rank} {spec.shape}")
        for axis, (got, want) in enumerate(zip(arr.shape, spec.shape)):
            if want > 0 and got != want:
                raise UserInputError(f"{where}: input '{spec.name}' has size {got} at dim {axis}, "
                                     f"the model expects {want} (shape {spec.shape})")
            if got == 0:
                raise UserInputError(f"{where}: input '{spec.name}' has a zero-size dim {axis} "
                                     f"(shape {list(arr.shape)}); give at least one element")
        want_dtype = _np_dtype(spec.dtype)
        if arr.dtype != want_dtype:
            if want_dtype is None:
                pass
            elif np.can_cast(arr.dtype, want_dtype, casting="same_kind") or (
                    arr.dtype.kind in "iub" and want_dtype.kind in "iu"):
                if arr.dtype.kind in "iu" and want_dtype.kind in "iu" and arr.size:
                    info = np.iinfo(want_dtype)
                    if arr.min() < info.min or arr.max() > info.max:
                        raise UserInputError(f"{where}: input '{spec.name}' has values outside {want_dtype}")
                if arr.dtype.kind == "f" and want_dtype.kind == "f" and arr.size:
                    finite = np.isfinite(arr)
                    big = np.abs(arr[finite]).max(initial=0.0)
                    if big > np.finfo(want_dtype).max:   # rounding would make inf of finite values
                        raise UserInputError(f"{where}: input '{spec.name}' has values outside {want_dtype} "
                                             f"(|x| up to {big:.3g}, {want_dtype} ends at "
                                             f"{float(np.finfo(want_dtype).max):.3g})")
                arr = arr.astype(want_dtype)
            else:
                raise UserInputError(f"{where}: input '{spec.name}' has dtype {arr.dtype}, the model expects "
                                     f"{spec.dtype}")
        out[spec.name] = np.require(arr, requirements="C")   # ascontiguousarray makes a scalar 1-d
    if batch_dim is not None:
        sizes = {n: a.shape[batch_dim] for n, a in out.items()}
        if len(set(sizes.values())) > 1:
            raise UserInputError(f"{where}: inputs disagree on the batch size at dim {batch_dim}: {sizes}")
    return out


def _np_dtype(name: str):
    import numpy as np

    if name == "bfloat16":
        return None  # numpy has no bfloat16: accept what is given
    return np.dtype(name)


def iterate(batches: Any):
    """An iterator over user batches (a list, generator or DataLoader); a path or a non-iterable is
    one error line."""
    if isinstance(batches, (str, bytes, os.PathLike)):
        raise UserInputError("samples: a path was given where batches were expected; "
                             "a folder of .npz files goes in --samples")
    try:
        return iter(batches)
    except TypeError:
        raise UserInputError(f"samples: expected an iterable of batches, got {type(batches).__name__}") from None


def from_iterable(batches: Iterable, signature: ModelSignature, *, count: int, batch_dim: int | None) -> list[dict]:
    """Up to ``count`` batches from a list, generator or DataLoader."""
    iterator = iterate(batches)
    out = []
    # islice stops before pulling batch count+1: a DataLoader may be slow or endless
    for i, batch in enumerate(itertools.islice(iterator, max(0, count))):
        sample = normalize_batch(batch, signature, f"sample {i}")
        out.append(check_sample(sample, signature, f"sample {i}", batch_dim))
    if not out:
        raise UserInputError("samples: the iterable gave no batches")
    return out


def from_folder(folder: str | os.PathLike, signature: ModelSignature, *, count: int | None,
                batch_dim: int | None) -> list[dict]:
    """Batches stored as ``*.npz`` (keys = input names) in ``folder``, name order."""
    from navigator.workspace import npz

    folder = Path(folder)
    if not folder.is_dir():
        raise UserInputError(f"--samples {folder}: no such folder")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise UserInputError(f"--samples {folder}: no .npz files in it")
    files = files[:count or DEFAULT_TAKEN]   # prepare says so when files are left (folder_note)
    return [check_sample(npz.load(p), signature, str(p), batch_dim) for p in files]


def folder_note(folder: str | os.PathLike, count: int | None) -> str | None:
    """The warning for a --samples folder holding more files than are taken, or None."""
    total = sum(1 for _ in Path(folder).glob("*.npz"))
    if count or total <= DEFAULT_TAKEN:
        return None
    return f"--samples {folder}: taking the first {DEFAULT_TAKEN} of {total} files (--sample-count takes more)"


IMAGE_SIZE = 224          # a dynamic height or width of an image input: detectors and OCR nets need
                          # multiples of 32 and more than a few pixels (16x16 broke YOLOv8's Resize)


def image_axes(spec: TensorSpec, batch_dim: int | None) -> set[int]:
    """The spatial axes of an image-like input: rank 4, floats, with 1, 3 or 4 channels fixed at
    axis 1 (NCHW) or 3 (NHWC); empty for anything else."""
    if spec.rank != 4 or not spec.dtype.startswith(("float", "bfloat")) or batch_dim not in (0, None):
        return set()
    for channels, spatial in ((1, {2, 3}), (3, {1, 2})):
        if spec.shape[channels] in (1, 3, 4):
            return spatial
    return set()


def sample_shapes(signature: ModelSignature, shapes: dict | None, batch_dim: int | None) -> dict[str, tuple]:
    """The shape of each input for generated samples: ``shapes`` where given,
    else the model's static dims, the batch dim 8, an image's dynamic height and width 224
    (:func:`image_axes`) and other dynamic dims 16."""
    shapes = shapes or {}
    unknown = [n for n in shapes if n not in signature.input_names]
    if unknown:
        raise UserInputError(f"--shapes: unknown input {unknown[0]!r}; the model's inputs are "
                             f"{', '.join(repr(n) for n in signature.input_names)}")
    out = {}
    for spec in signature.inputs:
        if spec.name in shapes:
            shape = tuple(shapes[spec.name])
            if len(shape) != spec.rank:
                raise UserInputError(f"--shapes: '{spec.name}' given {len(shape)} dims, the model has {spec.rank} "
                                     f"({spec.shape})")
            for axis, (got, want) in enumerate(zip(shape, spec.shape)):
                if want > 0 and got != want:
                    raise UserInputError(f"--shapes: '{spec.name}' dim {axis} is {got}, the model fixes it at {want}")
        else:
            spatial = image_axes(spec, batch_dim)
            shape = tuple(d if d > 0 else (DEFAULT_BATCH if axis == batch_dim else
                                           IMAGE_SIZE if axis in spatial else DEFAULT_DYNAMIC)
                          for axis, d in enumerate(spec.shape))
        out[spec.name] = shape
    return out


def value_range(spec: TensorSpec, value_ranges: dict, bounds: dict, dtype: str | None = None) -> tuple[float, float]:
    """[low, high) of the values generated for ``spec``; ``dtype`` is the generated
    dtype when ``--dtypes`` overrides the model's."""
    if spec.name in value_ranges:
        lo, hi = value_ranges[spec.name]
        return float(lo), float(hi)
    dtype = dtype or spec.dtype
    if dtype == "bool":
        return 0.0, 2.0
    if dtype.startswith(("int", "uint")):
        return 0.0, float(bounds.get(spec.name, DEFAULT_INT_HIGH))
    return 0.0, 1.0


def _check_size(shape_map: dict[str, tuple], signature: ModelSignature, dtypes: dict) -> None:
    """A generated batch above GENERATED_MAX_BYTES is refused before numpy allocates it."""
    import numpy as np

    total = 0
    for spec in signature.inputs:
        name = dtypes.get(spec.name, spec.dtype)
        n = np.dtype("float32" if name == "bfloat16" else name).itemsize
        for d in shape_map[spec.name]:
            n *= int(d)
        total += n
    if total > GENERATED_MAX_BYTES:
        shapes = ", ".join(f"{k}:{'x'.join(str(d) for d in v)}" for k, v in shape_map.items())
        raise UserInputError(f"--shapes {shapes}: one generated batch would take {total / 2**30:.3g} GiB, more than "
                             f"the {GENERATED_MAX_BYTES >> 30} GiB allowed; give smaller shapes or --samples")


def generate(signature: ModelSignature, *, shapes: list[dict] | None, count: int, value_ranges: dict | None,
             dtypes: dict | None, bounds: dict, batch_dim: int | None, seed: int = 0) -> list[dict]:
    """``count`` random batches: floats uniform in [0, 1), integers in [0, n) where n is
    the row count of the table they index (``bounds``) else [0, 16), bool 0/1;
    ``value_ranges`` overrides, ``dtypes`` overrides dtypes where the model leaves them open."""
    import numpy as np

    value_ranges = value_ranges or {}
    dtypes = dtypes or {}
    for option, given in (("--value-ranges", value_ranges), ("--dtypes", dtypes)):
        unknown = [n for n in given if n not in signature.input_names]
        if unknown:
            raise UserInputError(f"{option}: unknown input {unknown[0]!r}; the model's inputs are "
                                 f"{', '.join(repr(n) for n in signature.input_names)}")
    rng = np.random.default_rng(seed)
    shape_sets = shapes or [None]
    out = []
    for i in range(count):
        shape_map = sample_shapes(signature, shape_sets[i % len(shape_sets)], batch_dim)
        _check_size(shape_map, signature, dtypes)
        sample = {}
        for spec in signature.inputs:
            name = dtypes.get(spec.name, spec.dtype)
            # numpy has no bfloat16 of its own (ml_dtypes may register one): float32 stands in
            dtype = np.dtype("float32" if name == "bfloat16" else name)
            lo, hi = value_range(spec, value_ranges, bounds, dtype.name)
            shape = shape_map[spec.name]
            if dtype.kind == "b":
                arr = rng.integers(0, 2, size=shape).astype(bool)
            elif dtype.kind in "iu":
                info = np.iinfo(dtype)
                # clamp to the dtype so that astype cannot wrap (int8 and a 1000-row table)
                ilo = min(max(int(np.ceil(lo)), int(info.min)), int(info.max))
                ihi = min(max(int(np.ceil(hi)), ilo + 1), int(info.max) + 1)
                arr = rng.integers(ilo, ihi, size=shape).astype(dtype)
            else:
                arr = (lo + (hi - lo) * rng.random(size=shape)).astype(dtype)
                # rounding to float16/float32 may reach hi: keep the range half-open [lo, hi)
                if dtype.kind == "f":
                    top = np.nextafter(np.asarray(hi, dtype=dtype), np.asarray(lo, dtype=dtype))
                    if np.isfinite(top) and top >= lo:
                        arr = np.minimum(arr, top)
            sample[spec.name] = arr
        out.append(sample)
    return out


def samples_sha256(samples: list[dict]) -> str:
    h = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            arr = sample[name]
            h.update(name.encode())
            h.update(str(arr.dtype).encode())
            h.update(repr(arr.shape).encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def derive_profile(signature: ModelSignature, samples: list[dict], *, batch_dim: int | None,
                   max_batch_size: int) -> tuple[dict, list[str]]:
    """A shape profile {name: {min, opt, max}} covering the samples, and warnings.

    Static dims are fixed; the batch dim runs from 1 to ``max_batch_size`` (or the
    largest sample batch) with opt at the commonest sample batch; other dynamic
    dims span what the samples show, opt at the commonest value. A dynamic dim
    that never varies in the samples gives a warning: an engine built from this
    profile rejects other sizes."""
    profile: dict = {}
    warnings: list[str] = []
    for spec in signature.inputs:
        lo, opt, hi = [], [], []
        for axis, dim in enumerate(spec.shape):
            seen = [s[spec.name].shape[axis] for s in samples]
            if dim > 0:
                lo.append(dim), opt.append(dim), hi.append(dim)
            elif axis == batch_dim:
                lo.append(1)
                opt.append(Counter(seen).most_common(1)[0][0])
                hi.append(max(max(seen), max_batch_size))
            else:
                lo.append(min(seen))
                opt.append(Counter(seen).most_common(1)[0][0])
                hi.append(max(seen))
                if len(set(seen)) == 1:
                    warnings.append(f"input '{spec.name}' dim {axis} is dynamic in the model but {seen[0]} in every "
                                    f"sample: an engine built from this profile accepts only {seen[0]}; give "
                                    f"--min-shapes/--max-shapes or varied samples")
        profile[spec.name] = {"min": lo, "opt": opt, "max": hi}
    return profile, warnings


def check_profile_covers(profile: dict, signature: ModelSignature, samples: list[dict]) -> None:
    """Every input named, static dims respected, and every sample inside the profile."""
    names = set(signature.input_names)
    missing = names - set(profile)
    unknown = set(profile) - names
    if unknown:
        raise UserInputError(f"shape profile names unknown input {sorted(unknown)[0]!r}; the model's inputs are "
                             f"{', '.join(repr(n) for n in signature.input_names)}")
    if missing:
        raise UserInputError(f"shape profile misses input {sorted(missing)[0]!r}; every dynamic input needs "
                             "min/opt/max shapes")
    for spec in signature.inputs:
        p = profile[spec.name]
        for key in ("min", "opt", "max"):
            if len(p[key]) != spec.rank:
                raise UserInputError(f"shape profile for '{spec.name}': {key} has {len(p[key])} dims, the model "
                                     f"has {spec.rank}")
        for axis, dim in enumerate(spec.shape):
            if dim > 0 and not (p["min"][axis] == p["opt"][axis] == p["max"][axis] == dim):
                raise UserInputError(f"shape profile for '{spec.name}': dim {axis} is static ({dim}) in the model "
                                     "but not in the profile")
    for i, s in enumerate(samples):
        for spec in signature.inputs:
            shape = s[spec.name].shape
            p = profile[spec.name]
            if any(not (lo <= d <= hi) for lo, d, hi in zip(p["min"], shape, p["max"])):
                raise UserInputError(f"sample {i}: input '{spec.name}' shape {list(shape)} lies outside the shape "
                                     f"profile (min {p['min']}, max {p['max']})")


CORNER_COST = 8     # a corner sample holds at most this many times the elements of the largest given sample


def _elements(shapes: dict) -> int:
    total = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def resize_sample(sample: dict, shape: dict[str, tuple]) -> dict:
    """``sample`` brought to ``shape`` by cropping or repeating it along each axis, so a corner
    keeps the structure of the user's data (padding masks that start with ones, token ids of the
    vocabulary's real range, image statistics): random values there would make, for instance, a
    causal model's fully masked rows, whose outputs no two runtimes define alike."""
    import numpy as np

    out = {}
    for name, arr in sample.items():
        for axis, n in enumerate(shape[name]):
            arr = np.take(arr, np.arange(int(n)) % arr.shape[axis], axis=axis)
        out[name] = np.require(arr, requirements="C")   # ascontiguousarray makes a scalar 1-d
    return out


def corner_shapes(signature: ModelSignature, profiles: list[dict], samples: list[dict],
                  batch_dim: int | None, *, cost: int = CORNER_COST) -> list[dict[str, tuple]]:
    """Input shapes at each shape profile's min and max corner that the samples do not already
    cover, so verification exercises every dynamic dim at its extremes.

    A corner is left out when the samples hold its non-batch dims at a batch size at least as
    large (verification also cuts every sample to batch 1). The max corner's batch is halved until
    its elements are at most ``cost`` times the largest sample's, so its cost stays bounded."""
    import math

    seen = [{n: tuple(a.shape) for n, a in s.items()} for s in samples]
    biggest = max((_elements(s) for s in seen), default=1)

    def rest(shape: dict) -> dict:
        return {n: tuple(d for a, d in enumerate(dims) if a != batch_dim) for n, dims in shape.items()}

    def batch(shape: dict) -> int:
        return max(dims[batch_dim] for dims in shape.values()) if batch_dim is not None else 1

    out: list[dict[str, tuple]] = []
    for profile in profiles:
        for corner in ("min", "max"):
            shape = {spec.name: tuple(int(d) for d in profile[spec.name][corner]) for spec in signature.inputs
                     if spec.name in profile}
            if len(shape) != len(signature.inputs):
                continue
            if batch_dim is not None and corner == "max":
                b = batch(shape)
                while b > 1 and _elements(shape) > cost * biggest:
                    b = math.ceil(b / 2)
                    shape = {n: tuple(b if a == batch_dim else d for a, d in enumerate(dims))
                             for n, dims in shape.items()}
            covered = any(rest(s) == rest(shape) and batch(s) >= batch(shape) for s in seen + out)
            if not covered:
                out.append(shape)
    return out
