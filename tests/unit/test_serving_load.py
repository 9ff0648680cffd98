"""Load modes and remote endpoints of the serving profile, offline: request-rate and
interval-file parsing, the open-loop sweep's saturation stop, Perf Analyzer's flags and
its open-loop CSV, ``--url`` parsing, and what makes a served config another model."""

from __future__ import annotations

import os

import pytest

from navigator.errors import UserInputError
from navigator.serving import perf_analyzer as pa
from navigator.serving import remote
from navigator.serving.measure import Load, Measurement, rate_range, read_intervals
from navigator.serving.profile import ServingOptions
from navigator.serving.search import Objective, sweep_levels
from navigator.triton import config as cfg_mod


@pytest.mark.parametrize("text, expected", [
    ("10:80", [10.0, 20.0, 40.0, 80.0]), ("10:40:10", [10.0, 20.0, 30.0, 40.0]), ("25", [25.0]),
    ("500,5,50", [5.0, 50.0, 500.0]), ("0.5:2", [0.5, 1.0, 2.0]),
])
def test_request_rate_syntax(text, expected):
    assert rate_range(text) == expected


@pytest.mark.parametrize("text", ["0", "-5", "10:5", "a", "1:2:0", "1:2:3:4", "nan", "inf", "", "1:inf:1", "1:1e9:1",
                                  "1:inf", "nan:4"])
def test_bad_request_rates_are_one_line(text):
    with pytest.raises(UserInputError, match="--request-rate"):
        rate_range(text)


def test_interval_files(tmp_path):
    good = tmp_path / "gaps.txt"
    good.write_text("1000\n\n3000\n")
    assert read_intervals(good) == (1000, 3000)
    for body, words in (("1000\n2.5\n", "line 2"), ("0\n", "line 1"), ("", "no interval"),
                        ("import os\n", "line 1")):
        (tmp_path / "bad.txt").write_text(body)
        with pytest.raises(UserInputError, match=words):
            read_intervals(tmp_path / "bad.txt")
    with pytest.raises(UserInputError, match="no such file"):
        read_intervals(tmp_path / "missing.txt")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UserInputError, match="not a regular file"):     # never blocks on a FIFO
        read_intervals(fifo)


def test_one_load_mode_at_a_time(tmp_path):
    gaps = tmp_path / "gaps.txt"
    gaps.write_text("10000\n30000\n")
    assert ServingOptions().load() == Load("concurrency", (1, 2, 4, 8, 16))
    load = ServingOptions(request_intervals=str(gaps), shared_memory="system").load()
    assert load.mode == "request_intervals" and load.levels == (50.0,) and load.intervals_us == (10000, 30000)
    assert "mean 50/s" in load.describe() and "shared memory" in load.describe()
    assert ServingOptions(request_rate="5:20").load().levels == (5.0, 10.0, 20.0)
    with pytest.raises(UserInputError, match="give one load mode"):
        ServingOptions(concurrency="1:4", request_rate="10").check()
    with pytest.raises(UserInputError, match="--shared-memory"):
        ServingOptions(shared_memory="cuda").check()


def _m(rate, thr, p99=1.0):
    return Measurement(concurrency=0, batch_size=1, throughput=thr, latency_ms={"p99": p99}, windows=3, stable=True,
                       request_rate=rate)


def test_an_open_loop_sweep_stops_at_saturation():
    served = {10.0: 10.0, 20.0: 19.9, 40.0: 30.0, 80.0: 31.0}     # 40/s offered, 30 served: saturated
    ms, why = sweep_levels([10.0, 20.0, 40.0, 80.0], lambda r: _m(r, served[r]), lambda: True, Objective(),
                           word="request rate")
    assert [m.request_rate for m in ms] == [10.0, 20.0, 40.0] and why.startswith("saturated")
    assert [m.level for m in ms] == ["10/s", "20/s", "40/s"]
    ms, why = sweep_levels([10.0, 20.0], lambda r: _m(r, r), iter([True, False]).__next__, Objective(),
                           word="request rate")
    assert why is None or why.startswith("budget")


def test_perf_analyzer_load_flags_and_open_loop_csv():
    assert pa.load_flags(concurrency=4) == ["--concurrency-range", "4:4"]
    assert pa.load_flags(request_rate=12.5) == ["--request-rate-range", "12.5:12.5"]
    assert pa.load_flags(intervals_file="/g.txt", shared_memory="system", output_bytes=4096) == [
        "--request-intervals", "/g.txt", "--shared-memory", "system", "--output-shared-memory-size", "4096"]
    cmd = pa.command("pa", model="m", url="h:8000", input_data="in.json", shapes=[], protocol="http",
                     load=pa.load_flags(request_rate=10))
    assert cmd[cmd.index("-i") + 1] == "http" and "--request-rate-range" in cmd
    text = ("Request Rate,Inferences/Second,Client Send,p50 latency,p99 latency,Avg latency\n"
            "20,19.8,10,1500,3000,1600\n")
    rows = pa.parse_csv(text, batch_size=1)
    assert rows == [{"concurrency": 0, "batch_size": 1, "throughput": 19.8,
                     "latency_ms": {"avg": 1.6, "p50": 1.5, "p99": 3.0}}]


@pytest.mark.parametrize("text, protocol, address, same_host", [
    ("127.0.0.1:8001", "grpc", "127.0.0.1:8001", True), ("grpc://gpu-box:8001", "grpc", "gpu-box:8001", False),
    ("http://localhost:8000/", "http", "localhost:8000", True), ("HTTP://[::1]:8000", "http", "[::1]:8000", True),
])
def test_urls(text, protocol, address, same_host):
    e = remote.parse_url(text)
    assert (e.protocol, e.address, e.same_host) == (protocol, address, same_host)


@pytest.mark.parametrize("text, words", [
    ("gpu-box", "HOST:PORT"), ("https://gpu-box:8001", "TLS"), ("gpu-box:99999", "out of range"),
    ("grpc://a:1/v2/models", "HOST:PORT"), ("a b:1", "HOST:PORT"),
])
def test_bad_urls_are_one_line(text, words):
    with pytest.raises(UserInputError, match=words):
        remote.parse_url(text)


def test_remote_options_change_nothing_there_without_the_flag():
    with pytest.raises(UserInputError, match="as that server serves it") as info:
        ServingOptions(url="h:8001", instance_counts=(1, 2)).check()
    assert "--load-configs" in info.value.one_line()
    with pytest.raises(UserInputError, match="only with --url"):
        ServingOptions(load_configs=True).check()
    with pytest.raises(UserInputError, match="another host"):
        ServingOptions(url="gpu-box:8001", shared_memory="system").check()
    with pytest.raises(UserInputError, match="--cpu-backends"):
        ServingOptions(url="h:8001", cpu_backends=True).check()
    ServingOptions(url="h:8001", load_configs=True, instance_counts=(1, 2)).check()


CFG = '''name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ 8 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 8 ] }
instance_group { count: 1 kind: KIND_CPU }
'''


def test_what_makes_a_served_config_another_model():
    ws = cfg_mod.parse(CFG)
    same = remote.from_json({**cfg_mod.as_dict(ws), "max_batch_size": 4, "instance_group": [{"count": 3}],
                             "a_field_of_a_newer_server": 1})
    assert remote.differences(ws, same) == []                  # settings differ, the model is the same
    other = cfg_mod.parse(CFG.replace("dims: [ 8 ] }\noutput", "dims: [ 4 ] }\noutput"))
    assert remote.differences(ws, other) and "input 'x'" in remote.differences(ws, other)[0]
    unbatched = cfg_mod.parse(CFG.replace("max_batch_size: 8", "max_batch_size: 0"))
    assert "batching on one side only" in remote.differences(ws, unbatched)[0]
    # the JSON passed to the model-control API reads back as the same config
    import json

    assert remote.from_json(json.loads(remote.to_json(ws))) == ws


def test_preferred_sizes_and_the_cache_are_search_axes():
    from navigator.serving import variants
    from navigator.serving.search import Candidate, Space, brute, hill_climb
    from navigator.serving.search import ConfigResult

    base = cfg_mod.parse(CFG.replace("instance_group",
                                     "dynamic_batching { preferred_batch_size: [ 4 ] }\ninstance_group"))
    opts = ServingOptions(instance_counts=(1,), max_batch_sizes=(2, 8), preferred_batch_sizes=((), (2, 8), None),
                          response_cache=(False, True))
    space = variants.space(base, "model", opts, key="onnx")
    assert space.shape() == (1, 2, 1, 3, 2) and space.size() == 12
    names = [c.name for c in space.all()]
    assert "i1_b8_d0_pnone_nocache" in names and "i1_b2_d0_p2-8_cache" in names and "i1_b8_d0_cache" in names
    cfg = variants.variant(base, Candidate(1, 2, 0, (2, 8), True))
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2] and cfg.response_cache.enable   # 8 > max 2
    assert list(variants.variant(base, Candidate(1, 8, 0, None, None)).dynamic_batching.preferred_batch_size) == [4]
    assert not variants.variant(base, Candidate(1, 8, 0, (), False)).dynamic_batching.preferred_batch_size
    # every sweep is seen, and the hill climb moves along the new axes too
    seen = []

    def evaluate(cand):
        seen.append(cand)
        return ConfigResult(cand, status="ok", measurements=[_m(None, 100.0 + 50 * bool(cand.cache))])

    brute(space, evaluate, lambda: True)
    assert {(c.preferred, c.cache) for c in seen} == {(p, c) for p in ((), (2, 8), None) for c in (False, True)}
    seen.clear()
    out = hill_climb(space, evaluate, lambda: True, Objective())
    assert out.chosen(Objective()).candidate.cache is True
    stateful = cfg_mod.parse(CFG.replace("instance_group", "sequence_batching { }\ninstance_group"))
    with pytest.raises(UserInputError, match="stateful"):
        variants.space(stateful, "model", ServingOptions(response_cache=(True,)), key="onnx")
    with pytest.raises(UserInputError, match="stateful"):
        variants.space(stateful, "model", ServingOptions(preferred_batch_sizes=((2,),)), key="onnx")
    assert Space().shape() == (1, 1, 1, 1, 1) and Space().at((0, 0, 0)) == Candidate(1, 1, 0)
