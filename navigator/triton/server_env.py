"""The Triton server's own environment (``navigator serve --prepare``): a cached venv
with the real ``tritonserver`` 2.51 of the ``nvidia-pytriton`` wheel, tritonclient
2.51's ``perf_analyzer`` and ``numpy<2``, beside (never inside) the project's
environment. See :mod:`navigator.triton.server` for the layout and the contract.
Only the standard library is imported here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError

TRITON_VERSION = "2.51"
PYTRITON = "nvidia-pytriton==0.7.0"
TRITONCLIENT = "tritonclient==2.51.0"
NUMPY = "numpy<2"
REQUIREMENTS = (PYTRITON, TRITONCLIENT, NUMPY)
_LAYOUT = 1                                   # bump when the cache layout changes
_PY = f"{sys.version_info.major}.{sys.version_info.minor}"
_LIBS = {"libcudart.so.12": "libcudart-*.so.12*", "libb64.so.0d": "libb64-*.so.0d*"}


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
    perf_analyzer_command: Path | None = None   # a wrapper that runs by hand: sets the library path first

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


def _library_dirs(venv: Path, lib_dir: Path) -> list[str]:
    """What tritonserver and perf_analyzer link from: Python's libdir, the wheel's libs, our links."""
    libs = [sysconfig.get_config_var("LIBDIR") or "", str(_site_packages(venv) / "nvidia_pytriton.libs"),
            str(lib_dir)]
    return [p for p in libs if p]


def _env_for(venv: Path, lib_dir: Path) -> dict:
    old = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": os.pathsep.join(_library_dirs(venv, lib_dir) + ([old] if old else [])),
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
    """The project's site-packages, seen after the venv's own (its numpy<2 wins); and no
    bytecode written by the backend stubs: a ``__pycache__`` that the stub's import of
    ``<version>/model.py`` leaves in the repository changes the model folder, so Triton
    loads the model again when an ensemble's load re-polls it (the stub's embedded Python
    ignores PYTHONDONTWRITEBYTECODE, a ``.pth`` line is read)."""
    site = _site_packages(venv)
    text = "".join(f"{p}\n" for p in _project_site_paths() if Path(p).resolve() != site.resolve())
    for pth, want in ((site / "zz_navigator_project_site.pth", text),
                      (site / "navigator_no_bytecode.pth", "import sys; sys.dont_write_bytecode = True\n")):
        if not pth.is_file() or pth.read_text() != want:
            pth.write_text(want)


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
    return dataclasses.replace(env, perf_analyzer_command=_perf_analyzer_wrapper(root, env))


def _perf_analyzer_wrapper(root: Path, env: ServerEnv) -> Path | None:
    """``<root>/bin/perf_analyzer``: the cached binary with the libraries it links (libb64.so.0d
    ...) on its path, so the command a user copies runs as printed; rewritten when it differs."""
    if env.perf_analyzer is None:
        return None
    libs = _library_dirs(root / "venv", env.lib_dir)
    text = ("#!/bin/sh\n# perf_analyzer of Triton's client, with the libraries it needs (navigator serve --prepare)\n"
            f'LD_LIBRARY_PATH="{os.pathsep.join(libs)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
            f'exec "{env.perf_analyzer}" "$@"\n')
    wrapper = root / "bin" / "perf_analyzer"
    try:
        if not wrapper.is_file() or wrapper.read_text(encoding="utf-8") != text:
            wrapper.parent.mkdir(exist_ok=True)
            tmp = wrapper.with_name(f".perf_analyzer.{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.chmod(0o755)
            os.replace(tmp, wrapper)
    except OSError:   # a read-only cache: the binary with env (ServerEnv.env) still runs
        return None
    return wrapper


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
