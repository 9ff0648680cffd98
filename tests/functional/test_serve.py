"""`navigator serve` end to end: a real Triton 2.51 server (nvidia-pytriton's binary)
serving repositories that `navigator triton` emitted, answered through tritonclient.

The server environment is prepared once per session in the cache that CI's
pre-warm (`navigator serve --prepare`) fills (``$NAVIGATOR_CACHE`` or
~/.cache/navigator); a server that cannot be prepared FAILS these tests (CI has
package-registry access). Native onnxruntime / openvino configs are served
through navigator's CPU stand-ins (``--cpu-backends``: the one test double
here, labelled as such); torch_export and the ensemble's steps run in Triton's
real Python backend.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import np_to_triton_dtype

import navigator
from navigator import deps
from navigator.errors import UserInputError
from navigator.triton import config as cfg_mod, emit
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.status import ConvertStep, FormatStatus, ProfileStep, RunnerStatus, VerifyStep

from ..conftest import interruptible, models, one_line_error

pytestmark = pytest.mark.functional
ATOL = {"onnx": 1e-5, "torch_export": 1e-5, "openvino": 1e-3}   # OpenVINO differs from ORT by ~3e-4

PRE, POST = models.ENSEMBLE_PRE, models.ENSEMBLE_POST


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def server_env():
    """The cached server environment; an error here fails every test that needs it."""
    from navigator.triton.server import prepare

    return prepare(quiet=True)


def _add_torch_export(ws: Path, tmp: Path) -> None:
    """A torch_export artifact of the same function (y = relu(x @ 2 w1)), checked against the
    stored reference outputs before status.yaml records it as verified."""
    import torch

    module = models.foldable_mlp_torch()
    ep = torch.export.export(module, (torch.rand(4, 8),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    dest = ws / "formats" / "torch_export" / "model.pt2"
    dest.parent.mkdir(parents=True)
    torch.export.save(ep, str(dest))
    loaded = torch.export.load(str(dest)).module()
    for sample in sorted((ws / "samples" / "inputs").glob("*.npz")):
        out = loaded(torch.from_numpy(npz.load(sample)["x"]))[0].detach().numpy()
        np.testing.assert_allclose(out, npz.load(ws / "samples" / "reference" / sample.name)["y"], rtol=1e-5,
                                   atol=1e-5)
    st = status_mod.load(ws / "status.yaml")
    st.formats["torch_export"] = FormatStatus(
        format="torch_export", path="formats/torch_export/model.pt2", parent="onnx", io_names={"x": "x", "y": "y"},
        convert=ConvertStep(status="ok", exporter="torch.export"),
        runners={"torch_export-cpu": RunnerStatus(runner="torch_export", device="cpu",
                                                  verify=VerifyStep(status="ok", batch_sizes=[8]),
                                                  profile=ProfileStep(status="skipped", reason="--no-profile"))})
    status_mod.save(st, ws / "status.yaml")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """foldable_mlp converted to onnx + openvino (+ torch_export made here when torch is there)."""
    tmp = tmp_path_factory.mktemp("serve_ws")
    model = models.save(models.foldable_mlp(), tmp / "foldable_mlp.onnx")
    targets = ["onnx"] + (["openvino"] if deps.has("openvino") else [])
    result = navigator.convert(model, workdir=tmp / "wd", targets=targets, no_profile=True, device="cpu",
                               timeout=120)
    assert result.ok, result.failures
    if deps.has("torch"):
        _add_torch_export(result.workspace, tmp)
    return result.workspace


@pytest.fixture(scope="module")
def repo(ws, tmp_path_factory) -> Path:
    """Every format as its own model, plus an ensemble (pre -> onnx -> post) named mlp_ens."""
    tmp = tmp_path_factory.mktemp("serve_repo")
    repo = tmp / "repo"
    emit(ws, {"repo": repo, "formats": "all"})
    (tmp / "pre.py").write_text(PRE)
    (tmp / "post.py").write_text(POST)
    emit(ws, {"repo": repo, "formats": "onnx", "model_name": "mlp_ens", "preprocess": tmp / "pre.py",
              "postprocess": tmp / "post.py"})
    return repo


@pytest.fixture(scope="module")
def server(server_env, repo):
    from navigator.triton.server import TritonServer

    with TritonServer(repo, cpu_backends=True) as s:
        yield s
    assert not list(Path("/dev/shm").glob(f"{s.shm_prefix}*")), "stop() left shared memory behind"


def _config(repo: Path, name: str):
    return text_format.Parse((repo / name / "config.pbtxt").read_text(), mc.ModelConfig())


def _formats(repo: Path) -> dict[str, str]:
    """format key -> model name, for the single-format models of the repository."""
    return {name[len("foldable_mlp_"):]: name for name in os.listdir(repo) if name.startswith("foldable_mlp_")}


def _samples(ws: Path, key: str | None = None, runner: str | None = None):
    """(inputs, expected outputs) per stored sample: the reference's, or what ``runner`` of format
    ``key`` gave in its verification."""
    for path in sorted((ws / "samples" / "inputs").glob("*.npz")):
        expected = ws / "formats" / key / "outputs" / runner / path.name if runner else \
            ws / "samples" / "reference" / path.name
        yield npz.load(path), npz.load(expected)


def _infer(client_mod, url: str, model: str, feeds: dict, outputs: list[str]) -> dict:
    client = client_mod.InferenceServerClient(url)
    try:
        inputs = []
        for name, value in feeds.items():
            tensor = client_mod.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        result = client.infer(model, inputs, outputs=[client_mod.InferRequestedOutput(o) for o in outputs])
        return {o: result.as_numpy(o) for o in outputs}
    finally:
        client.close()


# --------------------------------------------------------------------------- inference
def test_every_format_answers_http_and_grpc_with_the_reference_outputs(server, repo, ws):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    formats = _formats(repo)
    expected = {"onnx"} | ({"openvino"} if deps.has("openvino") else set()) | \
        ({"torch_export"} if deps.has("torch") else set())
    assert set(formats) == expected
    assert sorted(server.loaded) == sorted(formats.values()) + ["mlp_ens", "mlp_ens_onnx", "mlp_ens_postprocess",
                                                                  "mlp_ens_preprocess"]
    for key, name in formats.items():
        cfg = _config(repo, name)
        # what is served is what was verified: Triton's OpenVINO backend runs the CPU plugin's default
        # precision (bf16 on a CPU with AVX512_BF16/AMX), which openvino-default verified, not openvino-cpu's f32
        served_as = "openvino-default" if key == "openvino" and deps.cpu_bf16() else None
        for feeds, ref in _samples(ws, key, served_as):
            for mod, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
                out = _infer(mod, url, name, feeds, ["y"])["y"]
                # Triton's Python backend does not check outputs against the config: the test does
                assert out.dtype == np.dtype(cfg_mod.numpy_dtype(mc.DataType.Name(cfg.output[0].data_type)))
                assert out.shape == ref["y"].shape
                np.testing.assert_allclose(out, ref["y"], rtol=1e-5 if not served_as else 1e-3, atol=ATOL[key],
                                           err_msg=f"{key} {mod.__name__}")


def test_ensemble_with_pre_and_post_processing(server):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    pixels = np.random.default_rng(3).integers(0, 256, size=(5, 8), dtype=np.uint8)
    y = np.maximum((pixels / 255.0).astype(np.float32) @ (models.foldable_mlp_w1() * 2.0), 0)
    for mod, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        out = _infer(mod, url, "mlp_ens", {"pixels": pixels}, ["label", "score"])
        assert out["label"].dtype == np.int64 and out["label"].shape == (5, 1)
        np.testing.assert_array_equal(out["label"][:, 0], y.argmax(-1))
        np.testing.assert_allclose(out["score"][:, 0], y.max(-1), rtol=1e-5, atol=1e-6)


def test_metadata_and_config_endpoints_match_what_was_emitted(server, repo):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert http.get_server_metadata()["version"] == "2.51.0"
        for name in server.loaded:
            emitted = _config(repo, name)
            served = [json_format.ParseDict(http.get_model_config(name), mc.ModelConfig(), ignore_unknown_fields=True),
                      json_format.ParseDict(grpc.get_model_config(name, as_json=True)["config"], mc.ModelConfig(),
                                            ignore_unknown_fields=True)]
            for cfg in served:
                for field in ("name", "platform", "backend", "max_batch_size", "default_model_filename"):
                    assert getattr(cfg, field) == getattr(emitted, field), (name, field)
                for kind in ("input", "output"):
                    assert [(t.name, t.data_type, list(t.dims)) for t in getattr(cfg, kind)] == \
                        [(t.name, t.data_type, list(t.dims)) for t in getattr(emitted, kind)], (name, kind)
                assert cfg.HasField("dynamic_batching") == emitted.HasField("dynamic_batching")
                assert len(cfg.model_warmup) == len(emitted.model_warmup)
                assert [s.model_name for s in cfg.ensemble_scheduling.step] == \
                    [s.model_name for s in emitted.ensemble_scheduling.step]
            meta = http.get_model_metadata(name)
            assert meta["platform"] in (emitted.platform or emitted.backend, emitted.backend)
            batch = [-1] if emitted.max_batch_size else []
            for kind, tensors in (("inputs", emitted.input), ("outputs", emitted.output)):
                assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta[kind]] == \
                    [(t.name, mc.DataType.Name(t.data_type)[5:].replace("STRING", "BYTES"),
                      batch + list(t.dims)) for t in tensors], (name, kind)
            gmeta = grpc.get_model_metadata(name, as_json=True)
            assert [i["name"] for i in gmeta["inputs"]] == [t.name for t in emitted.input]
            assert http.is_model_ready(name) and grpc.is_model_ready(name)
    finally:
        http.close()
        grpc.close()


def test_python_backend_only_without_stand_ins(server_env, repo):
    """Without --cpu-backends this Triton has only the Python backend: Python models load, a
    native onnxruntime config is refused with the server's reason and a hint."""
    from navigator.triton.server import TritonServer

    python_model = "foldable_mlp_torch_export" if deps.has("torch") else "mlp_ens_preprocess"
    server = TritonServer(repo, models=[python_model]).start()
    try:
        assert server.loaded == [python_model]
        with pytest.raises(UserInputError, match=r"unable to find backend library for backend 'onnxruntime'.*"
                                                 r"cpu_backends=True"):
            server.load("foldable_mlp_onnx")
        server.unload(python_model)
        assert server.loaded == []
    finally:
        server.stop()
    server.stop()                                   # idempotent
    assert not list(Path("/dev/shm").glob(f"{server.shm_prefix}*"))
    assert "unable to find backend library" in server.log_tail(400)


def test_the_server_runs_with_what_the_configs_ask_for(server_env, ws, tmp_path):
    """A config with a response cache and a rate limiter gets the server flags it needs: the
    second identical request is a cache hit, and the server runs its rate limiter (without the
    flags Triton loads both with the feature off and says nothing)."""
    import tritonclient.http as http

    from navigator.triton.server import TritonServer

    repo = tmp_path / "repo"
    emit(ws, {"repo": repo, "formats": "onnx", "model_name": "cached", "response_cache": True,
              "rate_limit_resources": ["R:1"], "instances": 2})
    with TritonServer(repo, cpu_backends=True) as server:
        assert any(f.startswith("--cache-config=local,size=") for f in server.command())
        feeds, _ = next(_samples(ws))
        outputs = [o.name for o in _config(repo, "cached").output]
        first = _infer(http, server.http_url, "cached", feeds, outputs)
        second = _infer(http, server.http_url, "cached", feeds, outputs)
        for name in outputs:
            np.testing.assert_array_equal(first[name], second[name])
        status, body = server._request("GET", "/v2/models/cached/stats")
        stats = json.loads(body)["model_stats"][0]["inference_stats"]
        assert status == 200 and int(stats["cache_hit"]["count"]) >= 1, stats
        log = server.log_tail(400)
    assert re.search(r"\|\s*rate_limit\s*\|\s*EXEC_COUNT", log) and re.search(r"\|\s*cache_enabled\s*\|\s*1", log)


def test_runtime_options_a_profile_kept_are_what_the_backends_run(server_env, ws, tmp_path):
    """A workspace whose runners' profiles kept runtime options (status.yaml edited: the tuning's
    outcome depends on the machine): the configs carry them as the backends' own parameters, the
    CPU stand-ins apply them (their load line says so) and the answers stay the reference's."""
    import tritonclient.http as http

    from navigator.triton.server import TritonServer

    copy = tmp_path / "ws"
    shutil.copytree(ws, copy)
    st = status_mod.load(copy / "status.yaml")
    kept = {"onnx": ("onnxruntime-cpu", {"intra_op_num_threads": 1, "execution_mode": "parallel"}),
            "openvino": ("openvino-cpu", {"inference_num_threads": 1, "performance_hint": "THROUGHPUT"})}
    kept = {k: v for k, v in kept.items() if k in st.formats}
    for key, (rkey, options) in kept.items():
        st.formats[key].runners[rkey].profile.options = options
    status_mod.save(st, copy / "status.yaml")
    repo = tmp_path / "repo"
    emit(copy, {"repo": repo, "formats": list(kept)})
    with TritonServer(repo, cpu_backends=True) as server:
        for key in kept:
            name = f"foldable_mlp_{key}" if len(kept) > 1 else "foldable_mlp"
            params = {k: v.string_value for k, v in _config(repo, name).parameters.items()}
            assert params.items() >= {"onnx": {"intra_op_thread_count": "1", "execution_mode": "1"},
                                      "openvino": {"INFERENCE_NUM_THREADS": "1",
                                                   "PERFORMANCE_HINT": "THROUGHPUT"}}[key].items()
            served_as = "openvino-default" if key == "openvino" and deps.cpu_bf16() else None   # as above
            feeds, expected = next(_samples(copy, key, served_as))
            got = _infer(http, server.http_url, name, feeds, list(expected))
            for out, value in expected.items():
                np.testing.assert_allclose(got[out], value, atol=ATOL[key], rtol=1e-3 if served_as else 1e-5)
        log = server.log_tail(2000)
    assert "onnxruntime backend" in log and "1 intra-op thread(s), parallel execution" in log
    if "openvino" in kept:
        assert "PERFORMANCE_HINT THROUGHPUT, INFERENCE_NUM_THREADS 1" in log


def test_the_deploy_kit_client_gets_the_reference_outputs_in_every_mode(server_env, ws, tmp_path, cli):
    """navigator triton writes deploy/ beside the repository: run.sh (the docker run line, with the
    flags the configs need) and client.py, which gets the reference outputs from the real server
    over HTTP and gRPC, sync and async, with and without system shared memory."""
    from navigator.triton.server import TritonServer

    repo = tmp_path / "repo"
    kit = tmp_path / "kit"
    name = f"kitted{os.getpid()}"     # its shared-memory regions are named after it: none of another suite's
    r = cli("triton", ws, "--repo", repo, "--formats", "onnx", "--model-name", name, "--response-cache",
            "--deploy", kit)
    assert r.returncode == 0, r.stderr
    assert f"deploy kit: {kit}" in r.stdout
    run_sh = (kit / "run.sh").read_text()
    assert f"--load-model={name}" in run_sh and "--cache-config=local,size=" in run_sh
    assert subprocess.run(["bash", "-n", kit / "run.sh"]).returncode == 0
    with TritonServer(repo, cpu_backends=True) as server:
        for extra in ([], ["--async"], ["--shared-memory"], ["--async", "--shared-memory"]):
            for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
                out = subprocess.run([sys.executable, kit / "client.py", "--protocol", protocol, "--url", url,
                                      "--reference", *extra], capture_output=True, text=True, timeout=120)
                assert out.returncode == 0 and "matches the reference" in out.stdout, (
                    f"{protocol} {extra}: {out.stdout[-500:]}\n{out.stderr[-3000:]}")   # the traceback's end
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(f"{name}_")]   # regions removed
    one_line_error(cli("triton", ws, "--repo", repo, "--formats", "onnx", "--model-name", name, "--force",
                       "--deploy", repo / "deploy"), "inside the repository")


# --------------------------------------------------------------------------- the CLI
def _bad_repo(repo: Path, tmp_path: Path, name: str, edit) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(repo / name, bad / name)
    edit(bad / name)
    return bad


def _rename_input(model: Path) -> None:
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "x"', 'name: "xx"', 1))


def _bad_dims(model: Path) -> None:
    cfg = model / "config.pbtxt"
    cfg.write_text(re.sub(r"(input \{\n  name: \"x\"\n  data_type: TYPE_FP32\n  dims: )8", r"\g<1>9",
                          cfg.read_text()))


def _unknown_field(model: Path) -> None:
    cfg = model / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "\nbogus_field: 1\n")


def _no_artifact(model: Path) -> None:
    (model / "1" / "model.onnx").unlink()


@pytest.mark.parametrize("edit, needles", [
    (_rename_input, ["foldable_mlp_onnx", "onnxruntime stand-in", "unexpected input 'xx'"]),
    (_bad_dims, ["the model expects shape [-1,8] but the configuration gives [-1,9]"]),
    (_unknown_field, ["has no field named \"bogus_field\""]),
    (_no_artifact, ["unable to find", "model.onnx"]),
])
def test_a_broken_config_is_one_error_line_with_the_servers_reason(server_env, repo, tmp_path, cli, edit, needles):
    bad = _bad_repo(repo, tmp_path, "foldable_mlp_onnx", edit)
    r = cli("serve", bad, "--cpu-backends", timeout=120)
    line = one_line_error(r, "model 'foldable_mlp_onnx' failed to load", *needles)
    assert " At: " not in line                      # the Python traceback the backend appends is cut


def test_bad_arguments(cli, tmp_path, repo):
    one_line_error(cli("serve"), "needs a model repository")
    one_line_error(cli("serve", tmp_path / "missing"), "is not a folder")
    one_line_error(cli("serve", repo, "--models", "nope"), "model 'nope' is not in", "foldable_mlp_onnx")
    one_line_error(cli("serve", repo, "--http-port", "70000"), "--http-port 70000 is not a port number")
    one_line_error(cli("serve", repo, "--tritonserver", tmp_path / "nothing"), "is not an executable file")


def test_prepare_without_a_registry_is_one_error_line(cli, tmp_path):
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    r = cli("serve", "--prepare", env={"NAVIGATOR_CACHE": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull,
                                       "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)}, timeout=120)
    one_line_error(r, "cannot download the Triton server packages", "nvidia-pytriton==0.7.0",
                   "needs package-registry access once")


def test_prepare_is_idempotent_and_perf_analyzer_runs(server_env, cli):
    r = cli("serve", "--prepare", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "server environment ready" in r.stdout and str(server_env.tritonserver) in r.stdout
    assert server_env.perf_analyzer is not None and server_env.perf_analyzer.is_file()
    for name in ("libcudart.so.12", "libb64.so.0d"):
        assert (server_env.lib_dir / name).resolve().is_file(), name
    pa = subprocess.run([str(server_env.perf_analyzer), "--version"], env=server_env.process_env(),
                        capture_output=True, text=True, timeout=60)
    assert "error while loading shared libraries" not in pa.stderr, pa.stderr
    # the perf_analyzer that --prepare prints runs by hand, as printed, with nothing set
    printed = re.search(r"perf_analyzer: (\S+)", r.stdout).group(1)
    bare = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    by_hand = subprocess.run([printed, "--version"], env=bare, capture_output=True, text=True, timeout=60)
    assert by_hand.returncode == 0 and "Perf Analyzer Version" in by_hand.stdout + by_hand.stderr, by_hand.stderr
    # the venv's numpy<2 wins over the project's numpy 2; torch etc. come from the project
    probe = "import numpy, sys; print(numpy.__version__)"
    out = subprocess.run([str(server_env.python), "-c", probe], env=server_env.process_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip().startswith("1."), out.stdout + out.stderr


def _read_until(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    """stdout of ``proc`` up to the line holding ``marker`` (os.read: no buffering surprises)."""
    data, deadline = b"", time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while marker.encode() not in data:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            err = proc.stderr.read() if proc.poll() is not None else b""
            raise AssertionError(f"no {marker!r} from navigator serve: {(data + err).decode(errors='replace')}")
        if select.select([fd], [], [], min(left, 0.5))[0]:
            data += os.read(fd, 65536)
    return data.decode()


def _processes_with(needle: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_triton_then_serve_answers_and_ctrl_c_stops_everything(server_env, ws, tmp_path, cli):
    """The issue's done-criterion: `navigator triton WS`, `navigator serve WS/triton
    --cpu-backends`, a tritonclient request gets the reference outputs; Ctrl-C (SIGINT)
    stops the server and its stubs and leaves no shared memory of its prefix."""
    import tritonclient.http as httpclient

    copy = tmp_path / ws.name
    shutil.copytree(ws, copy)
    r = cli("triton", copy)
    assert r.returncode == 0, r.stdout + r.stderr
    [name] = os.listdir(copy / "triton")
    proc = subprocess.Popen([sys.executable, "-m", "navigator", "serve", copy / "triton", "--cpu-backends"],
                            preexec_fn=interruptible,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        out = _read_until(proc, "Ctrl-C stops the server", 120)
        pid = int(re.search(r"\(pid (\d+),", out).group(1))
        prefix = re.search(r"shm prefix (\S+)\)", out).group(1)
        url = re.search(r"HTTP:\s+http://(\S+)", out).group(1)
        assert url.startswith("127.0.0.1:")
        best = yaml.safe_load((copy / "status.yaml").read_text())["best"]["key"]
        served_as = "openvino-default" if best == "openvino" and deps.cpu_bf16() else None   # what it verified
        for feeds, ref in _samples(copy, best, served_as):
            y = _infer(httpclient, url, name, feeds, ["y"])["y"]
            np.testing.assert_allclose(y, ref["y"], rtol=1e-3 if served_as else 1e-5, atol=1e-3)
        stubs = [p for p in _processes_with(prefix) if p != pid]
        assert stubs, "no Python-backend stub found for the loaded model"
        assert list(Path("/dev/shm").glob(f"{prefix}*"))
        proc.send_signal(signal.SIGINT)
        rest, err = (b.decode() for b in proc.communicate(timeout=30))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped" in rest and "Traceback" not in err
    assert _processes_with(prefix) == [], "a server or stub process outlived navigator serve"
    assert not list(Path("/dev/shm").glob(f"{prefix}*"))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_server_log_names_the_stand_ins_as_test_doubles(server):
    log = server.log_tail(2000)
    assert re.search(r"navigator CPU stand-in for Triton's onnxruntime backend \(a test double", log)
    if deps.has("openvino"):
        assert "stand-in for Triton's openvino backend (a test double" in log
    assert json.dumps(server.load_s)                 # load times are recorded per model


def test_a_port_taken_before_the_server_binds_it_is_picked_again(server_env, repo, monkeypatch):
    import socket

    from navigator.triton import server as srv

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        ports = iter([busy.getsockname()[1]])
        real = srv._free_port
        monkeypatch.setattr(srv, "_free_port", lambda: next(ports, None) or real())
        with srv.TritonServer(repo, models=[]) as s:
            assert s.http_port != busy.getsockname()[1]
            assert s.http_url.startswith("127.0.0.1:")
        with pytest.raises(UserInputError, match="already in use"):     # a port the user chose is not replaced
            srv.TritonServer(repo, models=[], http_port=busy.getsockname()[1]).start()
