"""navigator.lock: an exclusive flock while a run is active; it dies with its process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from navigator.errors import UserInputError, WorkspaceBusy
from navigator.workspace.lock import WorkspaceLock

CHILD = textwrap.dedent("""
    import sys, time
    from navigator.workspace.lock import WorkspaceLock
    lock = WorkspaceLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(60)
""")


def test_lock_writes_the_pid_and_releases(tmp_path):
    path = tmp_path / "ws" / "navigator.lock"
    with WorkspaceLock(path) as lock:
        assert lock.path == path
        assert path.read_text() == f"{os.getpid()}\n"
    # released: can be taken again, and the file stays (removing it would race with a new holder)
    with WorkspaceLock(path):
        pass
    assert path.exists()


def test_second_lock_in_the_same_process_is_busy(tmp_path):
    path = tmp_path / "navigator.lock"
    first = WorkspaceLock(path).acquire()
    try:
        with pytest.raises(WorkspaceBusy) as info:
            WorkspaceLock(path).acquire()
        assert isinstance(info.value, UserInputError)  # exit code 2
        assert f"workspace {tmp_path} is in use by another navigator run (pid {os.getpid()})" in str(info.value)
        assert info.value.hint == "wait for it to finish, or use another --workdir"
    finally:
        first.release()
    WorkspaceLock(path).acquire().release()


def test_failed_acquire_does_not_leak_a_descriptor(tmp_path):
    """Counts this process's descriptors open on the lock file only: others open and close at any
    moment (an earlier test's pipes closed by the garbage collector made a count of all of them flaky)."""
    path = tmp_path / "navigator.lock"

    def on_lock() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
            except OSError:   # closed since the listing
                pass
        return n

    assert on_lock() == 0
    with WorkspaceLock(path):
        assert on_lock() == 1
        for _ in range(20):
            with pytest.raises(WorkspaceBusy):
                WorkspaceLock(path).acquire()
        assert on_lock() == 1
    assert on_lock() == 0


def _start_holder(path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([child.stdout], [], [], 30)
    line = child.stdout.readline() if ready else ""
    if line.strip() != "locked":
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"the child did not take the lock: {line!r} {err[-2000:]}")
    return child


def test_lock_held_by_a_child_process_then_killed(tmp_path):
    path = tmp_path / "ws" / "navigator.lock"
    child = _start_holder(path)
    try:
        with pytest.raises(WorkspaceBusy) as info:
            WorkspaceLock(path).acquire()
        assert f"(pid {child.pid})" in str(info.value)
        assert path.read_text() == f"{child.pid}\n"  # the failed attempt did not clobber it
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    # the stale file (holding the dead child's pid) does not block
    assert path.read_text() == f"{child.pid}\n"
    deadline = time.monotonic() + 5
    while True:
        try:
            lock = WorkspaceLock(path).acquire()
            break
        except WorkspaceBusy:  # pragma: no cover - the kernel drops the lock when the process is reaped
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_acquiring_a_held_lock_object_again_is_a_bug(tmp_path):
    lock = WorkspaceLock(tmp_path / "navigator.lock").acquire()
    try:
        with pytest.raises(RuntimeError, match="already held"):
            lock.acquire()
    finally:
        lock.release()
    lock.release()  # releasing twice is harmless


def test_lock_is_not_inherited_by_subprocesses(tmp_path):
    path = tmp_path / "navigator.lock"
    with WorkspaceLock(path):
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
    try:
        # the run released the lock; a worker it started must not keep holding it
        WorkspaceLock(path).acquire().release()
    finally:
        worker.kill()
        worker.wait(timeout=10)
