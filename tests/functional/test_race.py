"""The race end to end on a real small ONNX model and real onnxruntime/OpenVINO runners:
structure only (which figures are screening, which are raced, what best records) -- never
which format wins or by how much, which depends on the machine's load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import navigator
from navigator.workspace import schema

pytestmark = pytest.mark.functional
FAST = dict(device="cpu", profile_budget_s=2, max_batch_size=4)


def test_every_verified_runner_is_screened_and_best_says_how_sure_it_is(tmp_path, onnx_model):
    model = onnx_model("foldable_mlp")
    result = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], **FAST)
    assert result.ok, result.failures
    profiles = {k: rs.profile for k, fs in result.status.formats.items() for rs in fs.runners.values()}
    assert all(p.status == "ok" and p.phase in ("screening", "race") and p.results for p in profiles.values())
    raced = [k for k, p in profiles.items() if p.phase == "race"]
    assert len(raced) != 1                 # a race has at least two contenders, or there was none
    for p in profiles.values():
        assert all(r.spread is not None for r in p.results)
        # a raced profile marks its one race figure, which is its peak; a screened one marks none
        marked = [r for r in p.results if r.raced]
        assert len(marked) == (p.phase == "race") and (not marked or p.peak() is marked[0])
    best = result.best
    assert best.basis == "profile" and best.runner_up is not None
    assert best.runner_up.key != best.key and isinstance(best.separated, bool) and best.margin >= 1.0
    assert (best.note is None) == (best.stable and best.separated)
    assert result.timings["process_starts"] == 3        # two format workers, then the race worker
    ws = Path(result.workspace)
    schema.validate(yaml.safe_load((ws / "status.yaml").read_text()))
    assert (ws / "jobs" / "race.log").is_file()


def test_no_race_sweeps_each_format_in_its_own_worker(tmp_path, onnx_model):
    model = onnx_model("foldable_mlp")
    result = navigator.convert(model, workdir=tmp_path, targets=["onnx", "onnx-optimized"], no_race=True, **FAST)
    assert result.ok, result.failures
    assert result.timings["process_starts"] == 2
    for fs in result.status.formats.values():
        for rs in fs.runners.values():
            assert rs.profile.status == "ok" and rs.profile.phase is None


def test_a_lone_runner_is_screened_in_its_own_worker(tmp_path, onnx_model):
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path, targets=["onnx"], **FAST)
    assert result.ok and result.timings["process_starts"] == 1      # no race worker: nothing to race
    profile = result.status.formats["onnx"].runners["onnxruntime-cpu"].profile
    assert profile.status == "ok" and profile.phase == "screening" and result.best.runner_up is None
