"""Tensors on disk: ``{name: ndarray}`` as .npz files, never with pickle."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from navigator.errors import UserInputError
from navigator.workspace.atomic import write_bytes


def save(path: str | os.PathLike, tensors: dict) -> None:
    """Write ``tensors`` atomically (uncompressed: loading must be fast)."""
    import numpy as np

    buf = io.BytesIO()
    arrays = {}
    for name, value in tensors.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise UserInputError(f"tensor '{name}' has dtype object; only numeric and bool tensors can be stored")
        arrays[name] = arr
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


def load(path: str | os.PathLike) -> dict:
    """Read an npz file into ``{name: ndarray}``; refuses pickled object arrays."""
    import numpy as np

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except ValueError as e:
        if "pickle" in str(e).lower():
            raise UserInputError(f"{path}: the npz holds pickled objects, which are refused for safety; "
                                 "save plain numeric arrays") from None
        raise UserInputError(f"{path}: not a readable npz file ({e})") from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError) as e:
        raise UserInputError(f"{path}: not a readable npz file ({type(e).__name__}: {e})") from None


def load_folder(folder: str | os.PathLike) -> list[dict]:
    """Every ``*.npz`` of ``folder`` in name order."""
    folder = Path(folder)
    return [load(p) for p in sorted(folder.glob("*.npz"))]
