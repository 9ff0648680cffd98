"""Process groups: how Navigator stops a child and everything it started.

Workers and the Triton server run in a process group of their own
(``start_new_session=True``); stopping one means SIGTERM to the group, a grace
period for the leader, then SIGKILL to the group, always, so that no child
(a converter's subprocess, a factory's helper, a Python-backend stub) outlives
it. :func:`parent_death_signal` makes a child die with the thread that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def reap(proc: subprocess.Popen, *, block: bool) -> tuple[int | None, float | None]:
    """(exit code as Popen gives it, peak RSS in MiB) once the child has ended, (None, None)
    while it runs. ``wait4`` gives the child's own ``ru_maxrss`` (its VmHWM). A fork server's
    child (:class:`navigator.execution.forkserver.ForkedWorker`) is reaped by its server."""
    own = getattr(proc, "reap", None)
    if own is not None:
        return own(block=block)
    if proc.returncode is not None:
        return proc.returncode, None
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:   # reaped elsewhere
        return proc.poll(), None
    if pid == 0:
        return None, None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, round(usage.ru_maxrss / 1024, 1)


def alive(pid: int) -> bool:
    """Whether a process of this pid runs (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def left_by_dead_runs(folder: Path, prefix: str) -> list[Path]:
    """Entries of ``folder`` named ``<prefix><pid>-…`` whose process no longer runs: what a killed run
    left behind (a staging folder, a cache)."""
    out = []
    for entry in folder.glob(f"{prefix}*"):
        pid = entry.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not entry.is_symlink() and not alive(int(pid)):
            out.append(entry)
    return out


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a process group (nothing when it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait(proc: subprocess.Popen, seconds: float) -> tuple[int | None, float | None]:
    """Reap ``proc`` within ``seconds``: (exit code, peak RSS MiB), (None, None) when it still runs."""
    deadline = time.monotonic() + seconds
    while True:
        code, peak = reap(proc, block=False)
        if code is not None or time.monotonic() >= deadline:
            return code, peak
        time.sleep(0.02)


def stop_group(proc: subprocess.Popen, *, grace_s: float, kill_wait_s: float = 5.0) -> float | None:
    """SIGTERM to ``proc``'s process group, up to ``grace_s`` for the leader to end, then
    SIGKILL to the group whatever happened; the leader is reaped. Returns its peak RSS (MiB)
    when known. ``proc`` must lead its group (started with ``start_new_session=True``)."""
    peak = None
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        _, peak = _wait(proc, grace_s)
    kill_group(proc.pid)
    if proc.returncode is None:
        _, peak = _wait(proc, kill_wait_s)
    return peak


def parent_death_signal(sig: int) -> bool:
    """Linux: deliver ``sig`` to this process when the thread that started it dies (even by
    SIGKILL). Call it in the child (preexec_fn, or first thing in a worker). False where it
    cannot be set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(1, int(sig)) == 0   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


PR_SET_CHILD_SUBREAPER = 36   # linux/prctl.h


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): a process a user's code
    double-forked and moved into a session of its own (``setsid``) escapes the process-group kill,
    but still becomes this process's child when its parent ends, so :func:`kill_descendants` finds
    it. False where prctl is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(pid: int, *, running: bool = False) -> list[int]:
    """Every descendant of ``pid`` (from /proc: children before their own children); ``running``:
    zombies (ended, not yet reaped) left out."""
    children: dict[int, list[int]] = {}
    zombies: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            if fields[0] == b"Z":
                zombies.add(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if not (running and child in zombies):
                found.append(child)
            todo.append(child)
    return found


def kill_descendants(timeout_s: float = 2.0) -> None:
    """SIGKILL every process this one started, directly or not, until none is left: a process may
    fork between the listing and its kill, and its child (orphaned to this subreaper) is found
    by the next listing. Zombies are reaped on the way; gives up after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = descendants(os.getpid(), running=True)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if time.monotonic() > deadline:
            return
        time.sleep(0.005)


def python_command(*args: str) -> list[str]:
    """This interpreter with ``args``, never putting the working directory on sys.path (``-P``,
    Python 3.11+): a ``triton/`` folder where the user runs navigator (``navigator triton`` writes
    one into each workspace) would shadow the ``triton`` package torch.compile imports."""
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), *args]
