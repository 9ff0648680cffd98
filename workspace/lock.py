"""An exclusive ``fcntl.flock`` on ``navigator.lock`` while a run is active.

The lock dies with its process (even SIGKILL), so a stale lock file never
blocks: only a live run does.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from navigator.errors import UserInputError, WorkspaceBusy


class WorkspaceLock:
    """``what``: how the busy message names the locked thing (default: the workspace, the lock's folder).
    ``remove``: delete the lock file on release (locks beside a user's folder leave nothing behind);
    acquiring then checks that the locked file is still the one at ``path``, so a run that opened
    it just before another removed it cannot hold a lock nobody else sees."""

    def __init__(self, path: str | os.PathLike, what: str | None = None, *, remove: bool = False):
        self.path = Path(path)
        self.what = what
        self.remove = remove
        self._fd: int | None = None

    def acquire(self) -> "WorkspaceLock":
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: this WorkspaceLock is already held")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # os.open's descriptors are not inherited (PEP 446): worker subprocesses never hold the lock.
        # O_NOFOLLOW: a navigator.lock replaced by a symlink must not get the pid written into its target.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UserInputError(f"{self.path} is a symbolic link; Navigator never follows links inside a "
                                     "workspace", hint="remove the link") from None
            if e.errno == errno.EISDIR:
                raise UserInputError(f"{self.path} should be a lock file but is a folder",
                                     hint="move it away") from None
            raise UserInputError(f"{self.path}: cannot create the lock file ({e.strerror or e})",
                                 hint="is the folder writable, and a real folder?") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            what = self.what or f"workspace {self.path.parent}"
            raise WorkspaceBusy(f"{what} is in use by another navigator run (pid {holder})",
                                hint="wait for it to finish, or use another --workdir") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            if self.remove and not self._still_linked(fd):   # removed by its last holder meanwhile: again
                os.close(fd)
                return self.acquire()
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)  # closing drops the flock too
            raise
        self._fd = fd
        return self

    def _still_linked(self, fd: int) -> bool:
        try:
            here = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            if self.remove:   # unlinked while still locked: a newcomer creates a new file (see _still_linked)
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "WorkspaceLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def remove_if_free(path: str | os.PathLike) -> None:
    """Remove a ``remove=True`` lock file that nobody holds (its run was killed before releasing it);
    one held, or anything but a regular file, is left alone."""
    try:
        lock = WorkspaceLock(path, remove=True)
        if Path(path).is_symlink() or not Path(path).is_file():
            return
        lock.acquire()
    except (UserInputError, OSError):
        return
    lock.release()
