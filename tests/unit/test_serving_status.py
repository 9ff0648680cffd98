"""status.yaml's optional ``serving:`` record: round trip, JSON Schema, and absence
(an older file, or a workspace never profiled through Triton, has no such key)."""

from __future__ import annotations

import copy

import pytest
import yaml

from navigator.errors import UserInputError
from navigator.workspace import schema, status
from navigator.workspace.status import ModelInfo, ServingConfig, ServingPoint, ServingStatus, Status


def _status(serving=None) -> Status:
    return Status(model=ModelInfo(name="m", source_format="onnx"), created="2025-01-01T00:00:00+00:00",
                  updated="2025-01-01T00:00:00+00:00", serving=serving)


def _serving() -> ServingStatus:
    best = ServingPoint(concurrency=4, batch_size=1, throughput=812.5,
                        latency_ms={"avg": 4.1, "p50": 4.0, "p90": 4.6, "p95": 4.9, "p99": 6.2}, windows=3,
                        stable=True)
    return ServingStatus(
        status="ok", date="2025-01-01T00:10:00+00:00", duration_s=41.5, budget_s=60.0,
        machine={"cpu": "AMD EPYC", "cores": 2, "gpu": None, "platform": "Linux"}, model="m", key="onnx",
        backend="onnxruntime", stand_in=True, tool="perf_analyzer", search="brute",
        objective={"kind": "throughput", "max_p99_ms": 10.0, "min_throughput": None}, measurement_ms=200,
        concurrency=[1, 2, 4], batch_sizes=[1],
        configurations=[
            ServingConfig(name="i1_b4_d0", instances=1, max_batch_size=4, dynamic_batching=True,
                          max_queue_delay_us=0, preferred_batch_sizes=[4], meets_constraints=True, best=best,
                          results=[best]),
            ServingConfig(name="i2_b8_d0", instances=2, max_batch_size=8, status="skipped", reason="budget"),
        ],
        skipped=["i2_b8_d0: budget"], ranked=["i1_b4_d0"], chosen="i1_b4_d0",
        files={"ranked_csv": "serving/ranked.csv"})


def test_serving_round_trips_and_validates():
    st = _status(_serving())
    text = status.dumps(st)
    assert "\nserving:\n" in text and text.index("\nbest:") < text.index("\nserving:")
    loaded = status.loads(text)
    assert loaded == st
    assert loaded.serving.configurations[0].best.latency_ms["p99"] == 6.2
    schema.validate(yaml.safe_load(text))


def test_no_serving_key_until_a_serving_profile_ran():
    text = status.dumps(_status())
    assert "serving" not in text
    assert status.loads(text).serving is None
    schema.validate(yaml.safe_load(text))


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["serving"].update(tool="locust"), "'locust' is not one of"),
    (lambda d: d["serving"]["configurations"][0].update(status="meh"), "'meh' is not one of"),
    (lambda d: d["serving"]["configurations"][0]["results"][0].pop("throughput"), "'throughput' is a required"),
    (lambda d: d["serving"].pop("chosen"), "'chosen' is a required"),
])
def test_schema_checks_the_serving_record(mutate, words):
    data = copy.deepcopy(_status(_serving()).to_dict())
    mutate(data)
    with pytest.raises(UserInputError, match=words):
        schema.validate(data)
