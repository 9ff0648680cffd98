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


class _MatmulRunner:
    """The calling process's side of a peer: a runner-shaped object whose inference is a real
    numpy matmul (a live module's runner needs a run's whole context; the protocol under test is
    the race worker asking this process for windows, not what the runner computes)."""

    def __init__(self, fail: bool = False):
        self.fail, self.calls = fail, 0

    def profiling_infer(self):
        import numpy as np

        w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)

        def infer(feed):
            self.calls += 1
            if self.fail:
                raise RuntimeError("the live module went away")
            return feed["x"] @ w

        return infer, None


def _race_with_peers(tmp_path, runners: dict):
    """Run the real race worker on a job of peers only, equal by screening (so both are
    contenders whatever the machine does), answering its window requests from this process
    as a run does (navigator.pipeline.race._peer_window). Returns the events."""
    import types

    import numpy as np

    from navigator.execution import isolation
    from navigator.execution.jobs import Job, RacePeer
    from navigator.pipeline import race
    from navigator.pipeline.context import RaceState
    from navigator.workspace import npz
    from navigator.workspace.layout import Workspace

    ws = Workspace(tmp_path / "m.nav.workspace")
    ws.inputs_dir.mkdir(parents=True)
    npz.save(ws.inputs_dir / "000.npz", {"x": np.ones((2, 128), np.float32)})
    settings = {"budget_s": 3.0, "window_s": 0.02, "max_batch_size": 4}
    screening = {"stable": True, "phase": "screening", "reason": None,
                 "results": [{"batch_size": 4, "throughput": 1000.0, "spread": 0.05, "latency_ms": {"p50": 4.0}}]}
    ctx = types.SimpleNamespace(ws=ws, race=RaceState(), config=types.SimpleNamespace(timeout=60))
    peers = []
    for rkey, runner in runners.items():
        task = types.SimpleNamespace(key="torch", profile=types.SimpleNamespace(batch_dim=0, settings=settings))
        ctx.race.peers[f"torch on {rkey}"] = race.LivePeer(task, types.SimpleNamespace(key=rkey), runner, {})
        peers.append(RacePeer(key="torch", runner=rkey, profile=screening, settings=settings, duration_s=0.5))
    job = Job(workspace=str(ws.root), events=str(ws.events_file("race")), race=True, race_peers=peers)
    seen = []

    def on_event(event):
        seen.append(event)
        if event.event == "window":
            race._peer_window(ctx, event)

    with race.peer_channel(ws) as ask:
        outcome = isolation.run_worker(job, ws.job_file("race"), ws.race_log, stage_timeout_s=60, on_event=on_event,
                                       wake_fd=ask)
    assert outcome.returncode == 0 and not outcome.reason, (outcome.reason, outcome.log_tail)
    assert not ws.race_wake.exists() and not ws.race_ask.exists()   # the FIFOs are removed afterwards
    return seen


def test_the_calling_processs_runners_are_raced_through_their_windows(tmp_path):
    """A live module's runners join the race as peers: the worker asks this process for each of
    their windows in turn, and reports race figures for them as for its own runners."""
    runners = {"torch-cpu": _MatmulRunner(), "torch_compile-cpu": _MatmulRunner()}
    events = _race_with_peers(tmp_path, runners)
    windows = [e for e in events if e.event == "window"]
    # one window of each peer per round, the order alternating round by round, each at its screening peak
    assert len(windows) >= 2 * 3
    assert [e.runner for e in windows[:4]] == ["torch-cpu", "torch_compile-cpu", "torch_compile-cpu", "torch-cpu"]
    assert {e.result["batch_size"] for e in windows} == {4} and windows[0].result["settings"]["window_s"] == 0.02
    assert all(r.calls > 10 * len(windows) // 2 for r in runners.values())   # measured here, not in the worker
    race_end = next(e for e in events if e.stage == "race" and e.event == "end")
    assert race_end.result["status"] == "ok"
    assert race_end.result["contenders"] == ["torch on torch-cpu", "torch on torch_compile-cpu"]
    assert race_end.result["rounds"] * 2 == len(windows)
    ends = {e.runner: e.result for e in events if e.stage == "profile" and e.event == "end"}
    assert set(ends) == set(runners)
    for result in ends.values():
        assert result["phase"] == "race" and result["status"] == "ok"
        (figure,) = result["results"]
        assert figure["raced"] and figure["batch_size"] == 4 and figure["throughput"] != 1000.0
        assert figure["latency_ms"]["p50"] > 0


def test_a_peer_that_cannot_measure_ends_the_race_and_keeps_the_screening(tmp_path):
    events = _race_with_peers(tmp_path, {"torch-cpu": _MatmulRunner(), "torch_compile-cpu": _MatmulRunner(fail=True)})
    race_end = next(e for e in events if e.stage == "race" and e.event == "end")
    assert race_end.result["status"] == "failed"
    assert "could not measure torch on torch_compile-cpu" in race_end.result["reason"]
    assert "the live module went away" in race_end.result["reason"]
    # the calling process was asked and answered with the error (not the worker's own failure)
    assert [e.runner for e in events if e.event == "window"][:2] == ["torch-cpu", "torch_compile-cpu"]
    assert (tmp_path / "m.nav.workspace" / "jobs" / "race.reply.json").read_text().count("the live module went away")
