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
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError
from navigator.execution.processes import parent_death_signal, stop_group

TRITON_VERSION = "2.51"
PYTRITON = "nvidia-pytriton==0.7.0"
TRITONCLIENT = "tritonclient==2.51.0"
NUMPY = "numpy<2"
REQUIREMENTS = (PYTRITON, TRITONCLIENT, NUMPY)
_LAYOUT = 1                                   # bump when the cache layout changes
_PY = f"{sys.version_info.major}.{sys.version_info.minor}"
_LIBS = {"libcudart.so.12": "libcudart-*.so.12*", "libb64.so.0d": "libb64-*.so.0d*"}
STANDINS = ("onnxruntime", "openvino")            # C++ backends with a CPU stand-in here
_STANDIN_DIR = Path(__file__).resolve().parent / "standins"


def cache_dir() -> Path:
    """``${NAVIGATOR_CACHE:-~/.cache/navigator}/triton-2.51``."""
    base = os.environ.get("NAVIGATOR_CACHE") or str(Path.home() / ".cache" / "navigator")
    return Path(base).expanduser() / f"triton-{TRITON_VERSION}"


@dataclass(frozen=True)
class ServerEnv:
    """A prepared server environment. ``env`` holds the variables to run ``tritonserver``
    and ``perf_analyzer`` with (LD_LIBRARY_PATH, PATH); merge it over ``os.environ``."""

    tritonserver: Path
    python: Path                  # the venv's python (numpy<2) the backend stub runs with
    backend_dir: Path             # holds python/ (libtriton_python.so, utils, stub)
    lib_dir: Path                 # libcudart.so.12, libb64.so.0d links
    perf_analyzer: Path | None
    env: dict = field(default_factory=dict)

    def process_env(self, base: dict | None = None) -> dict:
        """``base`` (default os.environ) with ``env`` over it and PYTHONHOME/PYTHONPATH removed."""
        out = dict(os.environ if base is None else base)
        for key in ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONSTARTUP"):
            out.pop(key, None)
        out.update(self.env)
        return out


# --------------------------------------------------------------------------- prepare
def _root() -> Path:
    return cache_dir() / f"py{_PY}"


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{_PY}" / "site-packages"


def _project_site_paths() -> list[str]:
    """Where the running interpreter finds its packages (torch, onnxruntime, openvino…)."""
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    with contextlib.suppress(Exception):
        import site

        paths += site.getsitepackages()
    seen, out = set(), []
    for p in paths:
        if p and p not in seen and Path(p).is_dir():
            seen.add(p)
            out.append(p)
    return out


def _env_for(venv: Path, lib_dir: Path) -> dict:
    libs = [sysconfig.get_config_var("LIBDIR") or "", str(_site_packages(venv) / "nvidia_pytriton.libs"),
            str(lib_dir)]
    old = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": os.pathsep.join([p for p in libs if p] + ([old] if old else [])),
            "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "/usr/bin:/bin")])}


def _server_env(root: Path) -> ServerEnv:
    venv, lib_dir = root / "venv", root / "lib"
    pa = venv / "bin" / "perf_analyzer"
    return ServerEnv(tritonserver=_site_packages(venv) / "pytriton" / "tritonserver" / "bin" / "tritonserver",
                     python=venv / "bin" / "python", backend_dir=root / "backends", lib_dir=lib_dir,
                     perf_analyzer=pa if pa.is_file() else None, env=_env_for(venv, lib_dir))


def _marker() -> dict:
    return {"layout": _LAYOUT, "python": sys.version.split()[0], "requirements": list(REQUIREMENTS)}


def _is_ready(root: Path) -> bool:
    try:
        return json.loads((root / "ready.json").read_text()) == _marker() and _server_env(root).tritonserver.is_file()
    except (OSError, ValueError):
        return False


def _write_pth(venv: Path) -> None:
    """The project's site-packages, seen after the venv's own (its numpy<2 wins)."""
    pth = _site_packages(venv) / "zz_navigator_project_site.pth"
    text = "".join(f"{p}\n" for p in _project_site_paths() if Path(p).resolve() != _site_packages(venv).resolve())
    if not pth.is_file() or pth.read_text() != text:
        pth.write_text(text)


def _run(cmd: list[str], what: str, hint: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run a pip/venv command; UserInputError "<what>: <its last error line>" when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.lower().startswith("error")] or lines
        reason = re.sub(r"^error:\s*", "", errors[-1], flags=re.I) if errors else f"exit {r.returncode}"
        raise UserInputError(f"{what}: {reason}", hint=hint)
    return r


@contextlib.contextmanager
def _lock(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prepare(*, quiet: bool = False) -> ServerEnv:
    """Build (once) and return the server environment under :func:`cache_dir`.

    Downloads the wheels with pip (package-registry access needed the first
    time only), installs them ``--no-deps`` into the cached venv, lays out the
    backend and lib directories. Idempotent and safe to call from several
    processes at once (a file lock). Progress goes to stdout unless ``quiet``.
    Raises UserInputError (one line) when it cannot download or install."""
    root = _root()
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, flush=True))
    if not _is_ready(root):
        with _lock(cache_dir() / ".lock"):
            if not _is_ready(root):
                _build(root, say)
    env = _server_env(root)
    _write_pth(root / "venv")
    return env


def _build(root: Path, say) -> None:
    t0 = time.monotonic()
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    say(f"preparing the Triton {TRITON_VERSION} server environment in {root} (once)")
    try:
        files = _pick_wheels(wheels)         # downloaded before (a rebuild after an upgrade): no network needed
    except UserInputError:
        files = _download(wheels)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "cannot create the Triton server venv")
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          "--no-compile", "--disable-pip-version-check", *map(str, files)], "cannot install the Triton server wheels")
    site = _site_packages(venv)
    server_root = site / "pytriton" / "tritonserver"
    py_backend = root / "backends" / "python"
    py_backend.mkdir(parents=True)
    stub = server_root / "python_backend_stubs" / _PY / "triton_python_backend_stub"
    if not stub.is_file():
        raise UserInputError(f"{PYTRITON} has no Python-backend stub for Python {_PY}")
    for src in (server_root / "backends" / "python" / "libtriton_python.so",
                server_root / "backends" / "python" / "triton_python_backend_utils.py", stub):
        shutil.copy2(src, py_backend / src.name)
    lib_dir = root / "lib"
    lib_dir.mkdir()
    libs = site / "nvidia_pytriton.libs"
    for name, pattern in _LIBS.items():
        found = sorted(libs.glob(pattern))
        if found:
            (lib_dir / name).symlink_to(found[0])
    _write_pth(venv)
    (root / "ready.json").write_text(json.dumps(_marker(), indent=1) + "\n")
    say(f"prepared in {time.monotonic() - t0:.1f} s")


def _download(wheels: Path) -> list[Path]:
    """pip download of the three wheels into ``wheels`` (for this interpreter's tags)."""
    try:
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
              "--disable-pip-version-check", "-d", str(wheels), *REQUIREMENTS],
             f"cannot download the Triton server packages ({', '.join(REQUIREMENTS)})",
             f"navigator serve needs package-registry access once; the result is cached in {cache_dir()}",
             timeout=1800)
    except subprocess.TimeoutExpired:
        raise UserInputError(f"downloading {', '.join(REQUIREMENTS)} timed out") from None
    return _pick_wheels(wheels)


def _pick_wheels(wheels: Path) -> list[Path]:
    """The newest downloaded wheel for each requirement (the folder may hold older ones)."""
    picked = []
    for prefix, pattern in (("nvidia_pytriton-0.7.0-", "nvidia_pytriton-0.7.0-*.whl"),
                            ("tritonclient-2.51.0-", "tritonclient-2.51.0-*.whl"),
                            ("numpy-1.", f"numpy-1.*-cp{_PY.replace('.', '')}-*.whl")):
        found = sorted(wheels.glob(pattern))
        if not found:
            raise UserInputError(f"no {prefix.rstrip('-')} wheel in {wheels} after the download")
        picked.append(found[-1])
    return picked


# --------------------------------------------------------------------------- the server
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

    def _backend_dir(self) -> Path:
        """A private backend dir: python/ copied from the cache, plus the stand-ins."""
        backends = self._tmp / "backends"
        shutil.copytree(self.env.backend_dir / "python", backends / "python")
        if self.cpu_backends:
            for name in STANDINS:
                (backends / name).mkdir(parents=True)
                shutil.copyfile(_STANDIN_DIR / name / "model.py", backends / name / "model.py")
                shutil.copyfile(_STANDIN_DIR / "_standin_common.py", backends / name / "_standin_common.py")
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
                f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}", *self.extra_args]

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
            if not (_GLOG_ERROR.match(line) or "libprotobuf ERROR" in line):
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
        """The last error line of the log (about ``name`` when given), message part only."""
        lines = self.log_tail(400).splitlines()
        errors = [ln for ln in lines if _GLOG_ERROR.match(ln) or "error" in ln.lower()]
        if name:
            errors = [ln for ln in errors if name in ln] or errors
        if not errors:
            return ""
        return _clean(errors[-1])


_GLOG_ERROR = re.compile(r"^E\d{4} ")
_LOG_PREFIX = re.compile(r"^(?:[EWI]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]|\[libprotobuf \w+ [^\]]*\]) ?")


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
