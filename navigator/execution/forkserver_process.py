"""The fork server's own process (``python -m navigator._forkserver``): it imports the preload,
then forks one child per job until the run's end of the control socket closes. The run's side,
the protocol and what a child keeps of a fresh worker are in :mod:`navigator.execution.forkserver`."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

MAX_MESSAGE = 1 << 20   # the longest control message
# requests held until their "after" module is imported: (request, job socket, log fd)
Held = list[tuple[dict[str, Any], socket.socket, int]]


def serve(ctl_fd: int, preload: list[str]) -> int:
    """The server's loop: import ``preload``, then fork a child per request until the control
    socket closes."""
    import importlib
    import warnings

    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started the server ends, and a
    # worker thread of a parallel run may be that thread. The control socket's end is the signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_title(f"{sys.executable} -m navigator._forkserver (the warm workers of run {os.getppid()})")
    ctl = socket.socket(fileno=ctl_fd)
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)   # 3.12: threads at fork
    children: dict[int, socket.socket] = {}
    pending = list(preload)
    baseline = _threads()
    held: Held = []   # requests whose "after" module is still to import
    import select

    def fork(request: dict[str, Any], job_sock: socket.socket, log_fd: int) -> None:
        try:
            _fork_one(request, ctl, job_sock, log_fd, children, baseline, held)
        except Exception as e:   # noqa: BLE001 - a failed fork (EAGAIN, ENOMEM) refuses one job, not all
            _refuse(job_sock, log_fd, f"{type(e).__name__}: {e}")

    while True:
        _reap_children(children)
        for job in [h for h in held if h[0].get("after") not in pending]:
            held.remove(job)
            fork(*job)
        try:
            ready, _, _ = select.select([ctl], [], [], 0 if pending else 0.02)
        except InterruptedError:
            continue
        if not ready:
            if pending:   # one module at a time: a job asked for meanwhile is forked first and imports the rest
                name = pending.pop(0)
                try:
                    importlib.import_module(name)
                except Exception as e:   # noqa: BLE001 - a job that needs it reports the error itself
                    print(f"navigator fork server: preloading {name} failed: {e}", file=sys.stderr)
                if name == "numpy":
                    baseline = _threads()   # OpenBLAS's pool: fork-safe (pthread_atfork)
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 2, getattr(socket, "MSG_CMSG_CLOEXEC", 0))
        except OSError:
            data, fds = b"", []
        if not data:
            break
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        job_sock, log_fd = socket.socket(fileno=fds[0]), fds[1]
        try:
            request = json.loads(data)
        except ValueError as e:
            _refuse(job_sock, log_fd, f"not a request: {e}")
            continue
        if request.get("after") in pending:
            held.append((request, job_sock, log_fd))
        else:
            fork(request, job_sock, log_fd)
    for _, job_sock, log_fd in held:   # the run is gone before they were forked
        _refuse(job_sock, log_fd, "the run ended")
    for pid in children:   # the run is gone: so are its jobs
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        _reap_children(children)
        time.sleep(0.01)
    return 0


def _refuse(job_sock: socket.socket, log_fd: int, why: str) -> None:
    """Tell the run this job was not forked (it starts a fresh worker) and let go of its fds."""
    try:
        os.close(log_fd)
    except OSError:
        pass
    try:
        job_sock.send(json.dumps({"refused": why}).encode())
    except OSError:
        pass
    job_sock.close()


def _fork_one(request: dict[str, Any], ctl: socket.socket, job_sock: socket.socket, log_fd: int,
              children: dict[int, socket.socket], baseline: set[int], held: Held | None = None) -> None:
    """Fork the worker of one request and tell the run its pid. ``held``: requests still waiting for
    an import, whose socket and log the child must not keep open."""
    extra = _threads() - baseline
    if extra:   # never fork beside a thread that may hold a lock: the run starts a fresh worker
        _refuse(job_sock, log_fd, f"{len(extra)} thread(s) started by an import run in the fork server, which "
                                  "never forks beside them")
        return
    pid = os.fork()
    if pid == 0:
        _child(request, ctl, job_sock, log_fd, children, held)   # never returns
    os.close(log_fd)
    try:
        os.setpgid(pid, pid)   # before the run hears of it, so the run's kill reaches the group
    except OSError:
        pass
    try:
        job_sock.send(json.dumps({"pid": pid}).encode())
    except OSError:   # nobody waits for it any more (the run gave up on us): it must not run
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    children[pid] = job_sock


def _threads() -> set[int]:
    """This process's threads other than the calling one."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")} - {threading.get_native_id()}
    except OSError:
        return set()


def _reap_children(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock = children.pop(pid, None)
        if sock is None:
            continue
        try:
            sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status), "maxrss_kb": usage.ru_maxrss}).encode())
        except OSError:
            pass
        sock.close()


def _child(request: dict[str, Any], ctl: socket.socket, job_sock: socket.socket, log_fd: int,
           children: dict[int, socket.socket], held: Held | None = None) -> None:
    """The forked worker: become what ``python -m navigator._worker JOB.json`` would be, run the job
    and leave with ``os._exit``."""
    code = 1
    try:
        os.setpgid(0, 0)   # a process group of its own (the server sets it too: no race with a kill)
        server = os.getppid()
        ctl.close()
        for sock in children.values():
            sock.close()
        children.clear()
        for _, sock, fd in held or ():   # other jobs' requests, still waiting in the server
            sock.close()
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(devnull)
        os.close(log_fd)
        _set_threads(request["env"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        from navigator.execution.processes import become_subreaper, parent_death_signal

        parent_death_signal(signal.SIGKILL)
        if os.getppid() != server:   # the server died before prctl took effect
            os._exit(1)
        become_subreaper()
        from navigator.execution import worker

        sys.argv = [worker.__file__, request["job"]]
        from navigator.execution.processes import python_command

        set_title(" ".join(python_command("-m", "navigator._worker", request["job"])))
        code = worker.main([request["job"]], forked=True)
    except SystemExit as e:   # as the interpreter of a fresh worker would end
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:   # noqa: B902 - a worker's crash goes to its log, as a fresh worker's would
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            from navigator.execution.processes import kill_descendants

            kill_descendants()
            code &= 0xFF   # what os._exit keeps (sys.exit(-1) ends with 255): the word says the same
            _last_word(job_sock, code)
        finally:
            os._exit(code)


def _last_word(job_sock: socket.socket, code: int) -> None:
    """The child's own ``{"exit", "maxrss_kb"}``, sent right before it exits: the server reaps a
    child only between two imports (``import torch._inductor`` takes seconds), and a run waiting
    for that word held a job slot up to half a second after its worker had ended. The peak is what
    the server's ``wait4`` would give (the larger of this process's and its reaped children's)."""
    import resource

    try:
        peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        job_sock.send(json.dumps({"pid": os.getpid(), "exit": code, "maxrss_kb": peak}).encode(),
                      getattr(socket, "MSG_NOSIGNAL", 0))
    except OSError:   # nobody listens any more: the server's word, or /proc's, is the run's
        pass


def set_title(text: str) -> bool:
    """Write ``text`` over this process's command line (what ``ps`` and ``pgrep -f`` read from
    /proc/PID/cmdline), as setproctitle does: the kernel reads the bytes between the argument area's
    start and end, fields 48 and 49 of /proc/self/stat, which are this process's own memory. A forked
    worker thus reads ``python -P -m navigator._worker JOB.json`` like a fresh one. The text is cut to
    the room the server started with (:data:`navigator.execution.forkserver.TITLE_ROOM`). False where
    it cannot be done."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])   # fields 48, 49 counted from 1, after pid and comm
    except (OSError, IndexError, ValueError):
        return False
    room = end - start
    if room <= 1:
        return False
    data = text.encode("utf-8", "surrogateescape")[: room - 1]
    ctypes.memmove(start, data + b"\0" * (room - len(data)), room)
    return True


def _set_threads(env: dict[str, str]) -> None:
    """torch read OMP_NUM_THREADS when the server imported it: a job's other value applies here."""
    value = env.get("OMP_NUM_THREADS")
    if value == os.environ.get("OMP_NUM_THREADS") or "torch" not in sys.modules:
        return
    try:
        n = int(value) if value else os.cpu_count() or 1
    except ValueError:
        return
    if n > 0:
        sys.modules["torch"].set_num_threads(n)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):   # the third: the room for the children's titles
        print("usage: python -m navigator._forkserver CONTROL_FD PRELOAD_JSON [SPACES]", file=sys.stderr)
        return 2
    return serve(int(argv[0]), json.loads(argv[1]))


