"""Atomic writes: temp file beside the target, fsync, rename; failures leave the old file."""

from __future__ import annotations

import os
import stat

import pytest

from navigator.workspace.atomic import atomic_open, write_bytes, write_text


def test_write_text_creates_and_replaces(tmp_path):
    path = tmp_path / "sub" / "dir" / "f.txt"
    write_text(path, "first\n")
    assert path.read_text(encoding="utf-8") == "first\n"
    write_text(path, "ünïcode, second\n")
    assert path.read_text(encoding="utf-8") == "ünïcode, second\n"
    assert os.listdir(path.parent) == ["f.txt"]


def test_write_bytes(tmp_path):
    path = tmp_path / "f.bin"
    write_bytes(path, b"\x00\xffdata")
    assert path.read_bytes() == b"\x00\xffdata"


def test_exception_inside_leaves_the_original_and_no_temp_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("original")
    with pytest.raises(ValueError, match="boom"):
        with atomic_open(path) as f:
            f.write("half-written")
            f.flush()
            assert path.read_text() == "original"  # readers still see the old version
            raise ValueError("boom")
    assert path.read_text() == "original"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_exception_when_there_was_no_file_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(tmp_path / "new.txt", "wb") as f:
            f.write(b"x")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_failed_rename_leaves_the_original_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    path.write_text("original")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_text(path, "new")
    assert path.read_text() == "original"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_temp_file_is_beside_the_target(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_text(tmp_path / "status.yaml", "x")
    (folder, name, dst), = seen
    assert folder == str(tmp_path)  # same filesystem: the rename is atomic
    assert name.startswith(".status.yaml.") and name.endswith(".tmp")
    assert str(dst) == str(tmp_path / "status.yaml")


def test_new_file_mode_follows_umask_not_mkstemp(tmp_path):
    old = os.umask(0o027)
    try:
        write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640  # mkstemp alone gives 0o600


def test_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("old")
    path.chmod(0o755)
    write_text(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert path.read_text() == "new"
