"""The detection pipeline end to end, as a new user runs it: `navigator convert` a detector,
`navigator triton WS --preprocess pre.py --postprocess post.py`, the real Triton 2.51 server
(`--cpu-backends`: the detector's ONNX step runs on navigator's CPU stand-in of the
onnxruntime backend, a test double; the pre/post steps in Triton's real Python backend),
then `navigator profile WS --triton` on the ensemble.

The model (tests/models.py ``tiny_detector``) is ~10x slower per image than the letterbox
preprocess, so while it runs, concurrent requests queue in front of it and the dynamic
batcher of the *default* config forms batches: the test reads that from the server's own
statistics (``/v2/models/<m>/stats`` batch counts), never from timing, with a sequential
negative control that must show batches of 1 only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..conftest import models, one_line_error

pytestmark = pytest.mark.functional

MODEL = "tiny_detector"
STEPS = [f"{MODEL}_preprocess", f"{MODEL}_onnx", f"{MODEL}_postprocess"]
OUTPUTS = ("detections", "confidences", "count")


def _run(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "navigator", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The detector converted (onnx, not profiled) and its ensemble written into WS/triton."""
    root = tmp_path_factory.mktemp("detection")
    model = models.save(models.tiny_detector(), root / "tiny_detector.onnx")
    (root / "pre.py").write_text(models.DETECT_PRE)
    (root / "post.py").write_text(models.DETECT_POST)
    r = _run("convert", model, "--workdir", root / "wd", "--targets", "onnx", "--no-profile", "--device", "cpu",
             cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    ws = next((root / "wd").glob("*.nav.workspace"))
    r = _run("triton", ws, "--preprocess", root / "pre.py", "--postprocess", root / "post.py", cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in (ws / "triton").iterdir()) == sorted([MODEL] + STEPS)
    return ws


def _plain_pipeline(ws: Path, image: np.ndarray) -> dict:
    """The same three steps without Triton: preprocess, onnxruntime, postprocess."""
    import onnxruntime as ort

    pre, post = {}, {}
    exec(models.DETECT_PRE, pre)
    exec(models.DETECT_POST, post)
    session = ort.InferenceSession(str(ws / "formats" / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    p = pre["preprocess"](image=image)
    boxes, scores = session.run(["boxes", "scores"], {"images": p["images"]})
    return post["postprocess"](boxes=boxes, scores=scores, scale=p["scale"], pad=p["pad"])


def _infer(url: str, image: np.ndarray) -> dict:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("image", list(image.shape), "UINT8")
        tensor.set_data_from_numpy(image)
        result = client.infer(MODEL, [tensor])
        return {o: result.as_numpy(o) for o in OUTPUTS}
    finally:
        client.close()


def _batches(url: str, model: str) -> dict[int, int]:
    from navigator.serving.ensemble import batch_counts, stats

    return batch_counts(stats(url, [model])[model])


def _same(served: dict, plain: dict) -> bool:
    """Triton's answer equals the plain pipeline's; a per-image scalar comes back as [batch, 1]
    (dims [1] + reshape [] on the step: Triton reports the config's dims)."""
    plain = dict(plain, count=plain["count"][:, None])
    return all(served[k].shape == plain[k].shape and np.allclose(served[k], plain[k], rtol=1e-4, atol=1e-3)
               for k in OUTPUTS)


def test_served_by_triton_it_batches_and_equals_the_plain_pipeline(workspace, tmp_path):
    from navigator.triton.server import TritonServer, prepare

    prepare(quiet=True)
    rng = np.random.default_rng(11)
    images = [rng.integers(0, 256, size=(1, 90 + 6 * i, 140 - 4 * i, 3), dtype=np.uint8) for i in range(16)]
    expected = [_plain_pipeline(workspace, im) for im in images]
    log = tmp_path / "tritonserver.log"
    with TritonServer(workspace / "triton", cpu_backends=True, log_path=log) as server:
        assert sorted(server.loaded) == sorted([MODEL] + STEPS)
        # negative control: one request at a time can only run batches of 1
        for im in images[:2]:
            _infer(server.http_url, im)
        sequential = _batches(server.http_url, f"{MODEL}_onnx")
        assert set(sequential) == {1}, sequential
        # 16 requests, 8 in flight: the default config's dynamic batcher forms batches
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda im: _infer(server.http_url, im), images))
        batches = _batches(server.http_url, f"{MODEL}_onnx")
        metadata = json.loads(urllib.request.urlopen(f"http://{server.http_url}/v2/models/{MODEL}").read())
    grown = {size: count - sequential.get(size, 0) for size, count in batches.items()}
    assert any(size > 1 and count > 0 for size, count in grown.items()), batches
    assert sum(size * count for size, count in grown.items()) == len(images)     # every request, once
    for out, want, image in zip(got, expected, images):
        assert _same(out, want), image.shape                 # boxes in the original image's pixels
        assert out["count"].shape == (1, 1) and out["count"].dtype == np.int32   # [B] as dims [1] + reshape []
    assert not _same(got[0], expected[1])                     # negative control: another image differs
    shapes = {o["name"]: o["shape"] for o in metadata["outputs"]}
    assert shapes == {"detections": [-1, 20, 4], "confidences": [-1, 20], "count": [-1, 1]}
    assert [i["shape"] for i in metadata["inputs"]] == [[-1, -1, -1, 3]]
    text = log.read_text()
    for step in STEPS:      # loaded once each: no __pycache__ made the ensemble's load reload them
        assert text.count(f"successfully loaded '{step}'") == 1, step
    assert not list((workspace / "triton").rglob("__pycache__"))


def _status(ws: Path) -> dict:
    from navigator.workspace import schema

    data = yaml.safe_load((ws / "status.yaml").read_text())
    schema.validate(data)
    return data["serving"]


def _configs(repo: Path) -> dict:
    from navigator.triton import config as cfg_mod

    return {n: cfg_mod.parse((repo / n / "config.pbtxt").read_text()) for n in [MODEL] + STEPS}


SMALL = ["--cpu-backends", "--perf-analyzer", "off", "--measurement-ms", "200", "--concurrency", "1:4"]


def test_profile_measures_the_ensemble_and_applies_to_the_busiest_step(workspace):
    from navigator.triton import ensemble_rules

    r = _run("profile", workspace, "--triton", *SMALL, "--instance-counts", "1,2", "--budget-s", "12", "--apply",
             cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = _status(workspace)
    ens = sv["ensemble"]
    assert sv["model"] == MODEL and sv["key"] == "onnx" and sv["stand_in"] is True
    assert ens["name"] == MODEL and ens["searched"] in STEPS and "busiest step in a probe" in ens["reason"]
    assert [s["name"] for s in ens["steps"]] == STEPS
    assert all(s["utilization"] is not None and s["compute_ms"] > 0 for s in ens["steps"])
    busiest = max(ens["steps"], key=lambda s: s["utilization"])
    assert ens["searched"] == busiest["name"]
    assert sv["setup_s"] > 0 and sv["configurations"] and sv["chosen"]
    chosen = next(c for c in sv["configurations"] if c["name"] == sv["chosen"])
    configs = _configs(workspace / "triton")
    assert sv["applied"] == str(workspace / "triton" / ens["searched"] / "config.pbtxt")
    assert configs[ens["searched"]].instance_group[0].count == chosen["instances"]
    assert ensemble_rules.check(configs[MODEL], {n: configs[n] for n in STEPS}) == []
    script = (workspace / "serving" / "perf_analyzer.sh").read_text()
    assert f"-m {MODEL}" in script and f"<repository>/{ens['searched']}/config.pbtxt" in script
    summary = (workspace / "report" / "summary.md").read_text()
    assert f"Ensemble **{MODEL}** measured end to end" in summary and f"**{ens['searched']}**" in summary
    entry = json.loads((workspace / "serving" / "perf_input.json").read_text())["data"][0]["image"]
    assert entry["shape"][2] == 3 and len(entry["shape"]) == 3      # raw HWC images, as clients send them


def test_searching_the_model_step_keeps_the_ensembles_batch_size_consistent(workspace):
    before = _configs(workspace / "triton")[MODEL].max_batch_size
    r = _run("profile", workspace, "--triton", *SMALL, "--step", "model", "--instance-counts", "1",
             "--max-batch-sizes", "2", "--budget-s", "6", "--apply", cwd=workspace.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    sv = _status(workspace)
    assert sv["ensemble"]["searched"] == f"{MODEL}_onnx" and sv["ensemble"]["reason"] == "--step model"
    assert sv["chosen"] == "i1_b2_d0"
    configs = _configs(workspace / "triton")
    assert configs[f"{MODEL}_onnx"].max_batch_size == 2
    assert configs[MODEL].max_batch_size == 2                      # at most its step's: Triton's rule
    assert configs[f"{MODEL}_preprocess"].max_batch_size == 64    # the other steps as they were
    assert (f"max_batch_size {before} -> 2" in r.stdout) == (before != 2), r.stdout


@pytest.mark.parametrize("break_it, args, needles", [
    (lambda repo: __import__("shutil").rmtree(repo / f"{MODEL}_postprocess"), [],
     (f"runs {MODEL}_postprocess, which has no config.pbtxt there",)),
    (lambda repo: (repo / MODEL / "config.pbtxt").write_text(re.sub(
        r"max_batch_size: \d+", "max_batch_size: 128", (repo / MODEL / "config.pbtxt").read_text())), [],
     ("breaks Triton's ensemble rules", "exceeds step")),
    (None, ["--step", "postprocess", "--max-batch-sizes", "4"], ("searched by its instance count only",)),
    (None, ["--step", "nope"], ("--step nope", f"{MODEL}_onnx (model)")),
])
def test_a_bad_apply_target_or_step_fails_before_any_measurement(workspace, tmp_path, break_it, args, needles):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(workspace / "triton", repo)
    if break_it is not None:
        break_it(repo)
    marker = workspace / "serving" / "previous-run.txt"
    marker.write_text("kept")
    try:
        r = _run("profile", workspace, "--triton", *SMALL, "--budget-s", "30", "--apply", repo, *args,
                 cwd=workspace.parent)
        one_line_error(r, *needles)
        assert "probe of" not in r.stdout and "[ok]" not in r.stdout     # nothing was measured
        assert marker.read_text() == "kept" and not (workspace / ".serving.partial").exists()
    finally:
        marker.unlink()
