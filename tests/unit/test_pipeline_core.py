"""The pipeline core's small decisions, without a run: how a disk-full failure stops a run, what a
skipped step says, which formats a key is made from, what reproduce.sh does for each source kind,
and how a model path or object is told apart before it is opened."""

from __future__ import annotations

import types

import pytest

from navigator import sources
from navigator.pipeline import diskfull, events, execute, reproduce
from navigator.sources.onnx import OnnxSource
from navigator.sources.torch import TorchSource
from navigator.workspace.status import ConvertStep, FormatStatus, ProfileStep, RunnerStatus, VerifyStep


def _status(**formats: FormatStatus):
    return types.SimpleNamespace(formats=formats)


def test_a_disk_full_step_stops_the_run_and_names_the_step(tmp_path):
    ok = FormatStatus(format="onnx", convert=ConvertStep(status="ok"),
                      runners={"onnxruntime-cpu": RunnerStatus("onnxruntime", "cpu", verify=VerifyStep(status="ok"))})
    full = FormatStatus(format="openvino", convert=ConvertStep(status="ok"), runners={
        "openvino-cpu": RunnerStatus("openvino", "cpu", verify=VerifyStep(
            status="failed", reason="OSError: [Errno 28] No space left on device | log tail: x"))})
    ctx = types.SimpleNamespace(status=_status(onnx=ok, openvino=full),
                                ws=types.SimpleNamespace(root=tmp_path, status_path=tmp_path / "status.yaml"))
    task = types.SimpleNamespace
    diskfull.check_disk_full(ctx, [task(key="onnx")])           # nothing full: nothing raised
    with pytest.raises(diskfull.WorkspaceFull, match="openvino verify on openvino-cpu: OSError: .Errno 28. No space"):
        diskfull.check_disk_full(ctx, [task(key="onnx"), task(key="openvino"), task(key="missing")])
    assert not diskfull.says_disk_full(None) and not diskfull.says_disk_full("shape mismatch")


def test_every_skipped_step_says_why():
    fs = FormatStatus(format="onnx", runners={
        "a": RunnerStatus("onnxruntime", "cpu", verify=VerifyStep(status="inconclusive")),
        "b": RunnerStatus("onnxruntime", "cpu", verify=VerifyStep(status="skipped", reason="pending")),
        "c": RunnerStatus("onnxruntime", "cpu", verify=VerifyStep(status="ok"),
                          profile=ProfileStep(status="skipped", reason="")),
    })
    events.explain_skips(fs, types.SimpleNamespace(no_profile=False))
    assert fs.runners["a"].profile.reason.startswith("verification inconclusive")
    assert fs.runners["b"].verify.reason == "not run" and fs.runners["b"].profile.reason == "verification did not pass"
    assert fs.runners["c"].profile.reason == "not run"
    events.skip_runners(fs, "no runner here")
    assert {(rs.verify.reason, rs.profile.status) for rs in fs.runners.values()} == {("no runner here", "skipped")}
    assert events.with_tail("failed", "") == "failed"
    assert events.with_tail("failed", "a\n\nb\nc\nd\n") == "failed | log tail: b / c / d"


def test_a_key_is_made_from_its_parents_and_a_loop_ends():
    item = types.SimpleNamespace
    planned = [item(key="torch", parent=None), item(key="torch_export", parent="torch"),
               item(key="onnx", parent="torch_export"), item(key="x", parent="y"), item(key="y", parent="x")]
    assert execute._chain(planned, "onnx") == {"onnx", "torch_export", "torch"}
    assert execute._chain(planned, "x") == {"x", "y"}


def _ctx(source, given):
    return types.SimpleNamespace(source=source, status=types.SimpleNamespace(model=types.SimpleNamespace(path=given)))


def test_reproduce_brings_the_source_back_as_its_kind_says(tmp_path):
    fs = FormatStatus(format="onnx", path="formats/onnx/model.onnx")
    onnx = OnnxSource(format="onnx", key="onnx", name="m", path=tmp_path / "m.onnx")
    assert reproduce._source_lines(_ctx(onnx, str(tmp_path / "m.onnx")), "onnx", fs)[1] == \
        f"cp {tmp_path / 'm.onnx'} formats/onnx/model.onnx"
    assert reproduce._source_lines(_ctx(onnx, None), "onnx", fs)[-1] == "exit 1"   # a live object: nothing on disk
    torch_fs = FormatStatus(format="torch", path="formats/torch/source.json")
    live = TorchSource(format="torch", key="torch", name="m", obj=object())
    lines = reproduce._source_lines(_ctx(live, None), "torch", torch_fs)
    assert "a live nn.Module" in lines[0] and lines[1] == "cat formats/torch/source.json"
    assert "rebuilt from f.py:make" in reproduce._source_lines(_ctx(live, "f.py:make"), "torch", torch_fs)[0]


def test_a_prepared_torch_source_comes_back_from_its_facts():
    from navigator.sources.torch_support import TorchIO

    source = TorchSource(format="torch", key="torch", name="m", factory="f.py:make", notes=["n"],
                         io=TorchIO(call="positional", inputs=["x"], outputs=["y"]), generated_float=["x"],
                         reference_digest="d", state_sha256="s", default_targets=("onnx",))
    back = TorchSource.from_facts(source.worker_facts(), signature=None)
    assert back.worker_facts() == source.worker_facts()
    assert back.obj is None and back.isolated and back.live_callable() is None


def test_a_model_is_told_apart_before_it_is_opened(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "m.pt2").write_bytes(b"")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert"}')
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")             # not a transformers config
    assert sources.path_kind(tmp_path / "m.onnx") == "onnx"
    assert sources.path_kind(tmp_path / "m.pt2") == "torch_export"
    assert sources.path_kind(tmp_path / "gone.pt2") is None   # a torch file is told only when it is one
    assert sources.path_kind(saved) == "savedmodel" and sources.path_kind(hf) == "huggingface"
    assert sources.path_kind(plain) is None
    assert sources.source_format(str(hf)) == "torch" and sources.source_format("f.py:make") == "torch"
    assert sources.source_format(tmp_path / "m.onnx") == "onnx" and sources.source_format(object()) is None
    assert sources.is_hf(str(hf)) and not sources.is_hf(str(plain)) and not sources.is_hf("f.py:make")
