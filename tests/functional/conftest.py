"""Functional tests write only into their tmp_path: checked after every test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_IGNORED = (".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".egg-info", "build", "dist", ".whl")


def _repo_files() -> set[str]:
    """Files in the repository that git does not ignore and does not track yet."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:   # not a git checkout (an sdist): nothing to compare
        return set()
    return {line[3:] for line in out.stdout.splitlines() if not any(part in line for part in _IGNORED)}


@pytest.fixture(autouse=True)
def nothing_written_outside_tmp():
    before = _repo_files()
    yield
    added = _repo_files() - before
    assert not added, f"the test wrote into the repository: {sorted(added)[:5]}"
