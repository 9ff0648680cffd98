"""Warm workers (navigator.execution.forkserver): a run's workers are forks of one server that
imported the frameworks once, with a fresh worker's isolation. Real runs, real processes: a crash
leaves the server serving, the server's death leaves the run on fresh workers, a SIGKILLed run
leaves no server or worker behind, and ``no_warm_workers`` starts fresh interpreters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import navigator
from navigator.execution import forkserver

from ..conftest import wait_for_worker
from . import plugin_converters as plugins

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not forkserver.available(), reason="warm workers need Linux (fork, SCM_RIGHTS)")]
FAST = dict(device="cpu", no_profile=True, max_batch_size=4, jobs=1)


def _lineage(result) -> dict:
    return json.loads((Path(result.workspace) / "formats" / "onnx-lineage" / "lineage.json").read_text())


@pytest.fixture
def lineage():
    with plugins.registered(plugins.Lineage):
        yield


def test_workers_are_forks_of_one_server_that_preloaded(lineage, tmp_path, onnx_model, monkeypatch):
    monkeypatch.setenv("NAVIGATOR_TEST_LINEAGE", "seen")
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "w", targets=["onnx", "onnx-lineage"],
                               **FAST)
    assert result.status.formats["onnx-lineage"].runners["onnxruntime-cpu"].verify.status == "ok"
    facts = _lineage(result)
    assert "navigator._forkserver" in facts["parent_cmdline"] and facts["ppid"] != os.getpid()
    # its command line names its job, as a fresh worker's does (ps, pgrep -f, the tests' process checks)
    assert f"navigator._worker {result.workspace}/jobs/onnx-lineage" in facts["cmdline"], facts["cmdline"]
    # imported by the server, not by anything the job ran before its conversion
    assert "polygraphy.backend.onnxrt" in facts["modules"] and "torch" not in facts["modules"]
    assert facts["cwd"] == os.getcwd() and facts["env"] == "seen"
    log = (Path(result.workspace) / "navigator.log").read_text()
    assert "fork server" in log and "fresh worker instead" not in log


def test_no_warm_workers_starts_fresh_interpreters(lineage, tmp_path, onnx_model):
    result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "w", targets=["onnx", "onnx-lineage"],
                               no_warm_workers=True, **FAST)
    facts = _lineage(result)
    assert facts["ppid"] == os.getpid()
    assert "polygraphy.backend.onnxrt" not in facts["modules"]
    assert "fork server" not in (Path(result.workspace) / "navigator.log").read_text()


def test_a_crash_leaves_the_server_serving(tmp_path, onnx_model):
    with plugins.registered(plugins.Segfault, plugins.Lineage):
        result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "w",
                                   targets=["onnx", "onnx-crash", "onnx-lineage"], **FAST)
    st = result.status
    assert st.formats["onnx-crash"].convert.status == "failed"
    assert "SIGSEGV" in st.formats["onnx-crash"].convert.reason
    assert st.formats["onnx-lineage"].runners["onnxruntime-cpu"].verify.status == "ok"
    assert "navigator._forkserver" in _lineage(result)["parent_cmdline"]   # forked after the crash


def test_a_dead_server_leaves_the_run_on_fresh_workers(tmp_path, onnx_model):
    with plugins.registered(plugins.KillsServer, plugins.Lineage):
        result = navigator.convert(onnx_model("foldable_mlp"), workdir=tmp_path / "w",
                                   targets=["onnx", "onnx-killserver", "onnx-lineage"], **FAST)
    st = result.status
    killed = st.formats["onnx-killserver"].convert
    assert killed.status == "failed" and "the warm-worker server died" in killed.reason, killed.reason
    assert "out of memory" not in killed.reason   # it was said so before
    assert st.formats["onnx-lineage"].runners["onnxruntime-cpu"].verify.status == "ok"
    assert _lineage(result)["ppid"] == os.getpid()   # the server is gone: a fresh interpreter
    assert "a fresh worker instead" in (Path(result.workspace) / "navigator.log").read_text()


SCRIPT = """
import sys
import navigator
import hang_warm   # a module, not __main__: its converter runs in a worker

navigator.convert(sys.argv[1], workdir=sys.argv[2], targets=["onnx", "onnx-hang"], device="cpu", timeout=300,
                  no_profile=True, max_batch_size=4)
"""


def _processes(needle: str) -> str:
    return subprocess.run(["pgrep", "-af", needle], capture_output=True, text=True).stdout.strip()


def test_a_killed_run_leaves_no_server_and_no_worker(tmp_path, onnx_model):
    """SIGKILL gives the run no chance to clean up: its server sees the control socket close and
    kills its children, and each child dies with its server (PR_SET_PDEATHSIG)."""
    plugins.write_hang_module(tmp_path / "hang_warm.py", "test_hang_warm")
    (tmp_path / "run.py").write_text(SCRIPT)
    ws = tmp_path / "wd" / "foldable_mlp.nav.workspace"
    proc = subprocess.Popen([sys.executable, "run.py", str(onnx_model("foldable_mlp")), str(tmp_path / "wd")],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_worker(f"navigator._worker {ws}/jobs/onnx-hang", proc)
        server = f"warm workers of run {proc.pid})"
        assert _processes(server), "the run's workers are not forks of its server"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (_processes(f"navigator._worker {ws}") or _processes(server)):
            time.sleep(0.1)
        assert not _processes(f"navigator._worker {ws}"), "a worker outlived its SIGKILLed run"
        assert not _processes(server), "the fork server outlived its SIGKILLed run"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_preload_follows_the_source(tmp_path):
    class Config:
        targets = None

    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"")
    assert "torch" not in forkserver.preload_for(str(onnx_file), Config())
    assert "onnx" in forkserver.preload_for(str(onnx_file), Config())
    assert "onnxruntime" not in forkserver.preload_for(str(onnx_file), Config())   # it starts a thread at import
    assert "torch" in forkserver.preload_for("model.py:factory", Config())
    assert not any(n.startswith("tensorflow") for n in forkserver.preload_for("saved_model_dir", Config()))
    Config.targets = ["onnx", "torch_export-fp16", "openvino?"]   # a target's record needs torch
    assert "torch" in forkserver.preload_for(str(onnx_file), Config())
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "bert"}')
    hf = forkserver.preload_for(str(tmp_path / "hf"), Config())
    assert "torch" in hf and ("transformers" in hf) == (__import__("importlib").util.find_spec("transformers")
                                                         is not None)


def test_the_server_never_forks_beside_a_thread(tmp_path, monkeypatch):
    """A module that starts a thread at import, preloaded anyway: the server refuses to fork (a lock
    that thread held would stay locked in the child) and says why; the run would start a fresh worker."""
    (tmp_path / "navtest_starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = forkserver.ForkServer(["numpy", "navtest_starts_a_thread"]).start()
    try:
        with open(tmp_path / "job.log", "ab") as log:   # held until that import is done, then refused
            with pytest.raises(forkserver.ServerGone, match="thread"):
                server.spawn(tmp_path / "job.json", log, dict(os.environ), after="navtest_starts_a_thread")
    finally:
        server.close()


def test_a_zombies_exit_status_is_read_without_its_server():
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    try:
        deadline = time.monotonic() + 10
        while forkserver._zombie_exit(pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert forkserver._zombie_exit(pid) == 3
    finally:
        os.waitpid(pid, 0)
    assert forkserver._zombie_exit(pid) is None   # reaped: gone


def test_a_worker_says_it_ended_while_its_server_is_importing(tmp_path, monkeypatch):
    """The server reaps its children only between two imports (torch's compiler takes seconds); a
    worker that ends says so itself, with its exit code and peak memory, so the run does not hold
    its job slot until the server is free. Here the job fails at once (no job file) while the server
    is in a 3 s import: its end and peak come back before that import is over (the server's word,
    or /proc's after a second's wait without a peak, came only after it)."""
    import threading

    server = _gated_server(tmp_path, monkeypatch, slow_s=3)
    try:
        # the request waits in the server's socket while it imports the gate; forked right after, then
        # the server goes on to the slow import
        threading.Timer(0.3, (tmp_path / "go").touch).start()
        with open(tmp_path / "job.log", "ab") as log:
            worker = server.spawn(tmp_path / "missing-job.json", log, dict(os.environ))
        code, peak = worker.reap(block=True)
        assert not (tmp_path / "slow.done").exists()   # the server is still in its slow import
        assert code == 1 and peak is not None and peak > 0
    finally:
        server.close()


def _gated_server(tmp_path, monkeypatch, slow_s: float = 1.0):
    """A server that imports ``navtest_gate`` (until the file ``go`` exists; ``gate.inside`` says it is
    in it), then ``navtest_slow`` (``slow_s``; ``slow.done`` after), returned once it is in the gate."""
    (tmp_path / "navtest_gate.py").write_text(
        "import os, pathlib, time\npathlib.Path(os.environ['NAVTEST_INSIDE']).touch()\n"
        "while not pathlib.Path(os.environ['NAVTEST_GO']).exists():\n    time.sleep(0.01)\n")
    (tmp_path / "navtest_slow.py").write_text(
        f"import os, pathlib, time\ntime.sleep({slow_s})\npathlib.Path(os.environ['NAVTEST_DONE']).touch()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("NAVTEST_GO", str(tmp_path / "go"))
    monkeypatch.setenv("NAVTEST_DONE", str(tmp_path / "slow.done"))
    monkeypatch.setenv("NAVTEST_INSIDE", str(tmp_path / "gate.inside"))
    server = forkserver.ForkServer(["navtest_gate", "navtest_slow"]).start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "gate.inside").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return server


@pytest.mark.parametrize("after, forked_after_slow", [(None, False), ("navtest_slow", True)])
def test_a_job_is_forked_after_the_preloaded_module_it_needs(tmp_path, monkeypatch, after, forked_after_slow):
    """A request that names a module of the preload still to import waits for it (a conversion to
    ONNX for torch's exporter: forked before, it imported the exporter itself while the server
    imported it beside it); one that names none is forked between two imports as it comes."""
    import threading

    server = _gated_server(tmp_path, monkeypatch)
    try:
        threading.Timer(0.3, (tmp_path / "go").touch).start()   # the request waits while the gate imports
        with open(tmp_path / "job.log", "ab") as log:
            worker = server.spawn(tmp_path / "missing-job.json", log, dict(os.environ), after=after)
        assert (tmp_path / "slow.done").exists() is forked_after_slow
        assert worker.reap(block=True)[0] == 1
    finally:
        server.close()


def test_what_a_job_waits_for():
    from navigator.converters.registry import registry
    from navigator.execution.jobs import ConvertSpec, RunnerTask, Task

    edge = {(e.source, e.target): e.import_path() for e in registry.edges()}

    def job(*tasks):
        return type("J", (), {"tasks": list(tasks)})()

    def task(runners=(), converter=None, source="formats/torch/source.json"):
        convert = ConvertSpec(converter=converter, source=source, output="x") if converter else None
        return Task(kind="format", key="k", artifact="a", convert=convert,
                    runners=[RunnerTask(runner=r, device="cpu") for r in runners])

    assert forkserver.wait_for(job(task(["onnxruntime"]))) is None
    assert forkserver.wait_for(job(task(["torchscript"]))) == "torch"
    assert forkserver.wait_for(job(task(["torch_export"]))) == "torch._inductor.compile_fx"
    exports_onnx = "onnxscript.function_libs.torch_lib.ops"
    assert forkserver.wait_for(job(task(converter=edge["torch_export", "onnx"],
                                        source="formats/torch_export/model.pt2"))) == exports_onnx
    assert forkserver.wait_for(job(task(converter=edge["torch", "onnx"]))) == exports_onnx
    assert forkserver.wait_for(job(task(converter=edge["torch", "torchscript"]))) == "torch"
    assert forkserver.wait_for(job(task(converter=edge["torch", "torch-fp16"]))) == "torch"
    assert forkserver.wait_for(job(task(["torchscript"]), task(["torch_export"]))) == "torch._inductor.compile_fx"
    # a module the server does not preload (onnxscript missing): the last one before it that it does
    preload = ["numpy", "torch", "torch.export", "torch._dynamo", "torch._inductor.compile_fx"]
    assert forkserver.preloaded_by(exports_onnx, preload) == "torch._inductor.compile_fx"
    assert forkserver.preloaded_by("torch", ["numpy"]) is None
    assert forkserver.preloaded_by(None, preload) is None
