"""navigator.serving.ensemble, pure logic: the ensemble's max_batch_size kept consistent
with its steps, and the probe's reading of Triton's statistics (busy share per instance
from the batch statistics, which count each execution once)."""

from __future__ import annotations

import pytest

from navigator.serving import ensemble as serving_ens
from navigator.serving.measure import Measurement


def _cfg(name: str, mbs: int):
    from tritonclient.grpc import model_config_pb2 as mc

    return mc.ModelConfig(name=name, max_batch_size=mbs)


@pytest.mark.parametrize("ens, steps, new, want", [
    (64, {"pre": 64, "core": 64, "post": 64}, 8, 8),     # at the bound: follows it down ...
    (8, {"pre": 64, "core": 8, "post": 64}, 32, 32),     # ... and back up to what the steps allow
    (4, {"pre": 64, "core": 64, "post": 64}, 32, 4),     # set lower on purpose: stays
    (4, {"pre": 64, "core": 64, "post": 64}, 2, 2),      # unless the new bound is lower
    (16, {"pre": 16, "core": 64, "post": 64}, 64, 16),   # another step still bounds it
    (8, {"pre": 0, "core": 8, "post": 0}, 4, 4),         # non-batching steps do not bound it
    (0, {"pre": 0, "core": 8, "post": 0}, 4, 0),         # a non-batching ensemble stays so
])
def test_the_ensembles_max_batch_size_follows_its_steps(ens, steps, new, want):
    configs = {n: _cfg(n, m) for n, m in steps.items()}
    got = serving_ens.ensemble_variant(_cfg("ens", ens), configs, "core", new)
    assert got.max_batch_size == want
    assert all(got.max_batch_size <= (new if n == "core" else m) for n, m in steps.items()
               if (new if n == "core" else m) > 0)



def _stats(batches: dict[int, tuple[int, int]], queue_ns: int = 0, success: int = 0) -> dict:
    """A /v2/models/<m>/stats record: {batch size: (executions, compute ns per execution)}.
    The inference statistics charge each request its whole batch's compute, as Triton does."""
    per_request = sum(size * count * ns for size, (count, ns) in batches.items())
    return {"inference_stats": {"success": {"count": success}, "queue": {"count": success, "ns": queue_ns},
                                "compute_infer": {"count": success, "ns": per_request}},
            "batch_stats": [{"batch_size": size, "compute_infer": {"count": count, "ns": count * ns},
                             "compute_input": {"count": count, "ns": 0}, "compute_output": {"count": count, "ns": 0}}
                            for size, (count, ns) in batches.items()]}


def test_the_probe_picks_the_busiest_step_per_instance(monkeypatch):
    """Over one second: pre ran 100 requests of 2 ms on 1 instance (20% busy); the model ran
    25 batches of 4 at 30 ms on 2 instances (37.5% of each); post 100 x 5 ms (50%). Post is
    the busiest; the model's per-request statistics (4 x 30 ms charged per batch) would have
    made it look 150% busy."""
    from tritonclient.grpc import model_config_pb2 as mc

    ms = 1_000_000
    target = serving_ens.EnsembleTarget(name="det", repo=None, config=mc.ModelConfig(name="det"), key="onnx")
    for name, role, count in (("det_preprocess", "preprocess", 1), ("det_onnx", "model", 2),
                              ("det_postprocess", "postprocess", 1)):
        target.steps[name] = mc.ModelConfig(name=name, max_batch_size=8)
        target.steps[name].instance_group.add(count=count)
        target.roles[name] = role
    after = {"det_preprocess": _stats({1: (100, 2 * ms)}, queue_ns=100 * ms, success=100),
             "det_onnx": _stats({4: (25, 30 * ms)}, success=100),
             "det_postprocess": _stats({1: (100, 5 * ms)}, success=100)}
    calls = iter([{n: {} for n in after}, after])
    monkeypatch.setattr(serving_ens, "stats", lambda url, names: next(calls))
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(serving_ens.time, "monotonic", lambda: next(clock))
    m = Measurement(concurrency=8, batch_size=1, throughput=100.0, latency_ms={}, windows=3, stable=True)
    step, why, records = serving_ens.probe(target, "127.0.0.1:1", lambda: m)
    by_name = {r.name: r for r in records}
    assert step == "det_postprocess" and "busiest step in a probe at concurrency 8" in why
    assert by_name["det_onnx"].utilization == pytest.approx(0.375)
    assert by_name["det_onnx"].batch_size == pytest.approx(4.0) and by_name["det_onnx"].compute_ms == pytest.approx(30)
    assert by_name["det_preprocess"].utilization == pytest.approx(0.2)
    assert by_name["det_preprocess"].queue_ms == pytest.approx(1.0)
    assert by_name["det_postprocess"].utilization == pytest.approx(0.5)
