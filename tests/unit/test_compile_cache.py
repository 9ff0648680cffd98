"""navigator.execution.compile_cache: a run adds to its machine's Inductor seed only when every library
in its cache is whole, never replaces a file there, and adds no graphs once the seed is full. Real ELF
libraries (numpy's) stand for compiled ones."""

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


def test_a_whole_cache_seeds_the_next_run_and_later_runs_add_to_it(cache, tmp_path):
    assert compile_cache.publish(cache) == 2
    seed = compile_cache.seed_root() / compile_cache.seed_key()
    assert (seed / "ab" / "probe.so").read_bytes() == (cache / "ab" / "probe.so").read_bytes()
    assert (seed / "fxgraph" / "xy" / "graph").read_text() == "a model's graph"
    fresh = tmp_path / "next" / "torchinductor"
    assert compile_cache.seed_into(fresh) and (fresh / "fxgraph" / "xy" / "graph").is_file()
    # the next run compiled another graph, and holds another copy of a file the seed has
    (fresh / "fxgraph" / "zz").mkdir()
    (fresh / "fxgraph" / "zz" / "graph").write_text("another model's graph")
    (fresh / "fxgraph" / "xy" / "graph").write_text("changed")
    (fresh / "locks").mkdir()
    (fresh / "locks" / "x.lock").write_text("")
    assert compile_cache.publish(fresh) == 1
    assert (seed / "fxgraph" / "zz" / "graph").read_text() == "another model's graph"
    assert (seed / "fxgraph" / "xy" / "graph").read_text() == "a model's graph"
    assert not (seed / "locks").exists() and not list(seed.rglob("*.tmp"))


def test_a_full_seed_takes_no_more_graphs(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("NAVIGATOR_INDUCTOR_SEED_MB", "0")
    assert compile_cache.publish(cache) == 1
    seed = compile_cache.seed_root() / compile_cache.seed_key()
    assert (seed / "ab" / "probe.so").is_file() and not (seed / "fxgraph").exists()


@pytest.mark.parametrize("cut", ["empty", "half", "not elf"])
def test_a_library_cut_short_keeps_the_cache_from_being_published(cache, cut):
    lib = cache / "ab" / "probe.so"
    data = lib.read_bytes()
    lib.write_bytes({"empty": b"", "half": data[: len(data) // 2], "not elf": b"#!" + data[2:]}[cut])
    assert not compile_cache.publish(cache)
    assert not (compile_cache.seed_root() / compile_cache.seed_key()).exists()
