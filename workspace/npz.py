"""Tensors on disk: ``{name: ndarray}`` as .npz files, never with pickle."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from navigator.errors import UserInputError
from navigator.workspace.atomic import write_bytes

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip
MAX_INFLATED = 64 << 20   # bytes a compressed member may inflate to (np.savez_compressed)
MAX_MEMBERS = 10_000


def save(path: str | os.PathLike, tensors: dict) -> None:
    """Write ``tensors`` atomically (uncompressed: loading must be fast).

    The members are written directly rather than through ``np.savez(**tensors)``,
    whose own keywords (``file``, ``allow_pickle``) would swallow tensors of
    those names.
    """
    import numpy as np

    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise UserInputError(f"tensor name {name!r} is not a string")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise UserInputError(f"tensor '{name}' has dtype object; only numeric and bool tensors can be stored")
        arrays[name] = arr
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)
    write_bytes(path, buf.getvalue())


def _check_headers(path: Path) -> None:
    """Each member's .npy header against the bytes the member holds: a header claiming a shape of
    2**38 x 8 must be one error line, not a 2 TiB allocation."""
    import numpy as np

    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS:
                raise UserInputError(f"{path}: {len(members)} members (at most {MAX_MEMBERS} tensors in one file)")
            for info in members:
                # sizes the zip declares are checked before a byte is inflated: a 2 MB file may claim 8 GiB
                if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                    raise UserInputError(f"{path}: member {info.filename} declares {info.file_size} bytes but "
                                         f"stores {info.compress_size}")
                if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_INFLATED:
                    raise UserInputError(
                        f"{path}: compressed member {info.filename} inflates to {info.file_size} bytes; at most "
                        f"{MAX_INFLATED >> 20} MiB are inflated (save large samples with np.savez, uncompressed)")
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = reader(member, max_header_size=10000)
                    if dtype.hasobject:
                        continue   # np.load refuses it with its own message (pickle)
                    need = dtype.itemsize
                    for d in shape:
                        need *= int(d)
                    if need > info.file_size:
                        raise UserInputError(f"{path}: member {info.filename} claims shape {list(shape)} "
                                             f"({need} bytes) but holds {info.file_size} bytes")
    except UserInputError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise UserInputError(f"{path}: not a readable npz file ({type(e).__name__}: {e})") from None


def load(path: str | os.PathLike) -> dict:
    """Read an npz file into ``{name: ndarray}``; refuses pickled object arrays."""
    import numpy as np

    import stat

    path = Path(path)
    try:
        kind = os.stat(path).st_mode
        if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):   # a FIFO would block, a device never end
            raise UserInputError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except OSError as e:
        raise UserInputError(f"{path}: cannot read ({e.strerror or e})") from None
    if magic not in _ZIP_MAGIC:
        # np.load would take it for a pickle and say so; it is just not an npz.
        raise UserInputError(f"{path}: not an npz file (not a zip archive)")
    _check_headers(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except ValueError as e:
        if "pickle" in str(e).lower():
            raise UserInputError(f"{path}: the npz holds pickled objects, which are refused for safety; "
                                 "save plain numeric arrays") from None
        raise UserInputError(f"{path}: not a readable npz file ({e})") from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError) as e:
        raise UserInputError(f"{path}: not a readable npz file ({type(e).__name__}: {e})") from None


def files_sha256(paths) -> str:
    """One digest of stored npz files (their names and bytes): what a resumed run checks before it
    trusts files an earlier run wrote (an edited reference or output file is not reused)."""
    import hashlib

    h = hashlib.sha256(b"navigator-npz-files-v1\n")
    for path in sorted(Path(p) for p in paths):
        h.update(path.name.encode("utf-8", "surrogateescape") + b"\0")
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def load_folder(folder: str | os.PathLike) -> list[dict]:
    """Every ``*.npz`` of ``folder`` in name order."""
    folder = Path(folder)
    return [load(p) for p in sorted(folder.glob("*.npz"))]
