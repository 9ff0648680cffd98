"""Load: 20 conversions in a row in one process (the Python API, as a training or
CI script would call it) leave no growth in memory, open files, threads, child
processes or logging handlers."""

from __future__ import annotations

import gc
import logging
import os
import time

import pytest

import navigator
from navigator.converters.base import Converter
from navigator.converters.registry import registry

from ..conftest import models

pytestmark = [pytest.mark.functional, pytest.mark.slow]
RUNS = 20
RSS_GROWTH_MB = 50          # allowed between run 5 and run 20 (measured: ~0.1 MB)


def _proc_status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _children() -> list[int]:
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return out


def _snapshot() -> dict:
    gc.collect()
    return {"rss_mb": _proc_status("VmRSS") / 1024, "fds": sorted(os.listdir("/proc/self/fd")),
            "threads": _proc_status("Threads"), "children": _children(),
            "handlers": len(logging.getLogger("navigator").handlers) + len(logging.getLogger().handlers)}


class CopyInProcess(Converter):
    """Copies the model, and claims to live in the user's __main__: the pipeline runs
    it in the calling process (in a thread of its own), so that path is loaded too."""

    name = "test_load_copy_here"
    source = "onnx"
    target = "onnx-here"
    requires = ("onnx",)

    def convert(self, ctx):
        import shutil

        shutil.copyfile(ctx.source, ctx.output)


CopyInProcess.__module__ = "__main__"


@pytest.fixture
def in_process_converter(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["__main__"], "CopyInProcess", CopyInProcess, raising=False)
    registry.register(CopyInProcess)
    yield
    registry.unregister(CopyInProcess.name)


def test_twenty_conversions_leak_nothing(tmp_path, in_process_converter):
    names = ["token_classifier", "topk_model", "foldable_mlp", "small_cnn"]   # the seeded ones
    paths = [models.save(models.ALL[names[i % len(names)]](seed=i), tmp_path / "models" / f"m{i}.onnx")
             for i in range(RUNS)]
    before = _snapshot()
    seen = []
    start = time.monotonic()
    for i, path in enumerate(paths):
        result = navigator.convert(path, workdir=tmp_path / "wd", targets=["onnx", "onnx-here"], device="cpu",
                                   profile_budget_s=0.2, max_batch_size=2, profile_batch_sizes=[1])
        assert result.ok, (i, result.failures)
        assert result.status.formats["onnx-here"].isolated is False
        seen.append(_snapshot())
    elapsed = time.monotonic() - start
    after = seen[-1]
    growth = after["rss_mb"] - seen[4]["rss_mb"]
    print(f"\n{RUNS} conversions in {elapsed:.1f} s; RSS {before['rss_mb']:.1f} -> {seen[4]['rss_mb']:.1f} (run 5) "
          f"-> {after['rss_mb']:.1f} MB (run {RUNS}); fds {len(before['fds'])} -> {len(after['fds'])}; threads "
          f"{before['threads']} -> {after['threads']}")
    assert growth < RSS_GROWTH_MB, [round(s["rss_mb"], 1) for s in seen]
    # open files: exactly the descriptors the process had after the first run (none left by a run; the
    # first run's onnxruntime session, made by the ONNX check of the in-process edge, opens onnxruntime's own
    # ~/.cache/Microsoft/DeveloperTools database once per process, as a library's thread pool starts once)
    assert after["fds"] == seen[0]["fds"], (seen[0]["fds"], after["fds"])
    assert len(seen[0]["fds"]) - len(before["fds"]) <= 3, (before["fds"], seen[0]["fds"])
    assert after["children"] == [] and all(s["children"] == [] for s in seen), "a worker outlived its run"
    # threads: no more than after the first run (a library may start a pool once)
    assert all(s["threads"] <= seen[0]["threads"] for s in seen), [s["threads"] for s in seen]
    assert after["handlers"] == before["handlers"]
    assert elapsed < 240   # ~15-25 s on an idle 2-core machine; the bound only catches a hang
