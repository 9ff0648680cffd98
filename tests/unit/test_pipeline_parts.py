"""The small parts of the pipeline's core, each on its own: the --timeout watch of a thread,
the one wording of a timeout, an artifact's digest, the machine's memory, a stage's log."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from navigator import machine
from navigator.execution.isolation import StageClock
from navigator.execution.jobs import Event, timeout_reason
from navigator.execution.logs import StageLog
from navigator.pipeline.digests import artifact_sha256
from navigator.pipeline.timeouts import StageTimeout, async_raise, timeout_here


def test_the_watch_stops_a_stage_that_runs_too_long_and_only_that():
    start = time.monotonic()
    with pytest.raises(StageTimeout):
        with timeout_here(0.2, StageClock(Event(task=0, key="onnx", stage="verify", event="start"))):
            while time.monotonic() - start < 10:    # pure Python: stopped at its next bytecode
                pass
    assert time.monotonic() - start < 5
    idle = StageClock()
    with timeout_here(0.1, idle):                   # no stage open: nothing is raised
        time.sleep(0.3)
    with timeout_here(None, idle):                  # no limit
        pass


def test_one_rule_says_when_a_stage_is_late():
    stage = Event(task=0, key="onnx", stage="convert", event="start")
    clock = StageClock(stage)
    t0 = clock.stage_start
    assert clock.overdue(2.0, now=t0 + 1.9) is None
    assert clock.overdue(2.0, now=t0 + 2.1) is stage
    assert clock.overdue(None, now=t0 + 1e6) is None and clock.overdue(0, now=t0 + 1e6) is None
    assert StageClock().overdue(0.1, now=t0 + 10) is None      # nothing open: nothing late


def test_async_raise_reaches_another_thread():
    seen = []

    def spin():
        try:
            while True:
                time.sleep(0.001)
        except StageTimeout:
            seen.append("stopped")

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    time.sleep(0.05)
    async_raise(t, StageTimeout)
    t.join(5)
    assert seen == ["stopped"]


def test_one_wording_of_a_timeout():
    assert timeout_reason(2) == "timed out after 2 s (--timeout)"
    assert timeout_reason(2.5, "convert", where="in the calling process") == \
        "timed out after 2.5 s in convert (--timeout) in the calling process"
    assert timeout_reason(600, "verify", where="; the worker was killed") == \
        "timed out after 600 s in verify (--timeout); the worker was killed"


def test_an_artifacts_digest_follows_its_bytes_and_names(tmp_path):
    from navigator.workspace.layout import Workspace
    from navigator.workspace.status import FormatStatus

    ws = Workspace(tmp_path / "m.nav.workspace")
    folder = ws.root / "formats" / "openvino"
    folder.mkdir(parents=True)
    (folder / "model.xml").write_text("<net/>")
    (folder / "model.bin").write_bytes(b"\0" * 8)
    fs = FormatStatus(format="openvino", path="formats/openvino")
    first = artifact_sha256(ws, fs)
    assert first and artifact_sha256(ws, fs) == first
    (folder / "model.bin").write_bytes(b"\1" * 8)
    assert artifact_sha256(ws, fs) != first
    assert artifact_sha256(ws, FormatStatus(format="onnx", path="formats/onnx/model.onnx")) is None   # absent
    assert artifact_sha256(ws, FormatStatus(format="onnx", path=None)) is None


def test_the_machines_memory_and_the_default_limit():
    total = machine.physical_memory_bytes()
    assert total is None or total > 64 << 20
    limit = machine.default_memory_limit_gb()
    if total:
        assert limit == round(total * 0.75 / machine.GIB, 1)


def test_a_stage_log_takes_the_records_of_its_stage_only(tmp_path):
    log = logging.getLogger("navigator.test_stage_log")
    log.setLevel(logging.INFO)
    path = tmp_path / "formats" / "onnx" / "verify.log"
    with StageLog(path):
        log.info("inside the stage")
    log.info("after it")
    text = path.read_text()
    assert "inside the stage" in text and "after it" not in text


def test_a_job_waits_for_the_preload_its_formats_and_edges_need():
    """The fork server forks a job once the preload has what the job loads: read from the format
    records (Format.preload) and the converters (Converter.preload), not from a table of names."""
    from navigator.converters.registry import registry
    from navigator.execution import forkserver
    from navigator.execution.jobs import ConvertSpec, Job, RunnerTask, Task

    def wait(*tasks):
        return forkserver.wait_for(Job(workspace="/w", events="/e", tasks=list(tasks), sys_path=[], parent_pid=1))

    def task(key, runners=(), edge=None):
        convert = ConvertSpec(converter=registry.get(edge).import_path(), source="s", output="o") if edge else None
        return Task(kind="format", key=key, artifact="a", runners=[RunnerTask(r, "cpu") for r in runners],
                    convert=convert)

    onnx_export = "onnxscript.function_libs.torch_lib.ops"
    program = "torch._inductor.compile_fx"
    assert wait(task("onnx", ["onnxruntime"])) is None
    assert wait(task("onnx-optimized", ["onnxruntime"], "onnx_to_onnx_optimized")) is None
    assert wait(task("onnx", ["onnxruntime"], "torch_to_onnx")) == onnx_export
    assert wait(task("onnx", ["onnxruntime"], "torch_export_to_onnx")) == onnx_export
    assert wait(task("torch_export", ["torch_export"])) == program
    assert wait(task("aoti", ["aoti"], "torch_export_to_aoti")) == program
    assert wait(task("torch", ["torch", "torch_compile"])) == "torch"
    assert wait(task("torchscript", ["torchscript"], "torch_to_torchscript")) == "torch"
    assert wait(Task(kind="reference", key="reference", artifact="a", reference_runner=RunnerTask("torch", "cpu"))) \
        == "torch"
    assert wait(task("torch", ["torch"]), task("onnx", ["onnxruntime"], "torch_to_onnx")) == onnx_export   # the last


def test_a_files_format_is_read_from_the_records(tmp_path):
    from navigator import formats
    from navigator.sources import torch_file_kind

    assert formats.by_suffix(".ONNX") == "onnx" and formats.by_suffix(".pt2") == "torch_export"
    assert formats.by_suffix(".jit") == "torchscript" and formats.by_suffix(".txt") is None
    for name, kind in (("m.pt", "torchscript"), ("m.pt2", "torch_export"), ("m.onnx", None)):
        (tmp_path / name).write_bytes(b"x")
        assert torch_file_kind(tmp_path / name) == kind       # loading it unpickles: a worker opens it
    assert torch_file_kind(tmp_path / "missing.pt") is None


def test_a_killed_workers_temp_files_are_removed_and_nothing_else(tmp_path):
    import os

    from navigator.workspace.layout import Workspace

    ws = Workspace(tmp_path / "m.nav.workspace")
    outputs = ws.root / "formats" / "onnx" / "outputs" / "onnxruntime-cpu"
    outputs.mkdir(parents=True)
    stray = outputs / ".000.npz.2pinhs_g.tmp"          # what atomic_open's mkstemp names
    stray.write_bytes(b"partial")
    kept = [outputs / "000.npz", outputs / ".notes.tmp", ws.root / "status.yaml"]
    for path in kept:
        path.write_text("x")
    os.symlink(tmp_path / "elsewhere", outputs / ".001.npz.abcd1234.tmp")   # a link: left alone
    os.mkfifo(outputs / ".002.npz.abcd1234.tmp")                           # a FIFO: left alone, not opened
    assert ws.remove_stray_temp_files() == [stray]
    assert all(p.exists() for p in kept) and not stray.exists()
    assert (outputs / ".001.npz.abcd1234.tmp").is_symlink()
