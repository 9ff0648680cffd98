"""A local Triton Inference Server for a quick check of an emitted repository.

Contract (``navigator serve`` and the serving profiler are built on it)::

    from navigator.triton.server import TritonServer, prepare
    env = prepare()                       # idempotent; cached; UserInputError when it cannot download
    with TritonServer("ws/triton", cpu_backends=True) as server:
        server.http_url                   # "127.0.0.1:PORT"  (tritonclient's form)
        server.grpc_url                   # "127.0.0.1:PORT"
        server.metrics_url                # "http://127.0.0.1:PORT/metrics"
    # leaving the block stops the server: SIGTERM, then SIGKILL, on its process group

The server is the real ``tritonserver`` 2.51 of the ``nvidia-pytriton==0.7.0``
wheel (Python backend only), or the binary given as ``tritonserver=``. It
never goes into the project's environment (its wheel, and tritonclient
2.51's, pin numpy<2; the project is on numpy 2): :func:`prepare` builds its
own venv under :func:`cache_dir` (``${NAVIGATOR_CACHE:-~/.cache/navigator}/triton-2.51``):

- ``wheels/``: the downloaded wheels (nvidia-pytriton 0.7.0, tritonclient
  2.51.0, numpy<2), installed ``--no-deps`` into ``py3.X/venv``. A
  ``.pth`` file lets that venv see the project's site-packages *after* its
  own, so Python-backend models import the project's torch / onnxruntime /
  openvino with the venv's numpy<2 (the 2.51 stub gives wrong outputs with
  numpy 2).
- ``py3.X/backends/python/``: copies of ``libtriton_python.so``,
  ``triton_python_backend_utils.py`` and the stub for this Python.
- ``py3.X/lib/``: ``libcudart.so.12`` and ``libb64.so.0d`` linked to the
  hashed copies in ``nvidia_pytriton.libs``, so tritonclient 2.51's real
  ``perf_analyzer`` binary runs (``ServerEnv.perf_analyzer`` + ``.env``).

Each :class:`TritonServer` gets a private backend directory (the Python
backend, plus with ``cpu_backends=True`` the CPU stand-ins of the
``onnxruntime`` and ``openvino`` backends: Python-based backends in
``navigator/triton/standins/``, test doubles of NVIDIA's C++ backends), binds
127.0.0.1 only on free ports, runs in ``explicit`` model-control mode and
loads the models through the repository API (``models=None``: every model
folder of the repository, ensembles last). A model that fails to load raises
:class:`~navigator.errors.UserInputError` with the server's reason. Its
Python-backend shared memory uses a unique ``shm-region-prefix-name``;
:meth:`TritonServer.stop` removes exactly those ``/dev/shm`` segments.

Only the standard library is imported here (urllib for the HTTP API).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from navigator.errors import UserInputError
from navigator.execution.processes import parent_death_signal, stop_group
from navigator.triton.server_env import TRITON_VERSION, ServerEnv, cache_dir, prepare

__all__ = ["TritonServer", "ServerEnv", "TRITON_VERSION", "prepare", "cache_dir", "model_folders", "remove_shm",
           "STANDINS"]

STANDINS = ("onnxruntime", "openvino")            # C++ backends with a CPU stand-in here
_STANDIN_DIR = Path(__file__).resolve().parent / "standins"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folders(repo: Path) -> list[str]:
    """Model names of a repository (folders with a config.pbtxt), ensembles last."""
    names = sorted(p.name for p in Path(repo).iterdir() if (p / "config.pbtxt").is_file())

    def is_ensemble(name: str) -> bool:
        text = (Path(repo) / name / "config.pbtxt").read_text(encoding="utf-8", errors="replace")
        return re.search(r'^\s*platform\s*:\s*"ensemble"', text, re.M) is not None

    return sorted(names, key=lambda n: (is_ensemble(n), n))


_PLATFORMS = {"onnxruntime_onnx": "onnxruntime", "tensorflow_savedmodel": "tensorflow",
              "tensorflow_graphdef": "tensorflow", "pytorch_libtorch": "pytorch", "tensorrt_plan": "tensorrt",
              "ensemble": "ensemble"}


def config_backend(path: Path) -> str | None:
    """The backend a config.pbtxt asks for (``backend:``, or its ``platform:`` mapped to one)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    found = re.search(r'^\s*backend\s*:\s*"([^"]+)"', text, re.M)
    if found:
        return found.group(1)
    found = re.search(r'^\s*platform\s*:\s*"([^"]+)"', text, re.M)
    return _PLATFORMS.get(found.group(1), found.group(1)) if found else None


RESPONSE_CACHE_BYTES = 64 << 20   # the local response cache's pool when a served config enables it
CACHE_FLAG = f"--cache-config=local,size={RESPONSE_CACHE_BYTES}"


def server_flags(configs) -> list[str]:
    """The tritonserver flags these ModelConfigs need: without them Triton loads a response cache
    and a rate limiter switched off, and says nothing."""
    configs = list(configs)
    flags = []
    if any(c.response_cache.enable for c in configs):
        flags.append(CACHE_FLAG)
    if any(g.HasField("rate_limiter") for c in configs for g in c.instance_group):
        flags.append("--rate-limit=execution_count")   # resources: the server sizes them from the configs
    return flags


class TritonServer:
    """A ``tritonserver`` process serving ``repo`` on 127.0.0.1 (a context manager).

    ``start()`` launches it, waits until it is live, then loads ``models``
    (None: every model folder). ``stop()`` is idempotent. ``tritonserver``
    names another binary (its backends then come from the prepared Python
    backend plus the stand-ins; the prepared venv still provides the stub's
    Python). The server gets SIGTERM when the thread that called ``start()``
    ends or its process dies (Linux PR_SET_PDEATHSIG): start it from the
    thread that lives as long as it should.

    Filled in by ``start()``: ``process`` (Popen), ``loaded`` (model names),
    ``start_s`` (launch to live), ``load_s`` ({model: seconds}), ``env``
    (the ServerEnv), ``shm_prefix``, ``log_file``."""

    LOAD_TIMEOUT_S = 600.0
    STOP_TIMEOUT_S = 10.0

    def __init__(self, repo, *, http_port=None, grpc_port=None, metrics_port=None, tritonserver=None,
                 cpu_backends=False, models=None, log_path=None, ready_timeout_s=60.0, extra_args=()):
        self.repo = Path(repo).resolve()
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.tritonserver = Path(tritonserver) if tritonserver else None
        self.cpu_backends = bool(cpu_backends)
        self.models = list(models) if models is not None else None
        self.log_path = Path(log_path) if log_path else None
        self.ready_timeout_s = float(ready_timeout_s)
        self.extra_args = list(extra_args)
        self.shm_prefix = f"navtriton_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.env: ServerEnv | None = None
        self.process: subprocess.Popen | None = None
        self.loaded: list[str] = []
        self.start_s: float | None = None          # launch -> live
        self.load_s: dict[str, float] = {}         # model -> seconds its load took
        self._tmp: Path | None = None
        self._log_file = None
        self._last_log = ""

    # ------------------------------------------------------------------ urls
    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _check_inputs(self) -> None:
        if not self.repo.is_dir():
            raise UserInputError(f"model repository {self.repo} is not a folder")
        if self.tritonserver is not None and not (self.tritonserver.is_file() and os.access(self.tritonserver,
                                                                                            os.X_OK)):
            raise UserInputError(f"--tritonserver {self.tritonserver} is not an executable file")
        if self.models is None and not model_folders(self.repo):
            raise UserInputError(f"{self.repo} holds no model (no <name>/config.pbtxt); write one with "
                                 "navigator triton WS")
        if self.models is not None:
            missing = [m for m in self.models if not (self.repo / m / "config.pbtxt").is_file()]
            if missing:
                raise UserInputError(f"model {missing[0]!r} is not in {self.repo} (it has "
                                     f"{', '.join(model_folders(self.repo)) or 'no model'})")
        self._check_backends()

    def _check_backends(self) -> None:
        """Every model's backend is one this server has (the Python backend, the stand-ins with
        --cpu-backends): found here, one line, instead of a load failure deep in the server log."""
        have = {"python", "ensemble", *(STANDINS if self.cpu_backends else ())}
        for name in (self.models if self.models is not None else model_folders(self.repo)):
            backend = config_backend(self.repo / name / "config.pbtxt")
            if backend and backend not in have:
                hint = ("; --cpu-backends stands in for " + " and ".join(STANDINS) if backend in STANDINS
                        else f"; this server has {' and '.join(sorted(have - {'ensemble'}))} only: write the "
                             "repository with a format those serve (navigator triton WS --formats onnx)")
                raise UserInputError(f"model {name!r} of {self.repo} needs Triton's {backend!r} backend{hint}")

    def _backend_dir(self) -> Path:
        """A private backend dir: python/ copied from the cache, plus the stand-ins."""
        backends = self._tmp / "backends"
        shutil.copytree(self.env.backend_dir / "python", backends / "python")
        if self.cpu_backends:
            for name in STANDINS:   # one file: the folder it is copied into says which backend it stands in for
                (backends / name).mkdir(parents=True)
                shutil.copyfile(_STANDIN_DIR / "model.py", backends / name / "model.py")
        return backends

    def command(self) -> list[str]:
        binary = self.tritonserver or self.env.tritonserver
        return [str(binary), f"--model-repository={self.repo}", "--model-control-mode=explicit",
                f"--backend-directory={self._backend_dir_path}",
                "--http-address=127.0.0.1", f"--http-port={self.http_port}",
                "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
                "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
                "--allow-metrics=true", "--allow-gpu-metrics=false", "--disable-auto-complete-config",
                "--pinned-memory-pool-byte-size=0", "--exit-timeout-secs=5", "--log-info=true",
                f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}", *self.config_flags(),
                *self.extra_args]

    def config_flags(self) -> list[str]:
        """The server flags the served configs need: without them Triton loads a config with a
        ``response_cache`` with the cache off and one with a ``rate_limiter`` with the limiter off,
        and says nothing. A flag the caller passed (``extra_args``) wins."""
        from navigator.triton import config as cfg_mod

        configs = []
        for name in (self.models if self.models is not None else model_folders(self.repo)):
            try:
                configs.append(cfg_mod.read(self.repo / name / "config.pbtxt"))
            except (UserInputError, OSError, ValueError):   # the server's load says what is wrong, in its words
                continue
        given = " ".join(self.extra_args)
        flags = [f for f in server_flags(configs) if f.split("=")[0] not in given]
        caches = self.env.tritonserver.parent.parent / "caches" if self.env is not None else None
        wants_cache = any(f.startswith("--cache-config") for f in [*flags, *self.extra_args])
        if wants_cache and self.tritonserver is None and caches is not None and caches.is_dir() \
                and "--cache-directory" not in given:
            flags.append(f"--cache-directory={caches}")   # the wheel's local cache, not /opt/tritonserver's
        return flags

    def start(self) -> "TritonServer":
        if self.process is not None:
            return self
        self._check_inputs()
        self.env = prepare(quiet=True)
        chosen = (self.http_port, self.grpc_port, self.metrics_port)
        for attempt in range(3):
            self.http_port, self.grpc_port, self.metrics_port = (p or _free_port() for p in chosen)
            try:
                self._launch()
                break
            except UserInputError:
                # a free port picked here can be taken before the server binds it: pick again
                if attempt == 2 or all(chosen) or "already in use" not in self._last_log.lower():
                    raise
        try:
            for name in (self.models if self.models is not None else model_folders(self.repo)):
                self.load(name)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="navigator-triton-"))
        try:
            self._backend_dir_path = self._backend_dir()
            log = self.log_path or (self._tmp / "tritonserver.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            self._log = log
            self._log_file = open(log, "wb")
            t0 = time.monotonic()
            self.process = subprocess.Popen(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env.process_env(),
                                            cwd=str(self._tmp), start_new_session=True,
                                            preexec_fn=_term_with_parent)
            self._wait_live()
            self.start_s = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise

    def _wait_live(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UserInputError(f"tritonserver exited at start (exit {self.process.returncode}): "
                                     f"{self._log_reason() or 'no reason in its log'}")
            with contextlib.suppress(OSError):
                if self._request("GET", "/v2/health/live", timeout=1.0)[0] == 200:
                    return
            time.sleep(0.05)
        raise UserInputError(f"tritonserver was not live after {self.ready_timeout_s:.0f} s: "
                             f"{self._log_reason() or 'no reason in its log'}")

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process, grace_s=self.STOP_TIMEOUT_S)   # stubs share the group: all go
            self.process = None          # only now: a stop() interrupted half-way is finished by the next
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
            with contextlib.suppress(OSError):
                self._last_log = self._log.read_text(errors="replace")
        remove_shm(self.shm_prefix)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # ------------------------------------------------------------------ repository API
    def _request(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(f"http://{self.http_url}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def load(self, name: str) -> None:
        """Load (or reload) ``name``; UserInputError with the server's reason when it fails."""
        self._need_running()
        offset = self._log_size()
        t0 = time.monotonic()
        try:
            code, body = self._request("POST", f"/v2/repository/models/{name}/load", timeout=self.LOAD_TIMEOUT_S)
        except OSError as e:
            raise UserInputError(f"model {name!r} did not load: {e} ({self._log_reason() or 'see the log'})") \
                from None
        if code != 200:
            raise UserInputError(f"model {name!r} failed to load: {self._reason(body, name, offset)}")
        self.load_s[name] = time.monotonic() - t0
        if name not in self.loaded:
            self.loaded.append(name)

    def unload(self, name: str) -> None:
        self._need_running()
        offset = self._log_size()
        code, body = self._request("POST", f"/v2/repository/models/{name}/unload", timeout=self.LOAD_TIMEOUT_S)
        if code != 200:
            raise UserInputError(f"model {name!r} failed to unload: {self._reason(body, name, offset)}")
        if name in self.loaded:
            self.loaded.remove(name)

    def _need_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise UserInputError("the Triton server is not running")

    def _reason(self, body: bytes, name: str, log_offset: int = 0) -> str:
        """The server's reason: the response's error, plus error lines of the log written
        since ``log_offset`` that say more (a config's parse error is only in the log)."""
        try:
            text = json.loads(body.decode(errors="replace")).get("error", "")
        except ValueError:
            text = body.decode(errors="replace")
        text = _clean(str(text))
        extra = []
        for line in self._log_since(log_offset).splitlines():
            if not (_GLOG_ERROR.match(line) or "libprotobuf ERROR" in line) or _noise(line):
                continue
            msg = _clean(line)
            if msg and not _said(msg, " ".join([text, *extra])):
                extra.append(msg)
        if "unable to find backend library for backend" in text and not self.cpu_backends:
            extra.append("this Triton build has only the Python backend: cpu_backends=True (navigator serve "
                         "--cpu-backends) serves onnxruntime/openvino models through navigator's CPU stand-ins")
        text = "; ".join([t for t in [text, *extra] if t])
        return text or "no reason given"

    def _log_size(self) -> int:
        try:
            return self._log.stat().st_size
        except (OSError, AttributeError):
            return 0

    def _log_since(self, offset: int) -> str:
        try:
            with open(self._log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except (OSError, AttributeError):
            return ""

    # ------------------------------------------------------------------ log
    @property
    def log_file(self) -> Path | None:
        """The server's log (a temporary file, removed by stop(), unless log_path was given)."""
        return getattr(self, "_log", None)

    def log_reason(self, name: str | None = None) -> str:
        """The last error line of the log (about model ``name`` when given), without its prefix."""
        return self._log_reason(name)

    def log_tail(self, n: int = 40) -> str:
        text = self._last_log
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                text = self._log.read_text(errors="replace")
        return "\n".join(text.splitlines()[-n:])

    def _log_reason(self, name: str | None = None) -> str:
        """The last error line of the log (about ``name`` when given), message part only; a
        warning or info line that names an error is none ("--load-model argument will result in
        error", at every start). Without one, the log's last line, said so."""
        return log_reason(self.log_tail(400), name)


def log_reason(text: str, name: str | None = None) -> str:
    """:meth:`TritonServer._log_reason` of a log's ``text``."""
    lines = text.splitlines()
    errors = [ln for ln in lines if (_GLOG_ERROR.match(ln) or "error" in ln.lower() and not _GLOG_OTHER.match(ln))
              and not _noise(ln)]
    if name:
        errors = [ln for ln in errors if name in ln] or errors
    if errors:
        return _clean(errors[-1])
    last = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith(("+", "|"))]   # not its tables
    return f"no error line; its log ends: {_clean(last[-1])}" if last else ""


_GLOG_ERROR = re.compile(r"^E\d{4} ")
_GLOG_OTHER = re.compile(r"^[WI]\d{4} ")
_LOG_PREFIX = re.compile(r"^(?:[EWI]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]|\[libprotobuf \w+ [^\]]*\]) ?")


# Error lines a CPU-only machine always gets and that never explain a failure: the GPU build of
# Triton core creates a CUDA stream for every ensemble (EnsembleScheduler's constructor, no
# config setting skips it) and logs this when there is no GPU; the ensemble loads and serves.
_CPU_ONLY_NOISE = re.compile(r"unable to create stream for .*(CUDA driver|no CUDA-capable device|"
                             r"CUDA driver version is insufficient)", re.I)


def _noise(line: str) -> bool:
    return bool(_CPU_ONLY_NOISE.search(line))


def _clean(text: str) -> str:
    """One line from a log line or an error message: no log prefix, no quotes around the
    message, no Python traceback ("At: …") that the Python backend appends."""
    text = _LOG_PREFIX.sub("", text.strip()).replace("\\n", "\n")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    text = re.split(r"\n\s*At:\s*\n", text)[0]
    return " ".join(text.split()).rstrip(" ;")


def _said(message: str, text: str) -> bool:
    """Whether ``text`` already holds ``message`` or its substance (a tail after "prefix: ")."""
    parts = message.split(": ")
    return any(len(tail) >= 20 and tail in text for tail in (": ".join(parts[i:]) for i in range(len(parts))))


def _term_with_parent() -> None:
    """In the forked child before exec (Linux): SIGTERM when the thread that started the
    server dies, even by SIGKILL, so no server outlives ``navigator serve``; the server then
    stops its stubs and removes its shared memory itself."""
    parent_death_signal(signal.SIGTERM)


def remove_shm(prefix: str) -> list[str]:
    """Remove /dev/shm segments whose name starts with ``prefix``; returns their names."""
    removed = []
    shm = Path("/dev/shm")
    if not prefix or not shm.is_dir():
        return removed
    for p in shm.glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p.name)
    return removed
