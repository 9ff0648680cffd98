"""Runtime options as profile candidates (navigator.execution.tuning) on a real small ONNX model and
real onnxruntime runners: the race's winner is tuned, what the tuning keeps is verified, and the kept
options reach runner(), reproduce.sh and the Triton config. Which options win depends on the machine,
so the end-to-end test checks structure only; the decisions are driven by a deterministic window
function (a stand-in for the clock, as the racing unit tests use), with real runners and real
verification."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

import navigator
from navigator.execution import tuning
from navigator.execution.jobs import Job
from navigator.execution.profiling import batch_of
from navigator.execution.stages import runner_options, stored_sample
from navigator.runners.onnxruntime import OnnxruntimeRunner
from navigator.workspace import status as status_mod
from navigator.workspace.layout import Workspace

pytestmark = pytest.mark.functional
FAST = dict(device="cpu", profile_budget_s=2, max_batch_size=4)


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    from ..conftest import models

    tmp = tmp_path_factory.mktemp("tuning")
    model = models.save(models.foldable_mlp(), tmp / "foldable_mlp.onnx")
    # tuned whatever else runs on the machine (a loaded one skips the tuning: test_a_loaded_machine_...)
    with mock.patch.dict(os.environ, {"NAVIGATOR_IGNORE_LOAD": "1"}):
        result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx", "onnx-optimized"], **FAST)
    assert result.ok, result.failures
    return result


def test_the_race_winner_is_tuned_and_what_it_keeps_travels(raced):
    ws = Path(raced.workspace)
    tuned = [(k, rk, rs) for k, fs in raced.status.formats.items() for rk, rs in fs.runners.items()
             if rs.profile.tuning]
    assert len(tuned) == 1, "exactly the race's winner is tuned"
    key, rkey, rs = tuned[0]
    assert (key, rkey) == (raced.best.key, raced.best.runner)     # the pick best makes
    record = rs.profile.tuning
    want = OnnxruntimeRunner.tuning_candidates("cpu", None, tuning.cpus())
    assert [c["options"] for c in record["candidates"]] == want
    assert record["defaults"]["throughput"] > 0 and record["rounds"] >= 1 and record["reason"]
    line = next(x for x in ws.joinpath(f"formats/{key}/reproduce.sh").read_text().splitlines()
                if x.startswith(f"# run as {rkey} verified it:"))
    runner = raced.runner(key, rkey)
    try:
        if rs.profile.options:      # kept: verified, named where it is served
            assert record["verify"] == "ok" and rs.profile.options in [c["options"] for c in record["candidates"]]
            assert "from its profile's tuning" in line and json.dumps(rs.profile.options, sort_keys=True) in line
            assert rs.profile.options.items() <= runner.options.items()
        else:                       # the defaults stayed: nothing else changed
            assert "from its profile's tuning" not in line
            assert not set(runner.options) & {k for c in want for k in c}
    finally:
        runner.deactivate()


def _leader(raced):
    ws = Workspace(Path(raced.workspace))
    job = Job.from_dict(json.loads(ws.job_file("race").read_text()))
    task = next(t for t in job.tasks if t.key == raced.best.key)
    spec = next(s for s in task.runners if s.key == raced.best.runner)
    return ws, task, spec


def _tune(ws, task, spec, fast: str | tuple[str, ...], max_batch=None, watch=None, level=(), defaults_grow=False):
    """Tune with windows whose latencies are fixed: ``fast`` (a candidate's label, or several) runs at
    1 ms a batch whatever its size, the defaults and ``level`` (labels) at 2 ms, every other candidate
    at 3 ms; ``defaults_grow``: the defaults take 1 ms a sample instead (2 ms at batch 2, 8 ms at 8)."""
    fast = (fast,) if isinstance(fast, str) else fast
    speeds: dict = {}
    loaded = []

    def open_runner(cand, seconds):
        runner = OnnxruntimeRunner(ws.abs(task.artifact), **runner_options(task, cand, task.io_names, None)).activate()
        loaded.append(runner)

        def infer(feeds):
            return runner.infer(feeds)

        speeds[infer] = seconds
        return runner, infer

    def load(cand):
        own = {k: v for k, v in cand.options.items() if k not in spec.options}
        return open_runner(cand, 0.001 if tuning.label(own) in fast else 0.002 if tuning.label(own) in level else 0.003)

    def window(infer, f):
        infer(f)    # a real inference of the real runner: its options must work
        seconds = speeds.get(infer, 0.001)   # unknown: the verified runner of the kept options, climbing
        if defaults_grow and infer is infer_defaults:
            seconds = 0.001 * next(iter(f.values())).shape[task.profile.batch_dim]
        return [seconds] * 5

    default, infer = open_runner(spec, 0.002)
    infer_defaults = infer
    sample = stored_sample(ws, task.io_names)
    try:
        return tuning.tune(ws, task, spec, infer, lambda n: batch_of(sample, task.profile.batch_dim, n), 2,
                           (1000.0, 0.01), 30.0, window, load, max_batch=max_batch, watch=watch), loaded[1:]
    finally:
        default.deactivate()


def test_a_faster_candidate_is_kept_once_verified(raced):
    ws, task, spec = _leader(raced)
    record, loaded = _tune(ws, task, spec, "intra_op_num_threads=1" if tuning.cpus() > 1 else "execution_mode=parallel")
    kept = record["options"]
    assert record["verify"] == "ok" and kept in ({"intra_op_num_threads": 1}, {"execution_mode": "parallel"})
    assert "separated from the defaults" in record["reason"] and record["figure"]["throughput"] == pytest.approx(2000.0)
    assert all(not r.is_active for r in loaded)          # every candidate's runner was let go
    assert record["defaults"]["out"].startswith("separated from")
    assert "batch size moved" not in record["reason"] and record["figure"]["batch_size"] == 2
    assert record["gain"] == pytest.approx(2.0)          # 1 ms a batch against the defaults' 2 ms


def test_kept_options_move_the_batch_size_where_they_are_fastest(raced):
    """The kept candidate runs a batch in 1 ms whatever its size, so each doubling is ahead: the climb
    from batch 2 goes to the largest size allowed (8) and the figure is measured there."""
    ws, task, spec = _leader(raced)
    fast = "intra_op_num_threads=1" if tuning.cpus() > 1 else "execution_mode=parallel"
    record, _ = _tune(ws, task, spec, fast, max_batch=8)
    assert record["options"] and record["figure"]["batch_size"] == 8
    assert record["figure"]["throughput"] == pytest.approx(8000.0)
    assert "its best batch size moved from 2 to 8 with them" in record["reason"]
    assert record["gain"] == pytest.approx(8.0)          # 2x the defaults at batch 2, then 4x by the climb


def test_a_load_that_arrives_during_the_tuning_stops_it(raced):
    """Other processes load the machine once the tuning began (the watch: a test double of
    :class:`tuning.LoadWatch` that reads 1.5 busy cores when first asked, after the first race round;
    busy loops could not be timed to arrive mid-tuning): it stops there, unsettled though the windows
    would separate the fast candidate, and the defaults stay with a reason that says so."""

    class Arriving(tuning.LoadWatch):
        def __init__(self):
            self.busy = None

        def __call__(self):
            self.busy = 1.5
            return "other processes kept 1.5 cores busy"

    ws, task, spec = _leader(raced)
    record, loaded = _tune(ws, task, spec, "intra_op_num_threads=1" if tuning.cpus() > 1 else "execution_mode=parallel",
                           watch=Arriving())
    assert "options" not in record and "verify" not in record and record["rounds"] == 2
    assert record["reason"].startswith("not tuned: other processes kept 1.5 of the")
    assert "as its tuning ran (stopped after round 2)" in record["reason"]
    assert all(not r.is_active for r in loaded)


def test_fewer_threads_level_with_the_defaults_climb_to_a_larger_batch(raced):
    """One thread a call, level with the defaults at their peak (batch 2), runs a batch in 2 ms whatever
    its size while the defaults take 1 ms a sample: the defaults' peak was found with their own threads,
    so the tied candidate climbs (larger sizes only) to batch 8 and, separated there from the defaults at
    batch 2 and at batch 8, is kept: 4x the defaults at their peak. Where the defaults keep pace at the
    larger size (2 ms a batch too), the climb's win is the defaults' as much and nothing is kept; nor
    does a tied candidate that does not give a call fewer threads (parallel mode) climb."""
    ws, task, spec = _leader(raced)
    if tuning.cpus() < 2:
        pytest.skip("one core: no thread-count candidate")
    record, _ = _tune(ws, task, spec, (), max_batch=8, level=("intra_op_num_threads=1",), defaults_grow=True)
    assert record["options"] == {"intra_op_num_threads": 1} and record["verify"] == "ok"
    assert record["figure"]["batch_size"] == 8 and record["gain"] == pytest.approx(4.0, rel=0.01)
    assert record["reason"].startswith("intra_op_num_threads=1 level with the defaults at batch 2 (1.00x")
    assert "its best batch size moved from 2 to 8 with them, and separated there from the defaults" in record["reason"]
    record, _ = _tune(ws, task, spec, (), max_batch=8, level=("intra_op_num_threads=1",))
    assert "options" not in record and record["reason"].startswith("the defaults were not beaten")
    record, _ = _tune(ws, task, spec, (), max_batch=8, level=("execution_mode=parallel",), defaults_grow=True)
    assert "options" not in record and record["reason"].startswith("the defaults were not beaten")


def test_a_faster_candidate_that_cannot_be_shown_right_is_not_kept(raced):
    """The same race, but every sample was used for calibration: the candidate's verification is
    inconclusive (it could not have failed on that data), so the defaults stay."""
    ws, task, spec = _leader(raced)
    task.verify.calibrated_on = [p.stem for p in ws.input_files()]
    record, _ = _tune(ws, task, spec, "execution_mode=parallel")
    assert "options" not in record and record["verify"] == "inconclusive"
    assert "did not pass verification" in record["reason"] and "the defaults stay" in record["reason"]


def test_a_tie_keeps_the_defaults(raced):
    ws, task, spec = _leader(raced)
    record, _ = _tune(ws, task, spec, "none of them")    # every candidate slower: the defaults win
    assert "options" not in record and "verify" not in record and record["reason"].startswith("the defaults won")


def test_candidates_tied_with_each_other_and_ahead_of_the_defaults_keep_the_leader(raced):
    """Every candidate twice as fast as the defaults and equal to each other: the defaults are out
    at once; the race ends unsettled (a tie between the candidates), and its leader is kept -- shown
    ahead of the defaults -- not the defaults."""
    ws, task, spec = _leader(raced)
    labels = tuple(tuning.label(c) for c in tuning.candidates(spec))
    if len(labels) < 2:
        pytest.skip(f"{len(labels)} tuning candidate on {tuning.cpus()} core(s): no two to tie")
    record, _ = _tune(ws, task, spec, labels)
    assert record["defaults"]["out"] and record["verify"] == "ok" and tuning.label(record["options"]) in labels
    assert record["reason"].startswith("the defaults were out (") and "led the candidates left" in record["reason"]
    assert "a tie" in record["reason"]
    assert record["gain"] == pytest.approx(2.0, rel=0.01)


def test_kept_options_become_the_backends_parameters(raced, tmp_path):
    """A workspace whose onnx runner kept intra_op_num_threads=1 and execution_mode=parallel: Triton's
    onnxruntime backend gets them as its own parameters, and the note says why."""
    ws = Path(raced.workspace)
    st = status_mod.load(ws / "status.yaml")
    rs = st.formats["onnx"].runners["onnxruntime-cpu"]
    rs.profile.options = {"intra_op_num_threads": 1, "execution_mode": "parallel"}
    status_mod.save(st, ws / "status.yaml")
    try:
        result = navigator.load(ws)
        repo = result.to_triton(tmp_path / "repo", formats=["onnx"])
        cfg = text_format.Parse(next((tmp_path / "repo").glob("*/config.pbtxt")).read_text(), mc.ModelConfig())
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        assert params.items() >= {"intra_op_thread_count": "1", "execution_mode": "1"}.items()
        assert any("measured and verified with execution_mode=parallel, intra_op_num_threads=1" in n
                   for n in repo.notes)
        runner = result.runner("onnx", "onnxruntime-cpu")
        try:
            assert runner.settings()["execution_mode"] == "parallel"
            x = {n: np.asarray(v) for n, v in stored_sample(Workspace(ws), {}).items()}
            assert runner.infer(x)
        finally:
            runner.deactivate()
    finally:
        rs.profile.options = None
        status_mod.save(st, ws / "status.yaml")


def test_a_loaded_machine_screens_in_fewer_windows_and_tunes_nothing(tmp_path):
    """Other processes keeping the cores busy (busy loops, five per core: whatever else runs, they
    hold more than a quarter of the cores) from before the run starts: each of the race worker's
    screenings, the first too (the load over the run so far comes with its job), stops at 3 windows a
    batch size, largest first, and the winner is not tuned -- options measured under that load would fit
    the load, not the server -- which its profile says; nothing is kept. A run whose only pair is screened
    in its format's worker screens it the same way. (A 1024-wide MatMul: windows that last their 30 ms,
    so the screenings outlast the 0.25 s a load is read over.)"""
    from ..conftest import models

    model = models.save(models.foldable_mlp(features=1024), tmp_path / "foldable_mlp.onnx")
    busy = _others_busy(5 * tuning.cpus())
    try:
        env = {k: v for k, v in os.environ.items() if k != "NAVIGATOR_IGNORE_LOAD"}
        with mock.patch.dict(os.environ, env, clear=True):
            result = navigator.convert(model, workdir=tmp_path / "wd", targets=["onnx", "onnx-optimized"],
                                       **(FAST | {"max_batch_size": 64}))
            alone = navigator.convert(model, workdir=tmp_path / "alone", targets=["onnx"],
                                      **(FAST | {"max_batch_size": 64}))
    finally:
        for pid in busy:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert result.ok, result.failures
    tuned = [rs.profile for fs in result.status.formats.values() for rs in fs.runners.values() if rs.profile.tuning]
    assert len(tuned) == 1 and not tuned[0].options and tuned[0].tuning["rounds"] == 0
    assert tuned[0].tuning["reason"].startswith("not tuned: other processes kept")
    log = Path(result.workspace, "jobs", "race.log").read_text()
    assert log.count("at 3 windows a batch size, largest first: other processes kept") == 2
    from navigator.execution.race_job import RACE_LOADED_ROUNDS   # the race, if any, ends by then
    assert all(int(n) <= RACE_LOADED_ROUNDS for n in re.findall(r"race of .*: leader .* after (\d+) rounds", log))
    # the run's only pair, screened in its format's worker: adapted to the load over its convert and verify
    assert alone.ok, alone.failures
    (rs,) = [rs for fs in alone.status.formats.values() for rs in fs.runners.values()]
    assert rs.profile.status == "ok" and rs.profile.phase == "screening" and not rs.profile.options
    assert rs.profile.tuning["reason"].startswith("not tuned: other processes kept")
    assert "screening as on a loaded machine" in Path(alone.workspace, "formats", "onnx", "profile.log").read_text()


def _others_busy(n: int) -> list[int]:
    """``n`` busy loops that are another process's, not this one's: a run counts its calling
    process's tree as its own load, so the loops are started by a process that then exits (they
    are reparented away from this tree; checked) with their output elsewhere than its pipe. Their
    pids; each ends by itself after 600 s, if the test did not kill it first."""
    loop = "import time\nend = time.time() + 600\nwhile time.time() < end: pass"
    spawn = ("import subprocess, sys\n"
             f"ps = [subprocess.Popen([sys.executable, '-c', {loop!r}], stdin=subprocess.DEVNULL, "
             f"stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range({n})]\n"
             "print(' '.join(str(p.pid) for p in ps))")
    pids = [int(x) for x in subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True,
                                           check=True, timeout=60).stdout.split()]
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        assert int(stat[stat.rfind(")") + 2:].split()[1]) != os.getpid(), "a busy loop is still this process's child"
    return pids
