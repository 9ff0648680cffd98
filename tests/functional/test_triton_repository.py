"""`navigator triton` on real workspaces (real navigator.convert runs on tests/models.py
models): golden configs for a batching and a non-batching model, every format's
config parsed as ModelConfig and matched with the workspace signature, versions
added without loss, atomic writes, ONNX external data, options through the CLI,
`convert --triton-repo` and `result.to_triton()`.

No Triton server runs here: loading the repository in a real server is the
`navigator serve` issue's test."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

import navigator
from navigator.errors import UserInputError
from navigator.triton import emit, repository
from navigator.workspace import npz
from navigator.workspace import status as status_mod
from navigator.workspace.status import ProfileResult, ProfileStep

from ..conftest import ROOT, models

pytestmark = pytest.mark.functional

GOLDEN = ROOT / "tests" / "golden" / "triton"
FAST = dict(no_profile=True, device="cpu", timeout=120)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NAVIGATOR_UPDATE_GOLDEN") == "1":   # regenerate on purpose, then review the diff
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def _tree(root: Path) -> dict[str, str]:
    """path -> sha256 of every file below root."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _parse(path: Path):
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def _matches_signature(cfg, st, names: dict[str, str], batching: bool) -> None:
    """The config's tensors are the workspace signature's: names (through ``names``), dtypes, dims."""
    assert cfg.max_batch_size > 0 if batching else cfg.max_batch_size == 0
    for specs, tensors in ((st.signature.inputs, cfg.input), (st.signature.outputs, cfg.output)):
        got = {t.name: t for t in tensors}
        assert len(got) == len(specs)
        for spec in specs:
            io = got[names.get(spec.name, spec.name)]
            assert mc.DataType.Name(io.data_type) == {"float32": "TYPE_FP32", "int64": "TYPE_INT64"}[spec.dtype]
            want = spec.shape[1:] if batching else spec.shape
            assert list(io.dims) == [d if d > 0 else -1 for d in want]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    """token_classifier (int64 ids [batch, seq] -> logits, probs): onnx, onnx-optimized, openvino.
    Its outputs judged as plain tensors: on a bf16 CPU, OpenVINO's default (what Triton serves) would
    otherwise be inconclusive at top-1 on 82 rows of random weights, and not served."""
    tmp = tmp_path_factory.mktemp("classifier")
    model = models.save(models.token_classifier(), tmp / "token_classifier.onnx")
    result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx", "onnx-optimized", "openvino"],
                               output_kinds={"logits": "tensor", "probs": "tensor"}, **FAST)
    assert result.ok, result.failures
    return result.workspace


@pytest.fixture(scope="module")
def unbatched(tmp_path_factory) -> Path:
    """foldable_mlp converted with --no-batching: full dims, max_batch_size 0."""
    tmp = tmp_path_factory.mktemp("mlp")
    model = models.save(models.foldable_mlp(), tmp / "foldable_mlp.onnx")
    result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx"], no_batching=True, **FAST)
    assert result.ok, result.failures
    return result.workspace


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> Path:
    """tiny_detector (images [batch, 3, 128, 128] -> boxes, scores), onnx only, not profiled."""
    tmp = tmp_path_factory.mktemp("detector")
    model = models.save(models.tiny_detector(), tmp / "tiny_detector.onnx")
    result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx"], **FAST)
    assert result.ok, result.failures
    return result.workspace


def _reference_blocks(path: Path) -> dict[str, str]:
    """The hand-written reference file: one ModelConfig per ``# ---- model: NAME`` block."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# ---- model: "):
            current = line.split(": ", 1)[1].strip()
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


# --------------------------------------------------------------------------- golden configs
def test_golden_batching_config(classifier, tmp_path):
    result = emit(classifier, {"repo": tmp_path / "repo", "formats": "onnx"})
    model = tmp_path / "repo" / "token_classifier"
    _golden("token_classifier_onnx.pbtxt", (model / "config.pbtxt").read_text())
    assert result.version == 1 and result.served == ["token_classifier"]
    assert (model / "1" / "model.onnx").read_bytes() == (classifier / "formats/onnx/model.onnx").read_bytes()
    # warm-up: one row of the first stored sample, raw bytes, dims without the batch dim
    sample = npz.load(classifier / "samples/inputs/000.npz")["ids"]
    assert (model / "warmup" / "ids").read_bytes() == sample[:1].tobytes()
    cfg = _parse(model / "config.pbtxt")
    assert list(cfg.model_warmup[0].inputs["ids"].dims) == list(sample.shape[1:])
    _matches_signature(cfg, status_mod.load(classifier / "status.yaml"), {}, batching=True)


def test_golden_non_batching_config(unbatched, tmp_path):
    emit(unbatched, {"repo": tmp_path / "repo"})
    cfg_path = tmp_path / "repo" / "foldable_mlp" / "config.pbtxt"
    _golden("foldable_mlp_no_batching.pbtxt", cfg_path.read_text())
    cfg = _parse(cfg_path)
    assert not cfg.HasField("dynamic_batching") and cfg.model_warmup[0].batch_size == 1
    _matches_signature(cfg, status_mod.load(unbatched / "status.yaml"), {}, batching=False)
    with pytest.raises(UserInputError, match="cannot batch"):
        emit(unbatched, {"repo": tmp_path / "other", "max_batch_size": 4})


# --------------------------------------------------------------------------- every format
def test_every_format_natively_and_through_the_python_backend(classifier, tmp_path):
    st = status_mod.load(classifier / "status.yaml")
    native = emit(classifier, {"repo": tmp_path / "repo", "formats": "all"})
    python = emit(classifier, {"repo": tmp_path / "repo", "formats": "all", "python_backend": True,
                               "model_name": "py"})
    assert [m.name for m in native.models] == ["token_classifier_onnx", "token_classifier_onnx_optimized",
                                               "token_classifier_openvino"]
    expected = {"token_classifier_onnx": ("onnxruntime_onnx", "onnxruntime", "model.onnx"),
                "token_classifier_onnx_optimized": ("onnxruntime_onnx", "onnxruntime", "model.onnx"),
                "token_classifier_openvino": ("", "openvino", "model.xml"),
                "py_onnx": ("", "python", "model.py"), "py_onnx_optimized": ("", "python", "model.py"),
                "py_openvino": ("", "python", "model.py")}
    for m in native.models + python.models:
        cfg = _parse(m.path / "config.pbtxt")
        assert (cfg.platform, cfg.backend, cfg.default_model_filename) == expected[m.name]
        assert (m.path / "1" / cfg.default_model_filename).is_file()
        _matches_signature(cfg, st, {}, batching=True)
        kind = cfg.instance_group[0].kind
        assert kind == (mc.ModelInstanceGroup.KIND_CPU if "openvino" in m.name else mc.ModelInstanceGroup.KIND_AUTO)
    assert (tmp_path / "repo/token_classifier_openvino/1/model.bin").is_file()
    assert (tmp_path / "repo/py_openvino/1/model.xml").is_file()
    assert "openvino==" in (tmp_path / "repo/py_openvino/pack_env.sh").read_text()
    assert os.access(tmp_path / "repo/py_openvino/pack_env.sh", os.X_OK)
    # nothing in the repository names a path of this machine
    for path in (tmp_path / "repo").rglob("*"):
        if path.is_file() and path.suffix in ("", ".py", ".pbtxt", ".md", ".sh"):
            text = path.read_bytes().decode("utf-8", "replace")
            assert str(tmp_path) not in text and str(classifier) not in text, path


# --------------------------------------------------------------------------- versions
def test_versions_are_added_without_loss(classifier, unbatched, tmp_path, cli):
    repo = tmp_path / "repo"
    (repo / "someone_elses_model" / "3").mkdir(parents=True)
    (repo / "someone_elses_model" / "config.pbtxt").write_text('name: "someone_elses_model"\n')
    (repo / "notes.txt").write_text("not a model")
    emit(classifier, {"repo": repo, "formats": "onnx"})
    emit(classifier, {"repo": repo, "model_name": "second"})
    before = _tree(repo)
    r = cli("triton", classifier, "--repo", repo, "--formats", "onnx")
    assert r.returncode == 0, r.stderr
    assert "token_classifier/2" in r.stdout
    after = _tree(repo)
    assert {k: v for k, v in after.items() if k in before} == before      # nothing existing changed
    assert sorted(set(after) - set(before)) == ["token_classifier/2/model.onnx"]
    # an existing version is refused, with the next free number in the message; nothing changes
    r = cli("triton", classifier, "--repo", repo, "--formats", "onnx", "--model-version", "1")
    assert r.returncode == 2 and "already has version 1" in r.stderr and "(3)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and _tree(repo) == after
    # the best format (openvino, by preference without profiling) has another backend: refused
    with pytest.raises(UserInputError, match="another interface.*platform 'onnxruntime_onnx' -> ''"):
        emit(classifier, {"repo": repo})
    # --force replaces version 1 only
    emit(classifier, {"repo": repo, "formats": "onnx", "model_version": 1, "force": True, "instances": 2})
    assert _parse(repo / "token_classifier/config.pbtxt").instance_group[0].count == 2
    assert (repo / "token_classifier/2/model.onnx").is_file() and (repo / "token_classifier/1/model.onnx").is_file()
    assert (repo / "notes.txt").read_text() == "not a model"
    assert (repo / "someone_elses_model/3").is_dir()
    # another interface under the same name would break versions 1-2 through the shared config
    snapshot = _tree(repo)
    with pytest.raises(UserInputError, match="another interface"):
        emit(unbatched, {"repo": repo, "model_name": "token_classifier"})
    assert _tree(repo) == snapshot
    assert not [p for p in tmp_path.iterdir() if "navigator-" in p.name]   # no staging folder left behind

def test_golden_detection_ensemble_matches_the_hand_written_reference(detector, tmp_path):
    """The ensemble configs of the detection pipeline equal, message for message, the reference
    a Triton engineer wrote by hand (tests/golden/triton/tiny_detector_ensemble.pbtxt): dims
    derived from several examples ([-1, -1, 3] images, fixed [20, 4] detections), per-image
    scalars as dims [1] + reshape [] on the steps and [1] on the ensemble, the pre -> post edge,
    batching, instance groups and warm-up at batch 1 only."""
    (tmp_path / "pre.py").write_text(models.DETECT_PRE)
    (tmp_path / "post.py").write_text(models.DETECT_POST)
    result = emit(detector, {"repo": tmp_path / "repo", "preprocess": tmp_path / "pre.py",
                             "postprocess": tmp_path / "post.py"})
    reference = _reference_blocks(GOLDEN / "tiny_detector_ensemble.pbtxt")
    assert sorted(m.name for m in result.models) == sorted(reference)
    for name, text in reference.items():
        want = text_format.Parse(text, mc.ModelConfig())
        got = _parse(tmp_path / "repo" / name / "config.pbtxt")
        assert got == want, f"{name}:\n{text_format.MessageToString(got)}"
    assert result.served == ["tiny_detector"]
    assert any("no preferred_batch_size (no in-process profile" in n for n in result.notes), result.notes
    # negative control: the same comparison rejects a config that differs in one reshape
    wrong = text_format.Parse(reference["tiny_detector_postprocess"], mc.ModelConfig())
    wrong.output[2].ClearField("reshape")
    assert wrong != _parse(tmp_path / "repo" / "tiny_detector_postprocess" / "config.pbtxt")



def test_a_failure_midway_writes_nothing(classifier, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    emit(classifier, {"repo": repo, "formats": "onnx"})
    snapshot = _tree(repo)
    real_rename = os.rename
    calls = []

    def failing_rename(a, b):
        calls.append((a, b))
        if len(calls) == 3:          # after two models went in
            raise OSError("disk gone")
        return real_rename(a, b)

    monkeypatch.setattr(repository.os, "rename", failing_rename)
    with pytest.raises(OSError, match="disk gone"):
        emit(classifier, {"repo": repo, "formats": "all"})
    monkeypatch.undo()
    assert _tree(repo) == snapshot                 # the two renames were undone
    assert not [p for p in tmp_path.iterdir() if "navigator-" in p.name]


# --------------------------------------------------------------------------- options
def test_serving_options_through_the_cli(classifier, tmp_path, cli):
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\nd\n")
    repo = tmp_path / "repo"
    r = cli("triton", classifier, "--repo", repo, "--formats", "onnx-optimized", "--model-name", "served",
            "--kind", "cpu", "--instances", "2", "--max-batch-size", "4", "--max-queue-delay-us", "250",
            "--preferred-batch-sizes", "2,4", "--priority-levels", "3", "--queue-policy",
            "timeout_us=1000,max_queue_size=16", "--rate-limit-resource", "R1:2", "--rate-limit-resource",
            "R2:1:global", "--rate-limit-priority", "2", "--response-cache", "--labels", f"probs={labels}",
            "--no-warmup", "--model-version", "7")
    assert r.returncode == 0, r.stderr
    cfg = _parse(repo / "served" / "config.pbtxt")
    assert cfg.max_batch_size == 4 and list(cfg.dynamic_batching.preferred_batch_size) == [2, 4]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 250
    assert cfg.dynamic_batching.priority_levels == 3 and cfg.dynamic_batching.default_priority_level == 3
    assert cfg.dynamic_batching.default_queue_policy.default_timeout_microseconds == 1000
    group = cfg.instance_group[0]
    assert group.kind == mc.ModelInstanceGroup.KIND_CPU and group.count == 2
    assert [(x.name, x.count, getattr(x, "global")) for x in group.rate_limiter.resources] == [("R1", 2, False),
                                                                                              ("R2", 1, True)]
    assert cfg.response_cache.enable and not cfg.model_warmup
    assert cfg.output[1].label_filename == "labels.txt" and (repo / "served" / "labels.txt").is_file()
    assert (repo / "served" / "7" / "model.onnx").is_file()
    # GPU-only options land where ONNX Runtime reads them
    r = cli("triton", classifier, "--repo", repo, "--formats", "onnx", "--kind", "gpu", "--ort-trt-precision", "fp16",
            "--cuda-graphs", "--model-name", "gpu")
    assert r.returncode == 0, r.stderr
    acc = _parse(repo / "gpu" / "config.pbtxt").optimization.execution_accelerators.gpu_execution_accelerator
    assert [(a.name, dict(a.parameters)) for a in acc] == [
        ("tensorrt", {"precision_mode": "FP16", "trt_cuda_graph_enable": "1"})]


@pytest.mark.parametrize("args, message", [
    (["--cuda-graphs", "--kind", "cpu"], "--cuda-graphs needs a GPU"),
    (["--cuda-graphs"], "--cuda-graphs needs GPU instances"),
    (["--formats", "nope"], "no format 'nope'"),
    (["--formats", "openvino", "--kind", "gpu"], "runs on cpu only"),
    (["--formats", "openvino", "--ort-trt-precision", "fp16"], "served by the openvino backend"),
    (["--preferred-batch-sizes", "128"], "exceeds max_batch_size 64"),
    (["--labels", "missing.txt"], "no such file"),
    (["--formats", "all", "--preprocess", "pre.py"], "wrap one format"),
])
def test_bad_serving_input_is_exit_2_with_one_line(classifier, tmp_path, cli, args, message):
    r = cli("triton", classifier, "--repo", tmp_path / "repo", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


@pytest.mark.parametrize("profile, preferred, why", [
    # a real optimum: the peak at 4, the larger size 8 measurably lower
    ([(1, 100, 0.02), (2, 180, 0.02), (4, 300, 0.02), (8, 240, 0.03)], [4], None),
    # a raced figure is the peak: batch 2's screening figure read more, alone and earlier
    ([(1, 100, 0.02), (2, 310, 0.02), (4, 300, 0.02, "raced"), (8, 240, 0.03)], [4], None),
    # the cases that must leave it out (a short profile that only reached batch 1 once gave
    # preferred_batch_size: 1, which ran 16 requests as 16 batches of 1)
    ([(1, 100, 0.02)], [], "measured batch size 1 only"),
    ([(1, 300, 0.02), (2, 200, 0.02), (4, 150, 0.02)], [], "peaks at the smallest size measured"),
    ([(1, 100, 0.02), (2, 180, 0.02), (4, 300, 0.02), (8, 320, 0.02)], [], "still rises at the largest size"),
    ([(1, 100, 0.02), (2, 180, 0.02), (4, 300, 0.02), (8, 290, 0.10)], [], "plateaus from batch 4"),
])
def test_preferred_batch_sizes_only_from_a_real_optimum(classifier, tmp_path, profile, preferred, why):
    """The in-process profile of status.yaml decides (its figures are set here: real ones
    depend on the machine's load); warm-up runs at batch 1 and the preferred size."""
    ws = tmp_path / "ws"
    shutil.copytree(classifier, ws)
    st = status_mod.load(ws / "status.yaml")
    runner = next(iter(st.formats["onnx"].runners.values()))
    runner.profile = ProfileStep(status="ok", stable=True, results=[
        ProfileResult(batch_size=b, throughput=float(t), spread=spread, raced=bool(raced) or None)
        for b, t, spread, *raced in profile])
    status_mod.save(st, ws / "status.yaml")
    result = emit(ws, {"repo": tmp_path / "repo", "formats": "onnx"})
    cfg = _parse(result.models[0].path / "config.pbtxt")
    assert list(cfg.dynamic_batching.preferred_batch_size) == preferred
    assert [w.batch_size for w in cfg.model_warmup] == [1] + preferred
    notes = [n for n in result.notes if "no preferred_batch_size" in n]
    if why is None:
        assert not notes, result.notes
    else:
        assert len(notes) == 1 and why in notes[0], result.notes


def test_convert_writes_the_repository_at_the_end(tmp_path, cli):
    model = models.save(models.topk_model(), tmp_path / "topk.onnx")
    r = cli("convert", model, "--workdir", tmp_path / "wd", "--targets", "onnx", "--no-profile", "--device", "cpu",
            "--triton-repo", tmp_path / "repo")
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = _parse(tmp_path / "repo" / "topk" / "config.pbtxt")
    assert [(o.name, mc.DataType.Name(o.data_type)) for o in cfg.output] == [("values", "TYPE_FP32"),
                                                                             ("indices", "TYPE_INT64")]
    assert "Triton repository" in r.stdout


def test_onnx_external_data_is_laid_out_as_triton_expects(tmp_path):
    import onnxruntime as ort

    src = tmp_path / "src" / "mlp.onnx"
    src.parent.mkdir()
    onnx.save_model(models.foldable_mlp(), str(src), save_as_external_data=True, location="mlp.onnx.data",
                    size_threshold=0)
    result = navigator.convert(src, workdir=tmp_path / "wd", targets=["onnx"], **FAST)
    assert result.ok, result.failures
    native = result.to_triton(tmp_path / "repo")
    folder = native.models[0].path / "1" / "model.onnx"
    assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == ["mlp.onnx.data", "model.onnx"]
    sample = npz.load(result.workspace / "samples/inputs/000.npz")
    ref = npz.load(result.workspace / "samples/reference/000.npz")
    out = ort.InferenceSession(str(folder / "model.onnx")).run(None, sample)[0]
    np.testing.assert_allclose(out, ref["y"], rtol=1e-5, atol=1e-6)
    python = result.to_triton(tmp_path / "repo", python_backend=True, model_name="py", execution_env="env.tar.gz")
    vdir = python.models[0].path / "1"
    assert sorted(p.name for p in vdir.iterdir()) == ["mlp.onnx.data", "model.onnx", "model.py"]
    cfg = _parse(python.models[0].path / "config.pbtxt")
    assert cfg.parameters["EXECUTION_ENV_PATH"].string_value == "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    assert "EXECUTION_ENV_PATH" in (python.models[0].path / "README.md").read_text()


def test_what_a_killed_triton_run_left_is_removed_by_the_next(classifier, tmp_path, cli):
    """A killed `navigator triton` left its model lock file in the repository and its staging folder
    beside it; the next run removes both (a lock nobody holds, a folder of a pid that is gone)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".navigator-token_classifier.lock").write_text("999999999\n")
    stale = tmp_path / ".repo.navigator-999999999-abc"
    (stale / "token_classifier").mkdir(parents=True)
    r = cli("triton", classifier, "--repo", repo, "--formats", "onnx")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in repo.iterdir()) == ["token_classifier"]
    assert not stale.exists()


def test_a_workspace_in_use_is_refused(classifier, tmp_path, cli):
    from navigator.workspace.lock import WorkspaceLock

    with WorkspaceLock(classifier / "navigator.lock"):
        r = cli("triton", classifier, "--repo", tmp_path / "repo")
    assert r.returncode == 2 and "in use by another navigator run" in r.stderr
    assert not (tmp_path / "repo").exists()
