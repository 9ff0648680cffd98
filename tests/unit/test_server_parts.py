"""navigator.triton.server without starting a server: the cache location, the command
line, input checks, the one-line reasons taken from Triton's log and responses, and the
shared-memory clean-up by prefix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from navigator.errors import UserInputError
from navigator.triton import server


def test_cache_dir_follows_navigator_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("NAVIGATOR_CACHE", str(tmp_path))
    assert server.cache_dir() == tmp_path / "triton-2.51"
    monkeypatch.delenv("NAVIGATOR_CACHE")
    assert server.cache_dir() == Path.home() / ".cache" / "navigator" / "triton-2.51"


def _repo(tmp_path: Path) -> Path:
    for name, text in (("b", 'backend: "python"'), ("a_ens", 'platform: "ensemble"'), ("c", 'backend: "onnxruntime"')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}\n')
    (tmp_path / "not_a_model").mkdir()
    return tmp_path


def test_every_model_folder_ensembles_last(tmp_path):
    assert server.model_folders(_repo(tmp_path)) == ["b", "c", "a_ens"]


def test_the_command_binds_localhost_and_uses_explicit_control(tmp_path):
    s = server.TritonServer(_repo(tmp_path), http_port=1, grpc_port=2, metrics_port=3)
    s.env = server.ServerEnv(tritonserver=Path("/x/tritonserver"), python=Path("/x/python"), backend_dir=tmp_path,
                             lib_dir=tmp_path, perf_analyzer=None, env={})
    s._backend_dir_path = tmp_path / "backends"
    cmd = s.command()
    for flag in ("--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                 "--model-control-mode=explicit", "--disable-auto-complete-config", "--allow-gpu-metrics=false",
                 "--pinned-memory-pool-byte-size=0", "--exit-timeout-secs=5",
                 f"--backend-config=python,shm-region-prefix-name={s.shm_prefix}"):
        assert flag in cmd, flag
    assert (s.http_url, s.grpc_url, s.metrics_url) == ("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics")
    assert s.shm_prefix != server.TritonServer(tmp_path).shm_prefix     # unique per server


def test_inputs_are_checked_before_anything_starts(tmp_path):
    with pytest.raises(UserInputError, match="is not a folder"):
        server.TritonServer(tmp_path / "nope").start()
    with pytest.raises(UserInputError, match="model 'z' is not in .* \\(it has b, c, a_ens\\)"):
        server.TritonServer(_repo(tmp_path), models=["z"]).start()
    with pytest.raises(UserInputError, match="not an executable file"):
        server.TritonServer(tmp_path, tritonserver=tmp_path / "b" / "config.pbtxt").start()
    s = server.TritonServer(tmp_path)
    s.stop()                                                            # stop before start: nothing to do
    with pytest.raises(UserInputError, match="not running"):
        s.load("b")


def test_process_env_drops_the_projects_python_settings(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    env = server.ServerEnv(tritonserver=Path("t"), python=Path("p"), backend_dir=Path("b"), lib_dir=Path("l"),
                           perf_analyzer=None, env={"LD_LIBRARY_PATH": "/lib1", "PATH": "/venv/bin"})
    out = env.process_env()
    assert "PYTHONPATH" not in out and out["LD_LIBRARY_PATH"] == "/lib1" and out["PATH"] == "/venv/bin"


@pytest.mark.parametrize("raw, clean", [
    ('E1122 18:25:42.048429 19240 model_repository_manager.cc:1460] "Poll failed for model directory \'m\'"',
     "Poll failed for model directory 'm'"),
    ("[libprotobuf ERROR /tmp/x/text_format.cc:337] Error parsing text-format inference.ModelConfig: 4:30: bad",
     "Error parsing text-format inference.ModelConfig: 4:30: bad"),
    ("Internal: ValueError: boom\n\nAt:\n  /x/model.py(3): initialize\n", "Internal: ValueError: boom"),
    ('E1122 1:2:3.4 5 python_be.cc:1] "failed: ValueError: boom\\n\\nAt:\\n  /x/model.py(3): initialize\\n"',
     "failed: ValueError: boom"),
])
def test_reasons_are_one_line_without_log_prefix_or_traceback(raw, clean):
    assert server._clean(raw) == clean


def test_the_log_adds_only_what_the_response_does_not_say(tmp_path):
    s = server.TritonServer(tmp_path)
    s._log = tmp_path / "log"
    s._log.write_text("I0000 0:0:0.0 1 x.cc:1] \"loading\"\n"
                      "E0000 0:0:0.0 1 x.cc:1] \"failed to load 'm' version 1: Internal: ValueError: boom\"\n"
                      "[libprotobuf ERROR /x/text_format.cc:1] Error parsing text-format: no field named \"f\".\n")
    body = json.dumps({"error": "load failed for model 'm': version 1 is at UNAVAILABLE state: Internal: "
                                "ValueError: boom\n\nAt:\n  /x(1): f\n"}).encode()
    assert s._reason(body, "m") == ("load failed for model 'm': version 1 is at UNAVAILABLE state: Internal: "
                                    "ValueError: boom; Error parsing text-format: no field named \"f\".")
    body = json.dumps({"error": "unable to find backend library for backend 'onnxruntime'"}).encode()
    assert "cpu_backends=True" in s._reason(body, "m", offset := s._log.stat().st_size)
    assert offset > 0


def test_remove_shm_removes_only_its_prefix():
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    mine, other = shm / f"navtest_{os.getpid()}_a_1", shm / f"navtest_{os.getpid()}_b_1"
    mine.write_bytes(b"x")
    other.write_bytes(b"x")
    try:
        assert server.remove_shm(f"navtest_{os.getpid()}_a_") == [mine.name]
        assert not mine.exists() and other.exists()
        assert server.remove_shm("") == []
    finally:
        other.unlink(missing_ok=True)
        mine.unlink(missing_ok=True)


def test_an_empty_repository_is_refused(tmp_path):
    with pytest.raises(UserInputError, match="holds no model"):
        server.TritonServer(tmp_path).start()


def test_the_reason_a_server_gives_is_an_error_line_never_a_warning_that_names_one():
    """Triton warns at every start that "--load-model argument will result in error": a server that
    then exits without an error line was reported with that warning as its reason (a CI run's
    "tritonserver exited at start (exit 1): --load-model argument will result in error"). A
    warning or info line is no error; without an error line the reason is the log's last line,
    said so (its option tables are not lines of it)."""
    from navigator.triton.server import log_reason

    warn = ("W1128 12:45:01.000 123 server.cc:50] \"--load-model argument will result in error. Note that this "
            "option will only take effect if --model-control-mode=explicit\"")
    table = "+---------+------+\n| Backend | Path |\n+---------+------+"
    assert log_reason(f"{warn}\nI1128 12:45:02.000 123 grpc_server.cc:2500] Started\n{table}") == \
        "no error line; its log ends: Started"
    err = "E1128 12:45:03.000 123 main.cc:300] failed to start HTTP service: Address already in use"
    assert log_reason(f"{warn}\n{err}\n{table}") == "failed to start HTTP service: Address already in use"
    assert log_reason("error: creating server: Internal - failed to load all models") == \
        "error: creating server: Internal - failed to load all models"     # an unprefixed line still counts
    assert log_reason("") == ""
