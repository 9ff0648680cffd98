"""Serving profile and configuration search through a real Triton server on this CPU.

Two models:
- ``sleepy``: a Python-backend model whose execute() sleeps a fixed 100 ms per request
  and does no work, so its service time is known and does not compete for the 2
  cores: with 2 instances, concurrency 2 must nearly double the throughput of
  concurrency 1 (both tools), and latency stays >= 20 ms.
- a converted ONNX workspace (tests/models.py ``foldable_mlp``) for the
  ``navigator profile WS --triton`` runs, served through the CPU stand-in of the
  onnxruntime backend (``--cpu-backends``).

Nothing is mocked: the real tritonserver 2.51, real tritonclient, the real
perf_analyzer binary where the server environment has it. Windows are 200-300 ms
and sweeps short to keep the file under ~90 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..conftest import FAST, models, one_line_error

pytestmark = pytest.mark.functional

# long beside a request's CPU cost (a few ms; tens of ms on a loaded machine), so the trend the test
# reads (two instances serve two at once) holds on busy cores too
SERVICE_S = 0.100
WINDOW_MS = 1000

SLEEPY_PY = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.delay = float(params["DELAY_S"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            time.sleep(self.delay)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", (x * 2).astype(np.float32))]))
        return responses
'''

SLEEPY_CONFIG = f'''name: "sleepy"
backend: "python"
max_batch_size: 0
input {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }}
instance_group {{ kind: KIND_CPU count: 2 }}
parameters {{ key: "DELAY_S" value {{ string_value: "{SERVICE_S}" }} }}
'''


def _run(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-m", "navigator", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def sleepy_server(tmp_path_factory):
    from navigator.triton.server import TritonServer

    repo = tmp_path_factory.mktemp("sleepy_repo")
    (repo / "sleepy" / "1").mkdir(parents=True)
    (repo / "sleepy" / "1" / "model.py").write_text(SLEEPY_PY)
    (repo / "sleepy" / "config.pbtxt").write_text(SLEEPY_CONFIG)
    (repo / "held" / "1").mkdir(parents=True)     # execute() says when it starts, then holds the request
    (repo / "held" / "1" / "model.py").write_text(SLEEPY_PY.replace(
        "self.delay = float", "self.mark = params['MARK']['string_value']; self.delay = float").replace(
        "time.sleep(self.delay)", "open(self.mark, 'w').close(); time.sleep(self.delay)"))
    mark = f'parameters {{ key: "MARK" value {{ string_value: "{repo / "held.mark"}" }} }}\n'
    (repo / "held" / "config.pbtxt").write_text(mark + SLEEPY_CONFIG.replace('"sleepy"', '"held"').replace(
        f'string_value: "{SERVICE_S}"', 'string_value: "1.0"'))
    with TritonServer(repo, log_path=repo.parent / "sleepy_server.log") as server:
        yield server


def _sleepy_data():
    from navigator.serving.inputs import RequestData

    rows = [{"x": np.full((4,), float(i), np.float32)} for i in range(4)]
    return RequestData(batching=False, names=["x"], dtypes={"x": "float32"}, dims={"x": [4]}, rows=rows,
                       outputs=["y"])


def _check_trend(m1, m2, tool):
    # a fixed service time: concurrency 1 gives at most 1 / SERVICE_S; 2 instances serve 2 at once
    assert 0.4 / SERVICE_S <= m1.throughput <= 1.04 / SERVICE_S, (tool, m1)
    assert m2.throughput >= 1.5 * m1.throughput, (tool, m1, m2)
    for m in (m1, m2):
        lat = m.latency_ms
        assert SERVICE_S * 1000 <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"], (tool, lat)
        assert lat["p50"] < 3 * SERVICE_S * 1000, (tool, lat)     # no queueing: one request per instance
        assert m.windows >= 3 and m.errors == 0


def test_both_tools_see_the_fixed_service_time(sleepy_server, tmp_path):
    from navigator.serving import loadgen
    from navigator.serving import perf_analyzer as pa
    from navigator.triton.server import prepare

    data = _sleepy_data()
    ours = [loadgen.measure(sleepy_server.grpc_url, "sleepy", data, concurrency=c, window_ms=WINDOW_MS)
            for c in (1, 2)]
    _check_trend(*ours, "navigator")
    env = prepare(quiet=True)
    if env.perf_analyzer is None:
        pytest.skip("the server environment has no perf_analyzer binary")
    input_data = tmp_path / "perf_input.json"
    input_data.write_text(json.dumps(data.perf_analyzer_json()))
    theirs = [pa.measure(env.perf_analyzer, env.process_env(), model="sleepy", url=sleepy_server.grpc_url,
                         input_data=input_data, shapes=[], concurrency=c, batch_size=1, window_ms=WINDOW_MS,
                         workdir=tmp_path / "pa")[0] for c in (1, 2)]
    _check_trend(*theirs, "perf_analyzer")
    # the same server, the same load: the two tools agree on the throughput within 25%
    for a, b in zip(ours, theirs):
        assert abs(a.throughput - b.throughput) <= 0.25 * b.throughput, (a, b)


# --------------------------------------------------------------------------- navigator profile WS --triton
@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_ws")
    model = models.save(models.ALL["foldable_mlp"](), root / "mlp.onnx")
    r = _run("convert", model, "--workdir", root / "w", "--targets", "onnx", *FAST, cwd=root)
    assert r.returncode == 0, r.stderr
    return next((root / "w").glob("*.nav.workspace"))


SMALL = ["--measurement-ms", "200", "--concurrency", "1:2", "--cpu-backends", "--perf-analyzer", "off"]


def _png_ok(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > 5000, (path, len(data))


def test_profile_chooses_a_configuration_within_the_latency_constraint(workspace):
    from navigator.triton import config as cfg_mod
    from navigator.workspace import schema

    r = _run("triton", workspace, cwd=workspace.parent)          # the user's repository, for --apply
    assert r.returncode == 0, r.stderr
    user_config = workspace / "triton" / "mlp" / "config.pbtxt"
    r = _run("profile", workspace, "--triton", *SMALL, "--instance-counts", "1,2", "--max-batch-sizes", "1,4",
             "--max-p99-ms", "500", "--budget-s", "60", "--apply", cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    data = yaml.safe_load((workspace / "status.yaml").read_text())
    schema.validate(data)
    sv = data["serving"]
    assert sv["status"] == "ok" and sv["tool"] == "navigator" and sv["stand_in"] is True
    assert sv["backend"] == "onnxruntime" and sv["machine"]["cores"] >= 1
    chosen = next(c for c in sv["configurations"] if c["name"] == sv["chosen"])
    assert chosen["meets_constraints"] is True and chosen["best"]["latency_ms"]["p99"] <= 500
    assert sv["ranked"][0] == sv["chosen"]
    for c in sv["configurations"]:
        for p in c["results"]:
            assert p["latency_ms"]["p99"] >= p["latency_ms"]["p50"] > 0
            assert p["throughput"] > 0
    out = workspace / "serving"
    _png_ok(out / "throughput_v_latency.png")
    _png_ok(out / "latency_v_concurrency.png")
    assert not (out / "gpu_mem_v_latency.png").exists()        # no GPU here
    ma = yaml.safe_load((out / "model_analyzer.yaml").read_text())
    assert list(ma["profile_models"]) == ["mlp"]
    entry = ma["profile_models"]["mlp"]
    assert entry["model_config_parameters"]["max_batch_size"] == [1, 4]
    assert entry["model_config_parameters"]["instance_group"][0]["count"] == [1, 2]
    assert entry["constraints"] == {"perf_latency_p99": {"max": 500.0}}
    assert entry["perf_analyzer_flags"]["input-data"] == "perf_input.json"
    script = (out / "perf_analyzer.sh").read_text()
    assert "-m mlp" in script and "--input-data perf_input.json" in script and f"configs/{sv['chosen']}" in script
    assert json.loads((out / "perf_input.json").read_text())["data"][0]["x"]["shape"] == [8]
    ranked = (out / "ranked.csv").read_text().splitlines()
    assert ranked[1].split(",")[1] == sv["chosen"]
    # --apply wrote the chosen settings into the user's repository, the rest kept
    applied = cfg_mod.parse(user_config.read_text())
    assert applied.max_batch_size == chosen["max_batch_size"]
    assert applied.instance_group[0].count == chosen["instances"]
    assert applied.backend == "onnxruntime" and [i.name for i in applied.input] == ["x"]
    assert sv["applied"] == str(user_config)
    summary = (workspace / "report" / "summary.md").read_text()
    assert sv["chosen"] in summary and "../serving/throughput_v_latency.png" in summary and "stand-in" in summary
    r = _run("report", workspace, "--html", cwd=workspace.parent)
    assert r.returncode == 0, r.stderr
    page = (workspace / "report" / "summary.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "<table>" in page


def test_profile_reports_none_when_no_configuration_can_meet_the_constraint(workspace):
    r = _run("profile", workspace, "--triton", *SMALL, "--instance-counts", "1", "--max-batch-sizes", "2",
             "--max-p99-ms", "0.001", "--budget-s", "30", "--search", "quick", cwd=workspace.parent)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no configuration meets p99 <= 0.001 ms"), r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sv["status"] == "failed" and sv["chosen"] is None and sv["search"] == "quick"
    assert sv["configurations"][0]["meets_constraints"] is False
    assert not (workspace / "serving" / "chosen.config.pbtxt").exists()


def test_profile_with_perf_analyzer_and_a_tight_budget(workspace):
    from navigator.triton.server import prepare

    if prepare(quiet=True).perf_analyzer is None:
        pytest.skip("the server environment has no perf_analyzer binary")
    # Whatever the machine's speed, the budget must bite: each instance count measures at least batch
    # sizes 1, 2 and 4 (the sweep stops after two steps of < 5%), each point at least 3 windows of 0.4 s:
    # 4 counts x 3 points x 1.2 s = 14.4 s of windows alone, more than the 9 s budget.
    r = _run("profile", workspace, "--triton", "--cpu-backends", "--perf-analyzer", "on", "--measurement-ms", "400",
             "--concurrency", "1", "--instance-counts", "1,2,3,4", "--max-batch-sizes", "1,2,4,8", "--budget-s", "9",
             cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sv["tool"] == "perf_analyzer"
    # the budget held over the measuring: a point started before the deadline runs to its end (a PA run
    # is not cut: at most MAX_WINDOWS windows, and perf_analyzer's own start); server start and loads
    # are setup. The bound leaves a loaded machine room; "budget" in skipped is what proves it bit.
    from navigator.serving.measure import MAX_WINDOWS

    assert sv["setup_s"] > 0 and sv["duration_s"] - sv["setup_s"] <= 9 + MAX_WINDOWS * 0.4 + 10
    assert any("budget" in s for s in sv["skipped"]), sv["skipped"]
    logs = list((workspace / "serving" / "perf_analyzer").glob("*.log"))
    assert logs and "--input-data" in logs[0].read_text()


def test_bad_input_is_one_line_and_keeps_the_previous_results(workspace):
    marker = workspace / "serving" / "previous-run.txt"
    marker.parent.mkdir(exist_ok=True)
    marker.write_text("kept")
    one_line_error(_run("profile", workspace, cwd=workspace.parent), "--triton")
    one_line_error(_run("profile", workspace, "--triton", "--concurrency", "0:4", cwd=workspace.parent),
                   "--concurrency")
    one_line_error(_run("profile", workspace, "--triton", "--measurement-ms", "200", cwd=workspace.parent),
                   "onnxruntime backend", "--cpu-backends")
    one_line_error(_run("profile", workspace, "--triton", "--cpu-backends", "--format", "nope",
                        cwd=workspace.parent), "nope")
    one_line_error(_run("profile", workspace, "--triton", "--cpu-backends", "--apply", workspace / "elsewhere",
                        cwd=workspace.parent), "--apply", "no mlp/config.pbtxt")
    assert marker.read_text() == "kept"                       # a failed run leaves serving/ as it was
    assert not (workspace / ".serving.partial").exists()


# --------------------------------------------------------------------------- a server someone else runs, load modes
@pytest.fixture(scope="module")
def remote_server(workspace, tmp_path_factory):
    """A Triton started apart from `navigator profile`, as someone else's server would be: the
    workspace's repository written to its own folder and served (explicit model control)."""
    from navigator.triton.server import TritonServer

    repo = tmp_path_factory.mktemp("remote") / "repo"
    r = _run("triton", workspace, "--repo", repo, "--deploy", "none", cwd=workspace.parent)
    assert r.returncode == 0, r.stderr
    with TritonServer(repo, cpu_backends=True, log_path=repo.parent / "remote_server.log") as server:
        yield server


def _served(server, model="mlp"):
    import tritonclient.grpc as grpcclient

    cfg = grpcclient.InferenceServerClient(server.grpc_url).get_model_config(model, as_json=True)["config"]
    return int(cfg["instance_group"][0]["count"]), int(cfg["max_batch_size"])


def test_profile_of_a_server_someone_else_runs(workspace, remote_server):
    before = _served(remote_server)
    small = ["--measurement-ms", "200", "--concurrency", "1:2", "--perf-analyzer", "off", "--budget-s", "30"]
    # as served: one configuration, its own settings, nothing changed there
    r = _run("profile", workspace, "--triton", "--url", f"grpc://{remote_server.grpc_url}", *small,
             cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sv["server"] == {"remote": True, "url": f"grpc://{remote_server.grpc_url}", "version": "2.51.0",
                            "loaded_configs": False, "restored": None}
    assert [c["name"] for c in sv["configurations"]] == [f"i{before[0]}_b{before[1]}_d0"]
    assert "as served" in r.stdout + r.stderr
    assert _served(remote_server) == before
    # --load-configs: every configuration loaded there through the model-control API, then put back
    r = _run("profile", workspace, "--triton", "--url", remote_server.grpc_url, "--load-configs",
             "--instance-counts", "1,2", "--max-batch-sizes", "2", *small, cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sorted(c["name"] for c in sv["configurations"] if c["status"] == "ok") == ["i1_b2_d0", "i2_b2_d0"]
    assert sv["server"]["loaded_configs"] is True and sv["server"]["restored"] is True
    assert _served(remote_server) == before
    assert "run by someone else" in (workspace / "report" / "summary.md").read_text()
    one_line_error(_run("profile", workspace, "--triton", "--url", "127.0.0.1:1", *small, cwd=workspace.parent),
                   "no Triton server answers at grpc://127.0.0.1:1")
    one_line_error(_run("profile", workspace, "--triton", "--url", remote_server.grpc_url, "--instance-counts", "2",
                        *small, cwd=workspace.parent), "as that server serves it", "--load-configs")


def test_open_loop_over_http_with_perf_analyzer(workspace, remote_server):
    from navigator.triton.server import prepare

    if prepare(quiet=True).perf_analyzer is None:
        pytest.skip("the server environment has no perf_analyzer binary")
    r = _run("profile", workspace, "--triton", "--url", f"http://{remote_server.http_url}", "--request-rate", "50,100",
             "--perf-analyzer", "on", "--measurement-ms", "300", "--budget-s", "30", cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sv["tool"] == "perf_analyzer" and sv["load"]["mode"] == "request_rate" and sv["concurrency"] == []
    (config,) = sv["configurations"]
    points = config["results"]
    rates = [p["request_rate"] for p in points]
    assert rates in ([50.0], [50.0, 100.0]) and all(p["concurrency"] is None for p in points), points
    if rates == [50.0]:    # a loaded machine can serve under 90% of 50/s in a 300 ms window: the stop says so
        assert "saturated" in config["reason"], config
    for p in points:       # an open loop serves at most what it is offered (a window's rounding aside)
        assert 0 < p["throughput"] <= 1.5 * p["request_rate"], p
    best = config["best"]["request_rate"]
    script = (workspace / "serving" / "perf_analyzer.sh").read_text()
    assert "-i http" in script and f"--request-rate-range {best:g}:{best:g}" in script
    assert f'URL="${{TRITON_URL:-${{TRITON_GRPC_URL:-{remote_server.http_url}}}}}"' in script


def test_request_intervals_and_shared_memory_on_the_local_server(workspace, tmp_path):
    gaps = tmp_path / "gaps.txt"
    gaps.write_text("5000\n15000\n")               # a request every 5 then 15 ms: 100/s on average
    r = _run("profile", workspace, "--triton", "--cpu-backends", "--perf-analyzer", "off", "--measurement-ms", "300",
             "--request-intervals", gaps, "--shared-memory", "system", "--instance-counts", "1",
             "--max-batch-sizes", "2", "--budget-s", "30", cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    assert sv["load"] == {"mode": "request_intervals", "shared_memory": "system", "intervals_file": str(gaps),
                          "intervals": 2, "levels": [100.0]}
    assert sv["server"] == {"remote": False}
    p = sv["configurations"][0]["results"][0]
    assert p["request_rate"] == 100.0 and 80 <= p["throughput"] <= 120, p
    _png_ok(workspace / "serving" / "latency_v_concurrency.png")
    assert "open loop at the intervals of" in (workspace / "report" / "summary.md").read_text()
    one_line_error(_run("profile", workspace, "--triton", "--cpu-backends", "--request-rate", "10",
                        "--concurrency", "2", cwd=workspace.parent), "give one load mode")


def test_preferred_batch_sizes_and_the_response_cache_are_searched(workspace, tmp_path):
    from navigator.triton import config as cfg_mod

    repo = tmp_path / "repo"
    r = _run("triton", workspace, "--repo", repo, "--deploy", "none", cwd=workspace.parent)
    assert r.returncode == 0, r.stderr
    r = _run("profile", workspace, "--triton", *SMALL, "--instance-counts", "1", "--max-batch-sizes", "4",
             "--preferred-batch-sizes", "none/2", "--response-cache", "off,on", "--budget-s", "60", "--apply", repo,
             cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = yaml.safe_load((workspace / "status.yaml").read_text())["serving"]
    by_name = {c["name"]: c for c in sv["configurations"]}
    assert set(by_name) == {"i1_b4_d0_pnone_nocache", "i1_b4_d0_pnone_cache", "i1_b4_d0_p2_nocache",
                            "i1_b4_d0_p2_cache"}
    for name, c in by_name.items():
        assert c["status"] == "ok", c
        assert c["response_cache"] is name.endswith("_cache")
        assert c["preferred_batch_sizes"] == ([2] if "_p2_" in name else [])
        if c["response_cache"]:     # the server's statistics show the cache answered
            assert "answered from it" in c["reason"], c
    chosen = by_name[sv["chosen"]]
    applied = cfg_mod.read(repo / "mlp" / "config.pbtxt")
    assert applied.response_cache.enable is chosen["response_cache"]
    assert list(applied.dynamic_batching.preferred_batch_size) == chosen["preferred_batch_sizes"]
    assert applied.backend == "onnxruntime" and [i.name for i in applied.input] == ["x"]   # the rest kept
    ma = yaml.safe_load((workspace / "serving" / "model_analyzer.yaml").read_text())["profile_models"]["mlp"]
    params = ma["model_config_parameters"]
    assert params["response_cache"] == {"enable": [False, True]}
    assert params["dynamic_batching"]["preferred_batch_size"] == [[], [2]]
    one_line_error(_run("profile", workspace, "--triton", *SMALL, "--max-batch-sizes", "2",
                        "--preferred-batch-sizes", "8", cwd=workspace.parent), "--preferred-batch-sizes: 8",
                   "larger than every max batch size")
    one_line_error(_run("profile", workspace, "--triton", *SMALL, "--response-cache", "maybe",
                        cwd=workspace.parent), "--response-cache")


NOISY_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", np.random.rand(4).astype(np.float32))])
                for _ in requests]
'''


def test_a_model_that_is_not_deterministic_gets_no_cache_searched(tmp_path):
    """The check that decides whether a cache may be searched can fail: a model whose answers
    vary for one input (served with the cache off) is named, and a deterministic one passes."""
    from types import SimpleNamespace

    from navigator.serving import probe
    from navigator.serving.search import Candidate
    from navigator.triton import config as cfg_mod
    from navigator.triton.server import TritonServer

    repo = tmp_path / "repo"
    for name, body in (("noisy", NOISY_PY), ("steady", SLEEPY_PY.replace("time.sleep(self.delay)", "pass"))):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(body)
        (repo / name / "config.pbtxt").write_text(SLEEPY_CONFIG.replace('"sleepy"', f'"{name}"'))
    with TritonServer(repo, models=[], log_path=tmp_path / "server.log") as server:
        for name, deterministic in (("noisy", False), ("steady", True)):
            r = SimpleNamespace(scratch=repo, step=name, model=name, base=cfg_mod.read(repo / name / "config.pbtxt"),
                                preferred=[], server=server, data=_sleepy_data(), opts=SimpleNamespace(url=None))
            why = probe.determinism(r, Candidate(2, 0, None, None, True), server.load)
            assert (why is None) is deterministic, why
            if not deterministic:
                assert "not deterministic" in why and "output y differs" in why


def test_a_region_the_server_still_uses_is_unregistered_once_it_is_free(sleepy_server, tmp_path):
    """Triton refuses to unregister a region a request still holds ("currently in use"), which
    it can for a moment after the reply: the load generator and the deploy kit's client wait
    for it rather than leave the region registered. Here the request is held in execute()."""
    import asyncio
    import importlib.util
    import os
    import queue
    import time

    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm

    from navigator.serving import loadgen
    from navigator.triton import deploy

    x = np.arange(4, dtype=np.float32)
    mark = sleepy_server.repo / "held.mark"

    def wait_for_execute():
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline, "the request never reached execute()"
            time.sleep(0.01)
        mark.unlink()

    async def through_loadgen():
        from tritonclient.grpc.aio import InferenceServerClient

        client = InferenceServerClient(sleepy_server.grpc_url)
        regions = loadgen._SystemShm(client, f"navtest_{os.getpid()}")
        handle, name = await regions.region("in", x.nbytes)
        shm.set_shared_memory_region(handle, [x])
        inp = grpcclient.InferInput("x", [4], "FP32")
        inp.set_shared_memory(name, x.nbytes)
        pending = asyncio.ensure_future(client.infer("held", [inp]))
        await asyncio.to_thread(wait_for_execute)
        await regions.close()
        result = await pending
        await client.close()
        return result.as_numpy("y")

    np.testing.assert_array_equal(asyncio.run(through_loadgen()), 2 * x)

    client_py = tmp_path / "client.py"
    client_py.write_text(deploy.CLIENT.format(model="held", inputs={"x": ("x", "FP32")}, outputs={"y": "y"},
                                              batching=False, stateful=False))
    spec = importlib.util.spec_from_file_location("kit_client", client_py)
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)
    client = grpcclient.InferenceServerClient(sleepy_server.grpc_url)
    name = f"navkit_{os.getpid()}"
    handle = shm.create_shared_memory_region(name, "/" + name, x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory(name, "/" + name, x.nbytes)
    inp = grpcclient.InferInput("x", [4], "FP32")
    inp.set_shared_memory(name, x.nbytes)
    answers: queue.Queue = queue.Queue()
    client.async_infer("held", [inp], lambda result, error: answers.put((result, error)))
    wait_for_execute()
    kit.release(grpcclient.InferenceServerClient(sleepy_server.grpc_url), [(name, handle)])
    result, error = answers.get(timeout=60)
    assert error is None, error
    np.testing.assert_array_equal(result.as_numpy("y"), 2 * x)
    client.close()
    status = grpcclient.InferenceServerClient(sleepy_server.grpc_url).get_system_shared_memory_status()
    mine = (f"navtest_{os.getpid()}", f"navkit_{os.getpid()}")
    assert not [r for r in status.regions if r.startswith(mine)], status
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(mine)]
