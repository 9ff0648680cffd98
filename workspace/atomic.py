"""Atomic file writes: a temp file in the same folder, fsync, then rename.

A reader never sees a half-written file, and a failed write (a full disk, a
SIGKILL) leaves the previous version in place. The new file gets the mode of
the file it replaces, or the usual ``0o666 & ~umask`` for a new file (a bare
``mkstemp`` file is ``0o600``, which other users, e.g. a Triton container,
could not read).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


def _umask() -> int:
    try:  # Linux >= 4.7: read it without changing it (os.umask is process-wide, not thread-safe)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file beside ``path``; on a clean exit it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    binary = "b" in mode
    try:
        perms = path.stat().st_mode & 0o7777
    except OSError:
        perms = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            os.fchmod(f.fileno(), perms)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_text(path: str | os.PathLike, text: str) -> None:
    """UTF-8; a path that is not valid UTF-8 (held as surrogate escapes, PEP 383) is written back
    as its original bytes, so a reproduce script names the very file."""
    with atomic_open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)
