"""Compiler caches of a run: private to it, and started from a seed.

torch.compile's Inductor and Triton keep their caches in one shared folder of the system temp
folder by default: a worker killed mid-write (a 0-byte .so) would break every later run that reads
it. So each run gets folders of its own in a temp folder removed at its end (left-overs of runs that
died are removed at the next start); a variable the user set is kept (:func:`run_caches`).

A private cache starts empty, so every run paid Inductor's first-compile costs again: about 8 s of
the 12-14 s a small module took on 2 cores is compiling the programs that probe which vector
instructions the CPU runs (AVX512, AVX2 ...), not the module's kernels. The **seed** keeps what one
run compiled, per machine and toolchain (``${NAVIGATOR_CACHE:-~/.cache/navigator}/inductor-seed/<key>``):
a later run's private cache starts as a copy of it, and Inductor finds the probes there by their
hashes. A run publishes its cache as the seed only when none exists yet and every compiled library
in it is whole (non-empty, an ELF file), through a folder renamed into place: a seed is never
half-written. The key covers what a compiled program depends on beyond the hashes Inductor computes
itself: the CPU (its model and flags: a shared home folder may serve other machines), torch and
Python.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
PREFIX = "navigator-compile-cache-"
SEED_SKIP = ("fxgraph", "aotautograd", "locks")   # a model's own graphs, and lock files: not for other runs


def seed_root() -> Path:
    base = os.environ.get("NAVIGATOR_CACHE") or str(Path.home() / ".cache" / "navigator")
    return Path(base) / "inductor-seed"


def seed_key() -> str | None:
    """What the seed's programs depend on; None without torch (nothing to seed)."""
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    cpu = ""
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
        cpu = "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    text = "\n".join([torch_version, platform.python_version(), platform.machine(), cpu])
    return f"torch{torch_version}-py{platform.python_version()}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _whole(folder: Path) -> bool:
    """Every compiled library below ``folder`` is a whole ELF file: its section headers, which a
    linker writes last, lie inside it (a library cut short by a kill does not pass)."""
    import struct

    for lib in folder.rglob("*.so"):
        try:
            with open(lib, "rb") as f:
                head = f.read(64)
            size = lib.stat().st_size
        except OSError:
            return False
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:   # 64-bit ELF only
            return False
        order = "<" if head[5] == 1 else ">"
        shoff, = struct.unpack_from(order + "Q", head, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", head, 0x3A)
        if shoff == 0 or shoff + shentsize * shnum > size:
            return False
    return True


def _ignore(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n in SEED_SKIP or n.endswith((".lock", ".tmp"))]


def seed_into(inductor_dir: Path) -> bool:
    """Start a run's Inductor cache from the seed of this machine, where there is one."""
    key = seed_key()
    seed = seed_root() / key if key else None
    if seed is None or not seed.is_dir():
        return False
    try:
        shutil.copytree(seed, inductor_dir, dirs_exist_ok=True)
    except OSError as e:
        log.warning("inductor seed %s not copied: %s", seed, e)
        return False
    return True


def publish(inductor_dir: Path) -> bool:
    """Make a run's Inductor cache this machine's seed, when there is none yet and it is whole."""
    key = seed_key()
    if key is None or not inductor_dir.is_dir() or not any(inductor_dir.rglob("*.so")):
        return False
    seed = seed_root() / key
    if seed.exists() or not _whole(inductor_dir):
        return False
    try:
        seed.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-{os.getpid()}-", dir=seed.parent))
        shutil.copytree(inductor_dir, staging / "seed", ignore=_ignore)
        os.replace(staging / "seed", seed)          # a seed published meanwhile by another run stays
    except OSError as e:
        log.info("inductor seed not published: %s", e)
        return False
    finally:
        with contextlib.suppress(NameError):
            shutil.rmtree(staging, ignore_errors=True)
    log.info("inductor seed published: %s", seed)
    return True


@contextlib.contextmanager
def run_caches():
    """Compiler caches private to this run, in a temp folder removed at its end (left-overs of runs
    that died removed at the next start), Inductor's started from this machine's seed; a variable
    the user set is kept."""
    from navigator.execution.processes import left_by_dead_runs

    unset = [v for v in CACHE_VARIABLES if not os.environ.get(v)]
    folder = None
    if unset:
        try:
            root = Path(tempfile.gettempdir())
            for old in left_by_dead_runs(root, PREFIX):
                shutil.rmtree(old, ignore_errors=True)
            folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
        except OSError:   # no writable temp folder: the compilers' defaults
            folder = None
    inductor = None
    if folder is not None:
        for v in unset:
            os.environ[v] = str(folder / v.split("_")[0].lower())
        if "TORCHINDUCTOR_CACHE_DIR" in unset:
            inductor = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
            seed_into(inductor)
    ended = False
    try:
        yield
        ended = True
    finally:
        if folder is not None:
            for v in unset:
                os.environ.pop(v, None)
            if inductor is not None and ended:   # an interrupted run's cache may hold a library cut short
                publish(inductor)
            shutil.rmtree(folder, ignore_errors=True)
