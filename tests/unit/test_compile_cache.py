"""navigator.execution.compile_cache: the seed of a run's Inductor cache is whole or not published,
never overwritten, and keeps no model's graphs. Real ELF libraries (numpy's) stand for compiled ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from navigator.execution import compile_cache


def _a_library() -> Path:
    return next(Path(np.__file__).parent.rglob("*.so"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NAVIGATOR_CACHE", str(tmp_path / "navcache"))
    run = tmp_path / "run" / "torchinductor"
    (run / "ab").mkdir(parents=True)
    (run / "fxgraph" / "xy").mkdir(parents=True)
    shutil.copyfile(_a_library(), run / "ab" / "probe.so")
    (run / "fxgraph" / "xy" / "graph").write_text("a model's graph")
    return run


def test_a_whole_cache_is_published_once_without_graphs_and_seeds_the_next_run(cache, tmp_path):
    assert compile_cache.publish(cache)
    seed = compile_cache.seed_root() / compile_cache.seed_key()
    assert (seed / "ab" / "probe.so").read_bytes() == (cache / "ab" / "probe.so").read_bytes()
    assert not (seed / "fxgraph").exists()
    (cache / "ab" / "probe.so").write_bytes(b"")       # a later run's cache never replaces a seed
    assert not compile_cache.publish(cache) and (seed / "ab" / "probe.so").stat().st_size > 0
    fresh = tmp_path / "next" / "torchinductor"
    assert compile_cache.seed_into(fresh) and (fresh / "ab" / "probe.so").is_file()


@pytest.mark.parametrize("cut", ["empty", "half", "not elf"])
def test_a_library_cut_short_keeps_the_cache_from_being_published(cache, cut):
    lib = cache / "ab" / "probe.so"
    data = lib.read_bytes()
    lib.write_bytes({"empty": b"", "half": data[: len(data) // 2], "not elf": b"#!" + data[2:]}[cut])
    assert not compile_cache.publish(cache)
    assert not (compile_cache.seed_root() / compile_cache.seed_key()).exists()
