"""Functional tests write only into their tmp_path: checked after every test.

Two checks, both cheap (a `git status` and a few dozen `listdir` calls per test):

* the repository: files git does not ignore and does not track yet;
* the places a stray write would land elsewhere: the current directory (also what
  git ignores there, e.g. a default ``navigator_workdir/``) and the user's home
  with its cache/config folders, two levels deep: a new file or folder there fails
  the test, except in the caches Navigator declares (``$NAVIGATOR_CACHE`` or
  ``~/.cache/navigator``: the serve venv) and those that frameworks create on
  their own import (``_FRAMEWORK_CACHES``).

Not covered: writes deeper than two levels into folders that already exist
(e.g. a new file in ``~/.cache/pip/http/…``), changes to existing files, and
anything outside home and the current directory. Catching those would take a
file-system watcher (fanotify needs root) or a full tree walk per test. Each session
has a home of its own (tests/conftest.py), so another suite or a person using the
real home at the same time cannot make the check fail.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_IGNORED = (".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".egg-info", "build", "dist", ".whl")
# Created by the frameworks themselves when imported or first used, not by Navigator.
_FRAMEWORK_CACHES = (".keras", ".cache/matplotlib", ".config/matplotlib", ".cache/torch", ".cache/pip",
                     ".nv", ".triton", ".cache/huggingface", ".cache/tensorflow", ".python_history",
                     ".cache/Microsoft",   # onnxruntime's telemetry db (DeveloperTools/.onnxruntime)
                     "intel",              # OpenVINO's cache on first compile
                     ".rustup")            # pip's user agent runs `rustc --version`; rustup's proxy keeps settings
_CWD_IGNORED = (".pytest_cache", "__pycache__", ".hypothesis", ".coverage")


def _repo_files() -> set[str]:
    """Files in the repository that git does not ignore and does not track yet."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:   # not a git checkout (an sdist): nothing to compare
        return set()
    return {line[3:] for line in out.stdout.splitlines() if not any(part in line for part in _IGNORED)}


def _declared_caches(home: Path) -> list[Path]:
    caches = [home / ".cache" / "navigator"] + [home / c for c in _FRAMEWORK_CACHES]
    if os.environ.get("NAVIGATOR_CACHE"):
        caches.append(Path(os.environ["NAVIGATOR_CACHE"]))
    return caches


def _entries(folder: Path, depth: int) -> set[str]:
    """Paths under ``folder``, ``depth`` levels deep (symlinks not followed)."""
    found: set[str] = set()
    todo = [(folder, 0)]
    while todo:
        current, level = todo.pop()
        try:
            with os.scandir(current) as it:
                for entry in it:
                    found.add(entry.path)
                    if level + 1 < depth and entry.is_dir(follow_symlinks=False):
                        todo.append((Path(entry.path), level + 1))
        except OSError:
            continue
    return found


def _outside_entries() -> set[str]:
    home = Path.home()
    paths: set[str] = set()
    for folder in (home, home / ".cache", home / ".config", home / ".local" / "share"):
        paths |= _entries(folder, 2)
    cwd = Path.cwd()
    if cwd != home:
        paths |= {p for p in _entries(cwd, 1) if Path(p).name not in _CWD_IGNORED}
    return paths


def _stray(before: set[str], after: set[str], tmp_path: Path) -> list[str]:
    home = Path.home()
    allowed = [str(p) for p in _declared_caches(home)] + [str(tmp_path)]
    # a cache's own folder, or a folder made only to hold one (``~/.config`` for ``~/.config/matplotlib``)
    return sorted(p for p in after - before
                  if not any(p == a or p.startswith(a + os.sep) or a.startswith(p + os.sep) for a in allowed))


# The quick check (`pytest -m "not slow"`: the unit tests and these modules, a few minutes on 2
# cores): ONNX models through onnxruntime, the CLI's and the API's contracts, bad input. Every other
# functional module (Triton servers, Ray, torch.compile, TensorFlow, Hugging Face, trained models,
# profiles) is marked slow here, besides the tests marked slow by hand.
QUICK_MODULES = {"test_api", "test_bad_input", "test_convert_cli", "test_debug", "test_errors_cli", "test_gate",
                 "test_onnx_optimized", "test_plugins", "test_format_plugin", "test_verdicts", "test_precision_edges"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem not in QUICK_MODULES and "functional" in item.path.parts:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def nothing_written_outside_tmp(tmp_path):
    before = _repo_files()
    outside = _outside_entries()
    yield
    added = _repo_files() - before
    assert not added, f"the test wrote into the repository: {sorted(added)[:5]}"
    stray = _stray(outside, _outside_entries(), tmp_path)
    assert not stray, f"the test wrote outside its tmp_path (home or the current directory): {stray[:5]}"


@pytest.fixture
def pb_utils(monkeypatch):
    """A fake ``triton_python_backend_utils`` in sys.modules (tests/functional/triton_fakes.py)."""
    import sys

    from .triton_fakes import fake_pb_utils

    fake = fake_pb_utils()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    return fake
