"""Reading the pickles inside a PyTorch archive without running them.

``torch.export.load`` unpickles parts of a ``.pt2`` file (its sample inputs, pickled weights)
with Python's full unpickler: a pickle there can import and call anything (``os.system``).
:func:`check_archive` walks every pickle of the archive, nested ``torch.save`` archives
included, with :mod:`pickletools` (which decodes opcodes and executes nothing) and refuses a
global that torch's own ``weights_only`` loader would not allow, or one it cannot name.
Member sizes are checked against their declared sizes' caps before anything is read.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from pathlib import Path

from navigator.errors import UserInputError

MAX_MEMBERS = 100_000
MAX_PICKLE_BYTES = 256 << 20       # a pickle holds structure, not tensor data
MAX_NESTED_BYTES = 4 << 30         # a torch.save archive inside the archive
MAX_DEPTH = 3
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
_PUTS = {"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}


def allowed_globals() -> set[str]:
    """``module.name`` of every global torch's ``weights_only`` unpickler accepts here (its
    defaults and what the user registered with ``torch.serialization.add_safe_globals``)."""
    import torch
    from torch import _weights_only_unpickler as wou

    allowed = set(wou._get_allowed_globals())
    for item in torch.serialization.get_safe_globals():
        obj = item[0] if isinstance(item, tuple) else item
        allowed.add(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))}")
    return allowed


def pickle_globals(stream) -> list[str]:
    """Every global a pickle would import, as ``module.name``, read opcode by opcode (never run);
    a global whose name is not a plain string of the pickle (built on the stack) is ``?``."""
    found: list[str] = []
    memo: dict[int, str | None] = {}
    recent: list[str | None] = []          # values pushed lately: a string, or None for anything else
    for op, arg, _ in pickletools.genops(stream):
        name = op.name
        if name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            found.append(f"{module}.{attr}")
            recent.append(None)
        elif name == "STACK_GLOBAL":
            module, attr = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            found.append(f"{module}.{attr}" if isinstance(module, str) and isinstance(attr, str) else "?")
            recent.append(None)
        elif name in ("EXT1", "EXT2", "EXT4"):   # the copyreg extension registry: a global by number
            found.append("?")
            recent.append(None)
        elif name in _STRINGS:
            recent.append(arg if isinstance(arg, str) else None)
        elif name in _PUTS:
            index = len(memo) if name == "MEMOIZE" else int(arg)
            memo[index] = recent[-1] if recent else None
        elif name in _GETS:
            recent.append(memo.get(int(arg)))
        else:
            recent.append(None)
        del recent[:-4]
    return found


def check_archive(path: str | Path, what: str | None = None) -> None:
    """Refuse (UserInputError) an archive holding a pickle that would import what torch's
    ``weights_only`` loader refuses; nothing of it runs."""
    path = Path(path)
    what = what or str(path)
    try:
        with zipfile.ZipFile(path) as z:
            _check_zip(z, what, allowed_globals(), depth=0)
    except zipfile.BadZipFile as e:
        raise UserInputError(f"{what}: not a PyTorch archive ({e})") from None


def _check_zip(z: zipfile.ZipFile, what: str, allowed: set[str], depth: int) -> None:
    members = z.infolist()
    if len(members) > MAX_MEMBERS:
        raise UserInputError(f"{what}: {len(members)} members in the archive (at most {MAX_MEMBERS})")
    for info in members:
        name = info.filename
        if info.is_dir():
            continue
        if name.endswith(".pkl"):
            if info.file_size > MAX_PICKLE_BYTES:
                raise UserInputError(f"{what}: pickle {name} declares {info.file_size} bytes (at most "
                                     f"{MAX_PICKLE_BYTES}): refused unread")
            with z.open(info) as f:
                data = f.read(MAX_PICKLE_BYTES + 1)
            try:
                names = pickle_globals(io.BytesIO(data))
            except Exception as e:   # noqa: BLE001 - a pickle that does not decode is refused, not run
                raise UserInputError(f"{what}: pickle {name} does not decode ({type(e).__name__}: {e})") from None
            bad = sorted({n for n in names if n not in allowed})
            if bad:
                raise UserInputError(f"{what}: pickle {name} would import {', '.join(bad[:3])}, which torch's "
                                     "weights_only loader refuses: the file is not loaded (it could run code)")
            continue
        with z.open(info) as f:
            head = f.read(4)
        if head == b"PK\x03\x04":   # a torch.save archive inside (sample inputs, pickled weights)
            if depth >= MAX_DEPTH:
                raise UserInputError(f"{what}: archives nested deeper than {MAX_DEPTH} levels at {name}")
            if info.file_size > MAX_NESTED_BYTES:
                raise UserInputError(f"{what}: nested archive {name} declares {info.file_size} bytes (at most "
                                     f"{MAX_NESTED_BYTES})")
            with z.open(info) as f, zipfile.ZipFile(f) as inner:
                _check_zip(inner, f"{what} ({name})", allowed, depth + 1)
