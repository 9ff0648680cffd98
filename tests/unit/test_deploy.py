"""The deploy kit's decisions without a server: the container release for the engines, the server
flags the configs need, the GPU flag."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed (a core dependency)")

from google.protobuf import text_format  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from navigator.triton import deploy  # noqa: E402
from navigator.triton.server import server_flags  # noqa: E402


def _plan(repo: Path, model: str, magic: bytes, version: tuple[int, int, int]) -> None:
    (repo / model / "1").mkdir(parents=True)
    (repo / model / "1" / "model.plan").write_bytes(magic + bytes(20) + bytes([*version, 0]) + bytes(64))


def test_the_release_is_the_one_whose_tensorrt_built_the_engines(tmp_path):
    assert deploy.release_for(tmp_path, ["onnx_model"]) == (deploy.DEFAULT_RELEASE, deploy.DEFAULT_WHY)
    _plan(tmp_path, "engine", b"ftrt", (10, 4, 0))
    tag, why = deploy.release_for(tmp_path, ["engine"])
    assert tag == "24.09" and "TensorRT is 10.4.0" in why
    _plan(tmp_path, "other", b"ftrt", (10, 8, 0))
    tag, why = deploy.release_for(tmp_path, ["engine", "other"])
    assert tag == deploy.DEFAULT_RELEASE and "different TensorRT versions (10.4.0, 10.8.0)" in why
    _plan(tmp_path, "unknown", b"ftrt", (9, 9, 9))
    assert "no release in check-engine's table has TensorRT 9.9.9" in deploy.release_for(tmp_path, ["unknown"])[1]
    _plan(tmp_path, "rtx", b"vtrt", (1, 2, 0))
    assert "does not load it" in deploy.release_for(tmp_path, ["rtx"])[1]


def _config(text: str):
    return text_format.Parse(text, mc.ModelConfig())


def test_server_flags_follow_the_configs():
    plain = _config('name: "a" backend: "onnxruntime"')
    cached = _config('name: "b" backend: "onnxruntime" response_cache { enable: true }')
    limited = _config('name: "c" backend: "onnxruntime" instance_group { count: 2 kind: KIND_CPU '
                      'rate_limiter { resources { name: "R" count: 1 } } }')
    assert server_flags([plain]) == []
    assert server_flags([plain, cached]) == ["--cache-config=local,size=67108864"]
    assert server_flags([limited]) == ["--rate-limit=execution_count"]


def test_run_sh_asks_for_gpus_when_a_model_runs_on_one(tmp_path):
    from types import SimpleNamespace

    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m" backend: "onnxruntime" max_batch_size: 8 '
                                             'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } '
                                             'output { name: "y" data_type: TYPE_STRING dims: [ 1 ] } '
                                             'instance_group { count: 1 kind: KIND_GPU }')
    models = [SimpleNamespace(name="m", python=False)]
    written = deploy.write(tmp_path / "deploy", repo, "m", models, None, None, {"x": "input"})
    run_sh = (tmp_path / "deploy" / "run.sh").read_text()
    assert "docker run --rm --gpus all" in run_sh and "--load-model=m" in run_sh
    assert f'${{1:-{repo}}}' in run_sh and "tritonserver:24.10-py3" in run_sh
    client = (tmp_path / "deploy" / "client.py").read_text()
    assert "INPUTS = {'x': ('input', 'FP32')}" in client and "OUTPUTS = {'y': 'y'}" in client
    compile(client, "client.py", "exec")
    assert [p.name for p in written] == ["run.sh", "client.py"]
