"""Faults of the machine rather than of the model: a converter that eats memory, a
full disk, an in-process stage that hangs. Each ends with a clear reason while the
rest of the run (or the workspace) stays sound."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

import navigator
from navigator.errors import UserInputError
from navigator.workspace import atomic
from navigator.workspace import status as status_mod

from ..conftest import one_line_error
from . import plugin_converters as plugins

pytestmark = pytest.mark.functional
FAST = dict(device="cpu", profile_budget_s=0.5, max_batch_size=4)


# --------------------------------------------------------------------------- memory
@pytest.fixture
def balloon():
    with plugins.registered(plugins.Balloon, plugins.Copy):
        yield


def test_worker_over_the_memory_limit_fails_alone(balloon, tmp_path, onnx_model):
    """A converter allocating without bound is killed at --worker-memory-gb 1 (a real
    worker, real memory); the other formats finish; the peak is recorded."""
    start = time.monotonic()
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, worker_memory_gb=1, no_profile=True,
                               targets=["onnx", "onnx-balloon", "onnx-copy"], device="cpu")
    elapsed = time.monotonic() - start
    fs = result.status.formats["onnx-balloon"]
    assert fs.convert.status == "failed"
    assert "the worker exceeded the memory limit of 1 GiB in convert" in fs.convert.reason, fs.convert.reason
    assert all(rs.verify.status in ("failed", "skipped") for rs in fs.runners.values())
    # killed close to the limit: a few polls' worth of allocation past it (~130 MiB per 50 ms
    # poll here; the bound leaves room for a parent slowed down by a loaded machine)
    assert 1024 <= fs.peak_rss_mb < 2048, fs.peak_rss_mb
    for key in ("onnx", "onnx-copy"):
        assert result.status.formats[key].verified, key
        assert 0 < result.status.formats[key].peak_rss_mb < 1024
    assert result.exit_code == 1 and len(result.failures) == 1
    assert elapsed < 60
    on_disk = yaml.safe_load((result.workspace / "status.yaml").read_text())
    assert on_disk["formats"]["onnx-balloon"]["peak_rss_mb"] == fs.peak_rss_mb
    assert on_disk["config"]["worker_memory_gb"] == 1.0


def test_memory_limit_flag_through_the_cli(cli, tmp_path, onnx_model):
    r = cli("convert", onnx_model("foldable_mlp"), "--workdir", tmp_path / "wd", "--targets", "onnx", "--no-profile",
            "--device", "cpu", "--worker-memory-gb", "2.5")
    assert r.returncode == 0, r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "foldable_mlp.nav.workspace" / "status.yaml").read_text())
    assert st["config"]["worker_memory_gb"] == 2.5
    r = cli("convert", onnx_model("foldable_mlp"), "--workdir", tmp_path / "wd", "--worker-memory-gb", "-1")
    one_line_error(r, "worker_memory_gb: must be a finite number >= 0")


def test_default_memory_limit_is_a_fraction_of_the_machine():
    from navigator.config import NavigatorConfig
    from navigator.machine import GIB, physical_memory_bytes

    limit = NavigatorConfig().resolved().worker_memory_gb
    assert limit == pytest.approx(physical_memory_bytes() * 0.75 / GIB, abs=0.1)


# --------------------------------------------------------------------------- full disk
def _no_temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp")]


def _full_after(n_ok: int, match=lambda path: True):
    """An atomic_open that lets ``n_ok`` matching writes through, then fails the next
    ones with ENOSPC after writing part of them, as a full filesystem does."""
    real = atomic.atomic_open
    seen = {"n": 0}

    @contextlib.contextmanager
    def atomic_open(path, mode="w", encoding="utf-8"):
        with real(path, mode, encoding) as f:
            if match(Path(path)):
                seen["n"] += 1
                if seen["n"] > n_ok:
                    f.write(b"partial" if "b" in mode else "partial")
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            yield f

    return atomic_open


@pytest.mark.parametrize("where, n_ok", [("status.yaml", 0), ("status.yaml", 3), ("npz", 1)])
def test_injected_enospc_ends_the_run_cleanly(monkeypatch, tmp_path, onnx_model, where, n_ok):
    """ENOSPC from the atomic writer (a test double: the write error is injected at
    the file layer, in this process, so CI without a tiny filesystem covers it)
    stops the run with one WorkspaceFull error; status.yaml on disk is the last
    complete version, parseable, and no temp file is left."""
    model = onnx_model("foldable_mlp")
    match = (lambda p: p.name == "status.yaml") if where == "status.yaml" else (lambda p: p.suffix == ".npz")
    monkeypatch.setattr(atomic, "atomic_open", _full_after(n_ok, match))
    with pytest.raises(UserInputError, match="no space left on the filesystem of the workspace") as info:
        navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert "No space left on device" in info.value.one_line()
    assert "\n" not in info.value.one_line()
    ws = tmp_path / "foldable_mlp.nav.workspace"
    assert _no_temp_files(ws) == []
    if (ws / "status.yaml").exists():
        st = status_mod.load(ws / "status.yaml")     # complete and valid, from its last good save
        assert st.state in ("running", "interrupted")
    else:   # failed before the first save (samples are written first): nothing half-written either
        assert n_ok == 0 or where == "npz"
    monkeypatch.undo()
    again = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert again.ok and again.status.state == "complete"


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 1 MiB tmpfs mounted inside tmp_path (needs root and CAP_SYS_ADMIN)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command on this machine")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_real_full_filesystem(cli, tiny_fs, tmp_path, onnx_model):
    """The workdir on a real, nearly full 1 MiB tmpfs: at each fill level the CLI
    exits 2 with one `error:` line naming the full disk (never a traceback), and
    status.yaml, when there is one, is complete. The same run on free space passes."""
    model = onnx_model("foldable_mlp")
    args = ["--targets", "onnx,onnx-optimized", "--device", "cpu", "--profile-budget-s", "0.5",
            "--max-batch-size", "4"]
    lines = set()
    for free_kib in (8, 24, 48, 96):
        wd = tiny_fs / "wd"
        shutil.rmtree(wd, ignore_errors=True)
        for f in tiny_fs.glob("filler*"):
            f.unlink()
        st = os.statvfs(tiny_fs)
        fill = st.f_bavail * st.f_frsize - free_kib * 1024
        with open(tiny_fs / "filler", "wb") as f:
            f.write(b"\0" * fill)
        r = cli("convert", model, "--workdir", wd, *args, timeout=120)
        line = one_line_error(r, "No space left on device")
        lines.add(line.split("(")[0])
        status = wd / "foldable_mlp.nav.workspace" / "status.yaml"
        if status.exists():
            yaml.safe_load(status.read_text())
            status_mod.load(status)
        assert _no_temp_files(wd) == [], free_kib
    assert any("no space left on the filesystem of the workspace" in x for x in lines), lines
    for f in tiny_fs.glob("filler*"):
        f.unlink()
    shutil.rmtree(tiny_fs / "wd", ignore_errors=True)
    r = cli("convert", model, "--workdir", tiny_fs / "wd", *args, timeout=120)
    assert r.returncode == 0, r.stderr


def test_triton_on_a_full_filesystem(cli, tiny_fs, tmp_path, onnx_model):
    """`navigator triton` into a repository on a full disk: exit 2 with one line (it was an
    internal error, exit 3), and no half-written model left in the repository."""
    model = onnx_model("foldable_mlp")
    r = cli("convert", model, "--workdir", tmp_path / "wd", "--targets", "onnx", "--no-profile", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    st = os.statvfs(tiny_fs)
    with open(tiny_fs / "filler", "wb") as f:
        f.write(b"\0" * (st.f_bavail * st.f_frsize - 4 * 1024))
    r = cli("triton", tmp_path / "wd", "--repo", tiny_fs / "repo", timeout=120)
    one_line_error(r, "disk is full")
    assert not (tiny_fs / "repo").exists() or not any(p.name == "config.pbtxt" for p in (tiny_fs / "repo").rglob("*"))


# --------------------------------------------------------------------------- in-process timeout
SCRIPT = """
import sys, time, shutil
import navigator
from navigator.converters.base import Converter
from navigator.converters.registry import register

@register
class SpinsInPython(Converter):       # a loop of Python bytecode: stopped at the timeout
    name = "test_spin_here"
    source = "onnx"
    target = "onnx-spin"

    def convert(self, ctx):
        while True:
            time.sleep(0.05)

@register
class BlocksInNative(Converter):      # one long C call: cannot be stopped, abandoned
    name = "test_block_here"
    source = "onnx"
    target = "onnx-block"

    def convert(self, ctx):
        time.sleep(600)

@register
class CopyHere(Converter):
    name = "test_copy_here"
    source = "onnx"
    target = "onnx-here"

    def convert(self, ctx):
        shutil.copyfile(ctx.source, ctx.output)

start = time.monotonic()
r = navigator.convert(sys.argv[1], workdir=sys.argv[2], targets=["onnx", "onnx-spin", "onnx-block", "onnx-here"],
                      no_profile=True, device="cpu", timeout=2)
for key in ("onnx-spin", "onnx-block", "onnx-here"):
    fs = r.status.formats[key]
    print(key, fs.isolated, fs.convert.status, "|", fs.convert.reason)
print("elapsed", round(time.monotonic() - start, 1))
"""


def test_in_process_stage_timeout(tmp_path, onnx_model):
    """Converters of the user's __main__ run in the calling process: a stage past
    --timeout fails with the reason; Python code is stopped, native code abandoned;
    the other formats finish and the script ends."""
    script = tmp_path / "convert_here.py"
    script.write_text(textwrap.dedent(SCRIPT))
    r = subprocess.run([sys.executable, str(script), str(onnx_model("foldable_mlp")), str(tmp_path / "wd")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    assert out["onnx-spin"].startswith("False failed | timed out after 2 s in convert (--timeout) in the calling "
                                       "process; its thread was stopped"), out
    assert out["onnx-block"].startswith("False failed | timed out after 2 s in convert (--timeout) in the calling "
                                        "process; it did not stop within 5 s"), out
    assert "thread was abandoned" in out["onnx-block"]
    assert out["onnx-here"].startswith("False ok"), out
    assert float(out["elapsed"]) < 40
    assert "Traceback" not in r.stderr and "Exception in thread" not in r.stderr, r.stderr


# --------------------------------------------------------------------------- writes outside tmp_path
def test_the_stray_write_check_catches_home_and_cwd(monkeypatch, tmp_path):
    """The after-test check of conftest.py (run here on a stand-in home and current
    directory inside tmp_path, so the real ones stay untouched) flags a new cache
    folder or file in home and a default workdir in the current directory, and lets
    Navigator's declared cache through."""
    from . import conftest

    home, cwd, own = tmp_path / "home", tmp_path / "cwd", tmp_path / "own"
    for d in (home / ".cache" / "pip", cwd, own):
        d.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("NAVIGATOR_CACHE", raising=False)
    before = conftest._outside_entries()
    (home / ".cache" / "navigator" / "triton-2.51").mkdir(parents=True)     # declared: allowed
    (home / ".config" / "matplotlib").mkdir(parents=True)                  # declared, in a new ~/.config
    (home / ".cache" / "somelib").mkdir()                                    # new cache folder
    (home / ".navigatorrc").write_text("x")                                  # new file in home
    (cwd / "navigator_workdir").mkdir()                                      # a run without --workdir
    (cwd / ".pytest_cache").mkdir()                                          # pytest's own: allowed
    stray = conftest._stray(before, conftest._outside_entries(), own)
    assert stray == sorted([str(home / ".cache" / "somelib"), str(home / ".navigatorrc"),
                            str(cwd / "navigator_workdir")]), stray
