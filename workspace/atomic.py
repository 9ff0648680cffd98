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
    """Open a temp file beside ``path``; on a clean exit it replaces ``path``. What stands at
    ``path`` must be a regular file or nothing: a device, a FIFO, a folder or a symbolic link
    (``--junit /dev/stdout``) is never replaced by a rename (one UserInputError line)."""
    import stat

    from navigator.errors import UserInputError

    path = Path(path)
    try:
        kind = os.lstat(path).st_mode
    except FileNotFoundError:
        kind = None
    except OSError as e:
        raise UserInputError(f"{path}: cannot write ({e.strerror or e})") from None
    if kind is not None and not stat.S_ISREG(kind):
        what = "a symbolic link" if stat.S_ISLNK(kind) else "a folder" if stat.S_ISDIR(kind) else "not a regular file"
        raise UserInputError(f"{path} is {what}; Navigator writes regular files only and never replaces it: "
                             "give another path")
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


def open_regular(path: str | os.PathLike, what: str | None = None) -> IO[bytes]:
    """A regular file opened for binary reading; a FIFO, a device or a socket is one UserInputError line
    (opened non-blocking and checked on the descriptor: it never blocks). FileNotFoundError passes."""
    import stat

    from navigator.errors import UserInputError

    what = what or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UserInputError(f"{what}: cannot read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(what)
        raise UserInputError(f"{what}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike, max_bytes: int, what: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is one UserInputError line.
    Opened non-blocking and checked on the open descriptor, so a FIFO or a device swapped in never
    blocks the read, and a file that grows past the cap is never read whole."""
    from navigator.errors import UserInputError

    what = what or str(path)
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise UserInputError(f"{what}: {size} bytes, larger than the {max_bytes} it may have")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserInputError(f"{what}: larger than the {max_bytes} bytes it may have")
    return data
