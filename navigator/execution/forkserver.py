"""Warm workers: one fork server per run that imports the heavy frameworks once.

A fresh worker is a new interpreter that imports what its job needs: ``import torch`` alone is
~1.3 s on a 2-core machine, torch's compiler ~2.8 s, and a torch run starts a worker per format
plus the race worker. So a run starts one server (``python -P -m navigator._forkserver``) once
its source is prepared; while the run plans and writes its workspace and the first jobs run,
the server imports what the run's workers will need
(:func:`preload_for`), one module at a time, and forks one child per job as the jobs come: once
the modules of the preload that the job needs are imported (:func:`wait_for`: torch for a TorchScript
runner, what ``torch.export.load`` imports for an ExportedProgram, the ONNX exporter for a conversion
to ONNX), else between two imports (a job then imports the rest itself). The child is the worker: it runs the job as
``python -m navigator._worker JOB.json`` would (:func:`navigator.execution.worker.main`).

What stays exactly as with a fresh worker:

* **Isolation.** Every job is a process of its own, forked from the pristine server (never from
  an earlier job), leading a process group of its own in the server's session (which is not the
  terminal's): a crash, a hang or a leak ends with it; the parent
  stops its process group on a timeout or Ctrl-C (:func:`navigator.execution.processes.stop_group`).
* **Memory limit and peak.** The parent watches the child's unreclaimable memory (with its
  descendants') as it does a fresh worker's (:mod:`navigator.execution.isolation`); the pages it
  shares copy-on-write with the server count as they would in a fresh worker that imported the
  same modules. Its peak resident set comes from the server's ``wait4``, or, for a child that ends
  by itself, from its own ``getrusage`` right before it exits (the same figure).
* **Environment.** The child takes the environment of the run at the time of the job, its
  working directory, stdin from /dev/null, stdout and stderr into the job's log. Thread counts
  that a library reads at import (``OMP_NUM_THREADS`` for torch) are those of the server's start;
  when the job's value differs, the child sets torch's thread count to it. Other settings a
  library reads at import (``MKL_NUM_THREADS``, ``TORCHINDUCTOR_*``) and the process's umask,
  rlimits, CPU affinity and nice value are also those of the run when the server started
  (after the source was prepared): a run that changes them later gets them in fresh workers
  only (``--no-warm-workers``).
* **Lifetime.** The server starts once the source is prepared (or with the first worker the
  preparation needs: a run refused for bad input starts none) and leaves with the run: when the
  run's end of the control socket closes (the run ended, or died even by SIGKILL) the server
  kills every child's process group and exits; each child gets SIGKILL when the server dies
  (``PR_SET_PDEATHSIG``).

Fork safety: the server only imports. It never runs a kernel, opens an inference session,
initialises CUDA or starts a thread of its own, so its children inherit no thread pool, lock or
device context a fork would break (the state PyTorch's DataLoader workers are forked from is
less clean). TensorFlow is never preloaded (it starts threads at import): a job that needs a
module the server did not import imports it after the fork, as a fresh worker would. Where a
server cannot start, or dies, the run goes on with fresh workers (the log says so);
``--no-warm-workers`` (``no_warm_workers=True``) always uses fresh ones.

Protocol (no file on disk: two socket pairs, ``SOCK_SEQPACKET``, so each message is whole):
the run sends ``{"job", "env", "cwd"}`` on the control socket with two file descriptors, a job
socket and the job's log; the server forks, answers ``{"pid"}`` on that job socket, and once the
child has ended ``{"exit", "maxrss_kb"}`` (exit as :class:`subprocess.Popen` gives it: the
negative signal number for a signal). A child that ends by itself says the same first, on its
copy of the job socket, right before ``os._exit``; the run takes the first word it reads.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

TITLE_ROOM = 4600   # spare command-line bytes the server starts with: each child's title is written there
# Modules that start no thread at import (measured: onnxruntime and openvino each start one, so
# they are imported by the jobs after the fork; NumPy's OpenBLAS pool is fork-safe, its pthread_atfork
# handlers stop and restart it, and it is the server's baseline).
BASE_PRELOAD = ("numpy", "onnx", "polygraphy.backend.onnxrt", "navigator.execution.worker",
                "navigator.execution.stages", "navigator.execution.profiling")
ZOMBIE_WAIT_S = 1.0    # how long an ended worker's exit waits for the server's word before /proc's
SPAWN_WAIT_S = 120.0   # the longest a job waits for the server to fork it (it forks between two imports)
# in order: torch; what torch.export.load imports (much of dynamo and inductor); the ONNX exporter and
# onnxscript's torch ops, which torch.onnx imports lazily (Format.preload and Converter.preload name them)
TORCH_PRELOAD = ("torch", "torch.export", "torch._dynamo", "torch._inductor.compile_fx",
                 "torch.onnx._internal.exporter._core", "onnxscript.function_libs.torch_lib.ops",
                 "navigator.runners.torch")


class ServerGone(Exception):
    """The fork server is not there to fork (it never started, died or was closed)."""


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


def preload_for(model, config) -> list[str]:
    """The modules a run's workers will import, as far as the model tells before it is opened:
    always NumPy, ONNX, Polygraphy and Navigator's stages; torch, its compiler and its ONNX exporter
    when the source's or a target's format record needs them (Format.preload: a live module, a
    ``file.py:factory``, a TorchScript or ExportedProgram file, a Hugging Face folder; a torch target);
    transformers for a Hugging Face model. Never a module that starts a thread at import (onnxruntime,
    OpenVINO, TensorFlow): a fork copies only the forking thread, and a lock another thread held at
    that moment would stay locked in the child."""
    import importlib.util

    from navigator import sources

    names = list(BASE_PRELOAD)
    formats = [sources.source_format(model) if model is not None else None]
    formats += [t.rstrip("?") for t in getattr(config, "targets", None) or ()]   # "?": an optional target
    if any(_format_preload(f) for f in formats if f):   # Format.preload of the source's or a target's format
        names += TORCH_PRELOAD
    if model is not None and sources.is_hf(model):
        names.append("transformers")
    return [n for n in names if importlib.util.find_spec(n.split(".")[0]) is not None]


def wait_for(job) -> str | None:
    """The last module of the preload that ``job`` needs (:data:`TORCH_PRELOAD`'s order), which the
    server imports before it forks the job -- forked earlier, the child imported it itself while the
    server imported the same modules beside it, both at half speed on a busy machine (the conversion
    from an ExportedProgram to ONNX, on a live module's critical path: 2.8-4.3 s instead of ~2 s on
    the transformer block). None: fork at once."""
    needs: set[str | None] = set()
    for task in getattr(job, "tasks", None) or []:
        for runner in [*task.runners, *([task.reference_runner] if task.reference_runner else [])]:
            needs.add(_runner_preload(runner.runner))   # the artifact its runner loads: the format's record says
        if task.convert is not None:                  # the edge's source, and what the edge adds
            edge = _converter(task.convert.converter)
            if edge is not None:
                needs |= {_format_preload(edge.source), edge.preload}
    known = [n for n in needs if n in TORCH_PRELOAD]
    return max(known, key=TORCH_PRELOAD.index) if known else None


def _runner_preload(runner: str) -> str | None:
    """``Format.preload`` of the formats ``runner`` runs (the torchscript runner: torchscript, torch_tensorrt)."""
    from navigator import formats

    found = {f.preload for f in formats.all_formats()
             if any(spec.runner == runner for specs in f.runners.values() for spec in specs)}
    found.discard(None)
    return max(found, key=lambda m: TORCH_PRELOAD.index(m) if m in TORCH_PRELOAD else -1) if found else None


def _format_preload(key: str) -> str | None:
    """``Format.preload`` of the format of ``key`` (a key or a format name); None when unknown."""
    from navigator import formats

    try:
        return formats.get(formats.parse_key(key).format).preload
    except Exception:   # a key this process does not know (a plugin's): nothing to wait for
        return None


def _converter(path: str):
    """The registered converter class of a ``module:QualName`` path, or None."""
    from navigator.converters.registry import registry

    for name in registry.names():
        cls = registry.get(name)
        if cls.import_path() == path:
            return cls
    return None


def preloaded_by(module: str | None, preload: list[str]) -> str | None:
    """``module`` when ``preload`` has it; else the module of :data:`TORCH_PRELOAD` before it that
    ``preload`` has (its package is missing here: the job still waits for the ones before), or None."""
    if module is None or module in preload:
        return module
    if module not in TORCH_PRELOAD:
        return None
    earlier = [m for m in TORCH_PRELOAD[:TORCH_PRELOAD.index(module)] if m in preload]
    return earlier[-1] if earlier else None


class ForkedWorker:
    """A job's process forked by the server: what :mod:`navigator.execution.processes` needs of a
    :class:`subprocess.Popen` (``pid``, ``returncode``) plus :meth:`reap`."""

    def __init__(self, pid: int, sock: socket.socket):
        self.pid = pid
        self.returncode: int | None = None
        self._sock = sock
        self._peak_mb: float | None = None
        self.server_died = False   # it ended because the server died (killed from outside), not by itself

    def reap(self, *, block: bool) -> tuple[int | None, float | None]:
        """(exit code, peak RSS MiB) once the child or the server said it ended, (None, None) while it runs."""
        if self.returncode is not None:
            return self.returncode, self._peak_mb
        if block:   # never wait on the server alone: it answers only between two imports
            while True:
                code, peak = self.reap(block=False)
                if code is not None:
                    return code, peak
                time.sleep(0.02)
        self._sock.setblocking(False)
        try:
            data = self._sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            # Not said yet. A child that ended is a zombie until the server reaps it, which it does
            # within 20 ms when idle but only between two imports when not: its exit status is read
            # from /proc after a short wait for the server's word (which has the peak RSS too).
            code = _zombie_exit(self.pid)
            if code is None:
                return None, None
            self._sock.settimeout(ZOMBIE_WAIT_S)
            try:
                data = self._sock.recv(4096)
            except OSError:
                data = None
            if not data:
                self.returncode = code
                self._sock.close()
                return code, None
        except OSError:
            data = b""
        if not data:   # the server died before it could say: the child died with it (PR_SET_PDEATHSIG)
            self.server_died = True
            self.returncode = _zombie_exit(self.pid)
            if self.returncode is None:
                self.returncode = -signal.SIGKILL
        else:
            self.ended(json.loads(data))
            return self.returncode, self._peak_mb
        self._sock.close()
        return self.returncode, self._peak_mb

    def ended(self, message: dict) -> None:
        """The child's end as its ``{"exit", "maxrss_kb"}`` word says (the child's own or the server's).
        The child's own comes right before it exits: this waits (at most :data:`ZOMBIE_WAIT_S`) until
        it has, so its memory is free before the next worker or the race starts."""
        self.returncode = int(message["exit"])
        self._peak_mb = round(message["maxrss_kb"] / 1024, 1)
        self._sock.close()
        if "pid" in message:
            deadline = time.monotonic() + ZOMBIE_WAIT_S
            while not _exited(self.pid) and time.monotonic() < deadline:
                time.sleep(0.002)


def _abandon(sock: socket.socket) -> None:
    """Give up on a job the server may fork yet: no more reading (the server's later word then fails,
    and it kills the child nobody waits for), and a child it already forked is killed here."""
    try:
        sock.shutdown(socket.SHUT_RD)
        sock.setblocking(False)
        while True:
            data = sock.recv(4096)
            if not data:
                break
            message = json.loads(data)
            pid = message.get("pid") if "exit" not in message else None   # a last word: that child has ended
            if pid:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
    except (OSError, ValueError):
        pass
    finally:
        sock.close()


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (the first is the state); None once
    ``pid`` is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _exited(pid: int) -> bool:
    """``pid`` has exited: a zombie (its memory freed), or reaped already."""
    fields = _stat(pid)
    return not fields or fields[0] in (b"Z", b"X")


def _zombie_exit(pid: int) -> int | None:
    """The exit code (as Popen gives it) of ``pid`` when it is a zombie, from field 52 of
    /proc/PID/stat (its wait status, Linux 3.5+); None while it runs or once it is gone."""
    fields = _stat(pid)
    if not fields or fields[0] != b"Z":
        return None
    try:
        return os.waitstatus_to_exitcode(int(fields[49]))
    except (IndexError, ValueError):
        return None


class ForkServer:
    """The run's side of a fork server: :meth:`start` (or the first :meth:`spawn`), :meth:`spawn` per
    job (any thread), :meth:`close`. Nothing starts before either: a run that ends before its first
    worker (bad input) never starts one."""

    def __init__(self, preload: list[str]):
        self.preload = list(preload)
        self._proc: subprocess.Popen | None = None
        self._ctl: socket.socket | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0.0

    def start(self) -> "ForkServer":
        """Start the server now (idempotent), so that it imports while the run does other work."""
        with self._lock:
            if self._proc is None and not self._closed:
                try:
                    self._start()
                except OSError as e:
                    self._closed = True
                    log.warning("fork server not started (%s): fresh workers instead", e)
        return self

    def _start(self) -> None:
        from navigator.execution.processes import python_command

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        child_env = dict(os.environ)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        child_env["NAVIGATOR_WORKER"] = "1"
        child_env["TORCH_WARM_POOL"] = "0"   # torch 2.2-2.5 with triton start inductor's pool at import
        try:
            self._proc = subprocess.Popen(
                python_command("-m", "navigator._forkserver", str(child.fileno()), json.dumps(self.preload),
                               " " * TITLE_ROOM),
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, env=child_env)
        finally:
            child.close()
        self._ctl = parent
        self.started = time.monotonic()
        log.info("fork server %d started, preloading %s", self._proc.pid, ", ".join(self.preload))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._ctl is not None

    def spawn(self, job_path: Path, log_file, env: dict, cancel=None, after: str | None = None) -> ForkedWorker:
        """Fork a worker for ``job_path`` writing into the open ``log_file``; ServerGone when the
        server cannot (the caller starts a fresh worker instead). ``after``: a module of the preload
        the server imports first, when it has not yet (:func:`wait_for`); else it forks between two
        imports, and the job imports the rest itself."""
        self.start()
        if not self.alive:
            raise ServerGone("the fork server is not running")
        after = preloaded_by(after, self.preload)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = json.dumps({"job": str(job_path), "env": env, "cwd": os.getcwd(), "after": after}).encode()
        try:
            with self._lock:
                socket.send_fds(self._ctl, [request], [theirs.fileno(), log_file.fileno()])
        except OSError as e:   # the server is gone, or the environment is too large for one message
            ours.close()
            raise ServerGone(f"the fork server could not take the job: {e}") from None
        finally:
            theirs.close()
        ours.settimeout(0.2)
        deadline = time.monotonic() + SPAWN_WAIT_S
        try:
            while True:
                try:
                    data = ours.recv(4096)
                    break
                except TimeoutError:
                    if not self.alive or time.monotonic() > deadline:
                        data = b""
                        break
                    if cancel is not None and cancel.is_set():
                        raise KeyboardInterrupt from None
            message = json.loads(data) if data else {}
        except BaseException:
            _abandon(ours)
            raise
        if "pid" not in message:
            _abandon(ours)
            why = message.get("refused") or f"it ended, or took more than {SPAWN_WAIT_S:g} s"
            raise ServerGone(f"the fork server did not fork the job ({why})")
        worker = ForkedWorker(int(message["pid"]), ours)
        if "exit" in message:   # the child's last word came before the server's (_last_word)
            worker.ended(message)
        return worker

    def close(self) -> None:
        """End the server and reap it. Closing the control socket makes it kill any child still
        running and exit; one still importing a module is stopped (its children die with it)."""
        with self._lock:
            self._closed = True
            if self._ctl is not None:
                self._ctl.close()
                self._ctl = None
        if self._proc is not None:
            from navigator.execution.processes import stop_group

            try:
                self._proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:   # in an import: SIGTERM ends it there
                stop_group(self._proc, grace_s=1.0)
            self._proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def for_run(model, config) -> ForkServer | None:
    """The (not yet started) server of a run of ``model`` with ``config``, or None
    (``no_warm_workers``, ``NAVIGATOR_WARM_WORKERS=0``, or not Linux: the run uses fresh workers)."""
    if getattr(config, "no_warm_workers", False) or os.environ.get("NAVIGATOR_WARM_WORKERS") == "0" \
            or not available():
        return None
    return ForkServer(preload_for(model, config))
