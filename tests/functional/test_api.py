"""The Python API: navigator.convert at the end of a training script."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import navigator
from navigator.errors import UserInputError, VerificationFailed

pytestmark = pytest.mark.functional


def _batches(n=3, batch=4, seq=5, seed=0):
    rng = np.random.default_rng(seed)
    return [{"ids": rng.integers(0, 1000, size=(batch, seq + i), dtype=np.int64)} for i in range(n)]


def test_convert_with_user_samples_and_runner(tmp_path, onnx_model):
    batches = _batches()
    result = navigator.convert(onnx_model(), batches, workdir=tmp_path, targets=["onnx", "onnx-optimized"],
                               max_batch_size=4, profile_budget_s=1)
    assert result.ok, result.failures
    st = result.status
    assert st.samples.source == "iterable" and st.samples.count == 3
    # the profile spans the samples: seq 5..7, batch 1..max(4, 4)
    assert st.shape_profiles == [{"ids": {"min": [1, 5], "opt": [4, 5], "max": [4, 7]}}]
    assert result.best.basis == "profile" and result.best.throughput > 0
    from navigator.workspace import npz

    ref = npz.load(result.workspace / "samples" / "reference" / "001.npz")
    with result.runner("onnx-optimized") as run:
        out = run(batches[1])
    np.testing.assert_allclose(out["logits"], ref["logits"], rtol=1e-4, atol=1e-5)
    loaded = navigator.load(result.workspace)
    assert loaded.best == result.best and loaded.ok


def test_tuple_and_single_array_batches(tmp_path, onnx_model):
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 10, size=(2, 3)) for _ in range(2)]     # int64 on Linux
    r1 = navigator.convert(onnx_model(), arrays, workdir=tmp_path / "a", targets="onnx", no_profile=True)
    r2 = navigator.convert(onnx_model(), [(a,) for a in arrays], workdir=tmp_path / "b", targets="onnx",
                           no_profile=True)
    assert r1.ok and r2.ok
    assert r1.status.samples.sha256 == r2.status.samples.sha256


def test_progress_reaches_the_callback_and_logging_and_nothing_is_printed(tmp_path, onnx_model, capfd, caplog):
    """The API is quiet (nothing on the caller's stdout or stderr, Polygraphy's reports included);
    each step reaches ``on_progress`` and the ``navigator.progress`` logger; a callback that raises
    does not end the run."""
    events = []

    def on_progress(event):
        events.append(event)
        raise RuntimeError("the caller's bug")

    with caplog.at_level("INFO", logger="navigator.progress"):
        result = navigator.convert(onnx_model(), _batches(), workdir=tmp_path, targets=["onnx", "onnx-optimized"],
                                   no_profile=True, progress=False, on_progress=on_progress)
    out, err = capfd.readouterr()
    assert result.ok and out == "" and err == "", (out, err)
    ends = {(e.key, e.stage, e.runner): e.status for e in events if e.phase == "end"}
    assert ends[("onnx-optimized", "verify", "onnxruntime-cpu")] == "ok"
    assert any(e.phase == "start" and e.stage == "verify" for e in events)
    assert any("onnx-optimized verify [onnxruntime-cpu]: ok" in r.getMessage() for r in caplog.records)
    assert any("the progress callback raised RuntimeError" in r.getMessage() for r in caplog.records)


def test_verify_func_hook(tmp_path, onnx_model):
    calls = []

    def reject_when_argmax_differs(reference, output):
        calls.append(1)
        return bool((reference["logits"].argmax(-1) == output["logits"].argmax(-1)).all())

    ok = navigator.convert(onnx_model(), workdir=tmp_path, targets=["onnx"], no_profile=True,
                           verify_func=reject_when_argmax_differs)
    assert ok.ok and len(calls) == ok.status.samples.count == 3    # two samples and the profile's max corner
    bad = navigator.convert(onnx_model(), workdir=tmp_path, targets=["onnx"], no_profile=True,
                            verify_func=lambda ref, out: False)
    rs = bad.status.formats["onnx"].runners["onnxruntime-cpu"]
    assert rs.verify.status == "failed" and "verify_func rejected sample 000" in rs.verify.reason
    assert bad.exit_code == 1
    with pytest.raises(VerificationFailed):
        navigator.convert(onnx_model(), workdir=tmp_path, targets=["onnx"], no_profile=True,
                          verify_func=lambda ref, out: False, raise_on_failure=True)


def test_api_errors_are_typed(tmp_path, onnx_model):
    with pytest.raises(UserInputError, match="unknown option"):
        navigator.convert(onnx_model(), workdir=tmp_path, max_batchsize=3)
    with pytest.raises(UserInputError, match="input names do not match"):
        navigator.convert(onnx_model(), [{"tokens": np.zeros((1, 2), np.int64)}], workdir=tmp_path)
    with pytest.raises(UserInputError, match="no such file"):
        navigator.convert(tmp_path / "missing.onnx", workdir=tmp_path)


def test_import_is_light():
    """`import navigator` loads no framework, not even numpy or onnx."""
    code = ("import sys, navigator; heavy = [m for m in ('numpy', 'onnx', 'onnxruntime', 'torch', 'tensorflow', "
            "'polygraphy', 'yaml', 'rich') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = ("import sys; from navigator.cli.main import build_parser; build_parser(); "
            "print([m for m in ('numpy', 'onnx', 'onnxruntime', 'torch', 'polygraphy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
