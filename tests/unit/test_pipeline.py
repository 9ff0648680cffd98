"""The pipeline's decisions, without running a model: best selection, the exit code and
its reasons, targets per source, and what a re-run may reuse."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from navigator.config import NavigatorConfig
from navigator.converters.planner import PlannedFormat
from navigator.execution.jobs import ProfileSpec, RunnerTask, Task, VerifySpec
from navigator.pipeline import outcome_code, select_best
from navigator.pipeline.context import RunContext
from navigator.pipeline.plan import requested_targets
from navigator.pipeline.resume import reuse, step_hash
from navigator.types import ModelSignature, TensorSpec
from navigator.workspace.layout import Workspace
from navigator.workspace.status import (ConvertStep, FormatStatus, ModelInfo, ProfileResult, ProfileStep,
                                        RunnerStatus, SamplesInfo, Status, VerifyStep)


def _runner(verify="ok", results=(), runner="onnxruntime", device="cpu") -> RunnerStatus:
    return RunnerStatus(runner=runner, device=device, verify=VerifyStep(status=verify),
                        profile=ProfileStep(status="ok" if results else "skipped",
                                            results=[ProfileResult(b, t) for b, t in results]))


def _status(**fmts) -> Status:
    st = Status(model=ModelInfo(name="m", source_format="onnx"))
    for key, (convert, runners) in fmts.items():
        st.formats[key] = FormatStatus(format=key.split("-")[0], convert=ConvertStep(status=convert),
                                       runners=runners)
    return st


def test_best_is_the_fastest_verified_pair_at_its_peak_batch():
    st = _status(onnx=("ok", {"onnxruntime-cpu": _runner(results=[(1, 100.0), (8, 400.0)])}),
                 openvino=("ok", {"openvino-cpu": _runner(results=[(1, 900.0)], runner="openvino")}),
                 **{"onnx-fp16": ("ok", {"onnxruntime-cpu": _runner("failed", results=[(1, 5000.0)])})})
    best = select_best(st, no_profile=False)
    assert (best.key, best.runner, best.batch_size, best.throughput, best.basis) == \
        ("openvino", "openvino-cpu", 1, 900.0, "profile")
    by_preference = select_best(st, no_profile=True)     # openvino ranks before onnx
    assert (by_preference.key, by_preference.basis, by_preference.throughput) == ("openvino", "preference", None)


def test_no_best_without_a_verified_pair():
    st = _status(onnx=("ok", {"onnxruntime-cpu": _runner("failed")}), openvino=("failed", {}))
    assert select_best(st, no_profile=False) is None


def test_exit_code_names_each_failed_requested_target():
    st = _status(onnx=("ok", {"onnxruntime-cpu": _runner()}),
                 openvino=("failed", {}), tensorrt=("skipped", {}),
                 **{"onnx-fp16": ("ok", {"onnxruntime-cpu": _runner("failed")})})
    st.formats["openvino"].convert.reason = "boom"
    st.formats["onnx-fp16"].runners["onnxruntime-cpu"].verify.reason = "max abs 1 exceeds atol"
    code, failures = outcome_code(st, ["onnx", "openvino", "tensorrt", "onnx-fp16", "absent"])
    assert code == 1
    assert failures == ["openvino: conversion failed: boom",
                        "onnx-fp16 on onnxruntime-cpu: verification failed: max abs 1 exceeds atol"]
    assert outcome_code(st, ["onnx", "tensorrt"]) == (0, [])     # skipped (missing package) is not a failure


def test_each_unverified_target_says_its_cure():
    """The console's line for an inconclusive or failed verdict ends with what to do about it."""
    from navigator.workspace.status import OutputCheck

    st = _status(**{"onnx-fp16": ("ok", {"onnxruntime-cpu": _runner("inconclusive")}),
                    "onnx-int8": ("ok", {"onnxruntime-cpu": _runner("failed")}),
                    "onnx-optimized": ("ok", {"onnxruntime-cpu": _runner("failed")})})
    st.formats["onnx-fp16"].runners["onnxruntime-cpu"].verify.outputs = {
        n: OutputCheck(mode="top1", passed=True, conclusive=False, cure=f"give more samples ({n})")
        for n in ("logits", "probs")}
    st.formats["onnx-int8"].runners["onnxruntime-cpu"].verify.outputs = {
        "logits": OutputCheck(mode="top1", passed=False)}
    st.formats["onnx-optimized"].runners["onnxruntime-cpu"].verify.outputs = {
        "logits": OutputCheck(mode="tolerance", passed=False)}
    _, failures = outcome_code(st, ["onnx-fp16", "onnx-int8", "onnx-optimized"])
    assert failures[0].endswith("; cure: give more samples (logits) (likewise for the other output)")
    assert failures[1].endswith("serve a higher precision, or state the budget your task allows "
                                "(--compare logits:top1=VALUE)")
    assert "; cure: `navigator debug WS onnx-optimized` names the first node" in failures[2]


def test_the_in_process_sweep_stays_inside_the_shape_profiles():
    """Declared max batch 8: the profile never measures 16 or 64 (Triton would serve at most 8)."""
    from navigator.pipeline.tasks import profile_spec

    def ctx(profiles, batch_dim=0, **config):
        cfg = NavigatorConfig(**config).resolved()
        return SimpleNamespace(config=cfg, status=SimpleNamespace(batch_dim=batch_dim, shape_profiles=profiles))

    one = [{"ids": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}, "sr": {"min": [], "opt": [], "max": []}}]
    assert profile_spec(ctx(one)).settings["max_batch_size"] == 8
    two = one + [{"ids": {"min": [1, 4], "opt": [16, 4], "max": [32, 4]}}]
    assert profile_spec(ctx(two)).settings["max_batch_size"] == 32
    assert profile_spec(ctx(one, max_batch_size=4)).settings["max_batch_size"] == 4
    assert profile_spec(ctx(one, batch_dim=None)).settings["max_batch_size"] == 64
    asked = profile_spec(ctx(one, profile_batch_sizes=(1, 8, 64))).settings
    assert asked["batch_sizes"] == [1, 8] and asked["max_batch_size"] == 8


def test_the_table_shows_the_figure_best_uses_and_the_higher_one_measured_alone():
    from navigator.console import summary_rows

    raced = _runner(results=[(4, 28.9), (16, 265.4)])
    raced.profile.results[0].raced = True
    st = _status(onnx=("ok", {"onnxruntime-cpu": raced}), openvino=("ok", {"openvino-cpu": _runner(
        results=[(1, 10.0), (8, 40.0)], runner="openvino")}))
    rows = {r[0]: r[-1] for r in summary_rows(st)}
    assert rows["onnx"] == "28.9/s @ 4 (alone: 265.4/s @ 16)"
    assert rows["openvino"] == "40.0/s @ 8"


def test_default_targets_come_from_the_source_format_record():
    onnx = SimpleNamespace(format="onnx", key="onnx", default_targets=None)
    cfg = NavigatorConfig().resolved()
    targets, _ = requested_targets(cfg, onnx, "cpu")
    assert targets[:2] == ["onnx", "onnx-optimized"]
    torch = SimpleNamespace(format="torch", key="torch", default_targets=None)
    assert "aoti" in requested_targets(cfg, torch, "cuda")[0] and "aoti" not in requested_targets(cfg, torch, "cpu")[0]
    fp16 = NavigatorConfig(targets=("onnx-optimized",), target_precisions=("fp32", "fp16")).resolved()
    assert requested_targets(fp16, onnx, "cpu")[0] == ["onnx", "onnx-optimized", "onnx-optimized-fp16"]


# --------------------------------------------------------------------------- reuse
def _ctx(tmp_path, old: Status | None) -> RunContext:
    ws = Workspace(tmp_path / "m.nav.workspace")
    (ws.format_dir("onnx-optimized")).mkdir(parents=True)
    (ws.format_dir("onnx-optimized") / "model.onnx").write_bytes(b"x")
    st = Status(model=ModelInfo(name="m", source_format="onnx"),
                signature=ModelSignature(inputs=[TensorSpec("x", "float32", [-1, 4])],
                                         outputs=[TensorSpec("y", "float32", [-1, 4])]),
                samples=SamplesInfo(count=2, sha256="s"))
    st.formats["onnx-optimized"] = FormatStatus(format="onnx", path="formats/onnx-optimized/model.onnx",
                                                convert=ConvertStep(inputs_sha256="conv-hash"),
                                                runners={"onnxruntime-cpu": _runner("skipped")})
    reporter = SimpleNamespace(step_end=lambda *a, **k: None)
    return RunContext(config=NavigatorConfig().resolved(), ws=ws, status=st, source=None, device="cpu",
                      reporter=reporter, resume_from=old)


def _task() -> Task:
    return Task(kind="format", key="onnx-optimized", artifact="formats/onnx-optimized/model.onnx",
                io_names={"x": "x", "y": "y"}, runners=[RunnerTask("onnxruntime", "cpu")],
                verify=VerifySpec(rules={"y": {"mode": "tolerance", "atol": 1e-5, "rtol": 1e-4}}),
                profile=ProfileSpec(batch_dim=0, settings={"budget_s": 1.0}))


def _old(verify_hash: str | None, profile_hash: str | None, convert_hash="conv-hash", outputs_sha256=None) -> Status:
    from navigator.workspace import npz

    old = Status(model=ModelInfo(name="m", source_format="onnx"))
    old.samples.reference_sha256 = npz.files_sha256([])   # the stored reference (none here) as it recorded it
    runner = _runner(results=[(1, 10.0)])
    runner.verify.inputs_sha256, runner.profile.inputs_sha256 = verify_hash, profile_hash
    runner.verify.outputs_sha256 = outputs_sha256
    old.formats["onnx-optimized"] = FormatStatus(format="onnx", convert=ConvertStep(status="ok",
                                                                                     inputs_sha256=convert_hash),
                                                 runners={"onnxruntime-cpu": runner})
    return old


ITEM = PlannedFormat(key="onnx-optimized", parent="onnx", converter=None, requested=True)


def _hashes(task: Task) -> tuple[str, str]:
    """The hashes as the version before ProfileSpec.loaded recorded them."""
    v = step_hash("conv-hash", "onnxruntime-cpu", task.verify.to_dict(), task.io_names, "s", None)
    return v, step_hash(v, {k: x for k, x in task.profile.to_dict().items() if k != "loaded"})


def _stored_outputs(ctx) -> str:
    """An output file the last verification stored, and its digest as it recorded it."""
    import numpy as np

    from navigator.workspace import npz

    path = ctx.ws.output_file("onnx-optimized", "onnxruntime-cpu", "000")
    npz.save(path, {"y": np.ones((2, 4), np.float32)})
    return npz.files_sha256([path])


def test_unchanged_steps_are_reused_and_nothing_is_left_to_run(tmp_path):
    verify_hash, profile_hash = _hashes(_task())
    ctx = _ctx(tmp_path, None)
    ctx.resume_from = _old(verify_hash, profile_hash, outputs_sha256=_stored_outputs(ctx))
    assert reuse(ctx, ITEM, _task()) == (None, [])
    rs = ctx.status.formats["onnx-optimized"].runners["onnxruntime-cpu"]
    assert rs.verify.status == "ok" and rs.profile.results[0].throughput == 10.0
    assert ctx.book.step_hashes[("onnx-optimized", "onnxruntime-cpu", "verify")] == verify_hash


def test_the_load_a_screening_adapted_to_is_no_input_of_its_profile(tmp_path):
    """ProfileSpec.loaded (set when the machine was loaded) says how a screening was shaped, not
    what it measured: a workspace of the version before it, or one that hashed ``loaded: null``
    (the version that added it), is resumed without measuring again on a loaded machine."""
    verify_hash, profile_hash = _hashes(_task())
    hashed_null = step_hash(verify_hash, _task().profile.to_dict() | {"loaded": None})
    for i, recorded in enumerate((profile_hash, hashed_null)):
        ctx = _ctx(tmp_path / str(i), None)
        ctx.resume_from = _old(verify_hash, recorded, outputs_sha256=_stored_outputs(ctx))
        task = _task()
        task.profile.loaded = 1.2
        assert reuse(ctx, ITEM, task) == (None, [])


@pytest.mark.parametrize("change", ["tolerance", "profile", "no record"])
def test_a_changed_input_runs_the_step_again(tmp_path, change):
    verify_hash, profile_hash = _hashes(_task())
    old = None if change == "no record" else _old(verify_hash, profile_hash)
    task = _task()
    if change == "tolerance":
        task.verify.rules["y"]["atol"] = 1e-3
    elif change == "profile":
        task.profile.settings["budget_s"] = 5.0
    left, raced = reuse(_ctx(tmp_path, old), ITEM, task)
    assert raced == []
    assert left is not None and [r.key for r in left.runners] == ["onnxruntime-cpu"]


def test_an_edited_output_file_is_verified_again(tmp_path):
    """Resume trusts no stored file blindly: an outputs npz changed since the last run means the
    verdict that judged it no longer describes it."""
    import numpy as np

    from navigator.workspace import npz

    verify_hash, profile_hash = _hashes(_task())
    ctx = _ctx(tmp_path, None)
    ctx.resume_from = _old(verify_hash, profile_hash, outputs_sha256=_stored_outputs(ctx))
    npz.save(ctx.ws.output_file("onnx-optimized", "onnxruntime-cpu", "000"), {"y": np.zeros((2, 4), np.float32)})
    left, _ = reuse(ctx, ITEM, _task())
    assert left is not None and [r.key for r in left.runners] == ["onnxruntime-cpu"]
