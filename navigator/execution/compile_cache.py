"""Compiler caches of a run: private to it, and started from a seed.

torch.compile's Inductor and Triton keep their caches in one shared folder of the system temp
folder by default: a worker killed mid-write (a 0-byte .so) would break every later run that reads
it. So each run gets folders of its own in a temp folder removed at its end (left-overs of runs that
died are removed at the next start); a variable the user set is kept (:func:`run_caches`).

A private cache starts empty, so every run paid Inductor's compile costs again: about 8 s of the
12-14 s a small module took on 2 cores is compiling the programs that probe which vector
instructions the CPU runs (AVX512, AVX2 ...), the rest the module's own kernels, compiled again on
every run of the same model. The **seed** keeps what runs compiled, per machine and toolchain
(``${NAVIGATOR_CACHE:-~/.cache/navigator}/inductor-seed/<key>``): a later run's private cache starts
as a copy of it, and Inductor finds the probes and the graphs it compiled before by their hashes
(its own keys: the graph, the inputs' shapes and dtypes, its config), as its default shared folder
would let it. A run adds to the seed only when it ended and every compiled library in its cache is
whole (non-empty, an ELF file); each file goes in under a temp name renamed into place, libraries
and code before the graph entries that name them, and none already there is replaced; a seed of
:data:`SEED_MAX_MB` MiB or more (``NAVIGATOR_INDUCTOR_SEED_MB``; 0 keeps no graphs) takes the CPU
probes only. The key covers what a compiled program depends on beyond the hashes Inductor computes
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
SKIP = ("locks",)                       # lock files: the run's own
GRAPHS = ("fxgraph", "aotautograd")     # a model's compiled graphs, which name the code and libraries beside them
SEED_MAX_MB = 256


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


def _skipped(name: str) -> bool:
    return name in SKIP or name.endswith((".lock", ".tmp"))


def _graph(rel: Path) -> bool:
    return any(part in GRAPHS for part in rel.parts)


def _size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def seed_into(inductor_dir: Path) -> bool:
    """Start a run's Inductor cache from the seed of this machine, where there is one."""
    key = seed_key()
    seed = seed_root() / key if key else None
    if seed is None or not seed.is_dir():
        return False
    try:
        shutil.copytree(seed, inductor_dir, dirs_exist_ok=True,
                        ignore=lambda _, names: [n for n in names if _skipped(n)])
    except OSError as e:    # a file another run put in meanwhile may be missing: Inductor compiles it again
        log.warning("inductor seed %s not copied whole: %s", seed, str(e)[:300])
        return False
    return True


def publish(inductor_dir: Path) -> int:
    """Add what a run compiled to this machine's seed, when every library in its cache is whole;
    the number of files added."""
    key = seed_key()
    if key is None or not inductor_dir.is_dir() or not any(inductor_dir.rglob("*.so")):
        return 0
    if not _whole(inductor_dir):
        return 0
    seed = seed_root() / key
    said = os.environ.get("NAVIGATOR_INDUCTOR_SEED_MB")
    try:
        limit = float(said or SEED_MAX_MB)
    except ValueError:
        log.warning("NAVIGATOR_INDUCTOR_SEED_MB=%r is not a number: the seed's limit is %d MiB", said, SEED_MAX_MB)
        limit = SEED_MAX_MB
    graphs = limit > 0 and (not seed.is_dir() or _size_mb(seed) < limit)
    kept = [f.relative_to(inductor_dir) for f in inductor_dir.rglob("*") if f.is_file()]
    kept = [rel for rel in kept if not any(_skipped(part) for part in rel.parts)]
    if not graphs:
        kept = [rel for rel in kept if not _graph(rel)]
        log.info("inductor seed %s: no graphs added (NAVIGATOR_INDUCTOR_SEED_MB %g)", seed, limit)
    # a graph entry names code and libraries: those go in first, so a seed never holds one without them
    kept.sort(key=_graph)
    added = 0
    try:
        for rel in kept:
            target = seed / rel
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
            os.close(fd)
            try:
                shutil.copy2(inductor_dir / rel, tmp)
                os.replace(tmp, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            added += 1
    except OSError as e:
        log.info("inductor seed %s: %d files added, then %s", seed, added, str(e)[:300])
        return added
    if added:
        log.info("inductor seed %s: %d files added", seed, added)
    return added


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
