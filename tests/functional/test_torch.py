"""PyTorch sources end to end with real torch (CPU build): export in the calling
process or a worker, TorchScript / torch.export / ONNX / AOTInductor, torch runners."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

from navigator import deps

from ..conftest import ROOT

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not deps.has("torch"), reason="needs torch (extra 'torch'; CI installs 2.13.0 CPU)")]

if deps.has("torch"):
    import torch
    from torch import nn

    Pair = collections.namedtuple("Pair", ["scores", "ids"])

    class DictModel(nn.Module):
        """forward(batch: dict) -> dict with a nested namedtuple: the structure must survive."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = nn.Embedding(50, 8)
            self.proj = nn.Linear(8, 5)

        def forward(self, batch):
            h = self.emb(batch["ids"]) * batch["mask"].unsqueeze(-1)
            logits = self.proj(h.mean(1))
            top = torch.topk(logits, 2, dim=-1)
            return {"logits": logits, "top": Pair(top.values, top.indices)}

    class KwargsModel(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.a = nn.Linear(4, 3)
            self.b = nn.Linear(6, 3)

        def forward(self, left, right):
            return self.a(left) + self.b(right), left.sum(-1)

    class DataDependent(nn.Module):
        """Data-dependent control flow: torch.export cannot capture it, tracing can."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            if x.sum() > 0:
                return self.lin(x)
            return -self.lin(x)

    class BatchSpecialised(nn.Module):
        """Reshapes with a hard-coded batch of 8: a dynamic batch dim cannot be exported."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x).reshape(8, 2)

FAST = dict(profile_budget_s=1, max_batch_size=4, device="cpu")


def _dict_batches(n=2, batch=4, seq=6):
    g = torch.Generator().manual_seed(0)
    return [{"ids": torch.randint(0, 50, (batch, seq + i), generator=g), "mask": torch.ones(batch, seq + i)}
            for i in range(n)]


def test_factory_from_the_cli(cli, tmp_path):
    r = cli("convert", f"{ROOT}/examples/cnn.py:small_cnn", "--shapes", "x:8x3x32x32", "--workdir", tmp_path / "wd",
            "--runners", "torch,torchscript,torch_export,onnxruntime", "--profile-budget-s", "1",
            "--max-batch-size", "4", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    ws = tmp_path / "wd" / "cnn.nav.workspace"
    st = yaml.safe_load((ws / "status.yaml").read_text())
    assert list(st["formats"]) == ["torch", "torchscript", "torch_export", "onnx", "onnx-optimized"]
    for key, fs in st["formats"].items():
        assert fs["convert"]["status"] == "ok", (key, fs["convert"])
        assert fs["isolated"] is True       # a factory is rebuilt in the workers
        for runner in fs["runners"].values():
            assert runner["verify"]["status"] == "ok", (key, runner["verify"])
            assert runner["verify"]["batch_sizes"] == [1, 8]
            assert runner["profile"]["status"] == "ok"
            assert {r["io"] for r in runner["profile"]["results"]} == {"host"}   # CPU: numpy in and out
    assert st["signature"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 32, 32]}]
    assert st["signature"]["outputs"] == [{"name": "output", "dtype": "float32", "shape": [-1, 10]}]
    assert st["formats"]["torchscript"]["io_names"] == {"x": "INPUT__0", "output": "OUTPUT__0"}
    assert st["formats"]["torchscript"]["convert"]["exporter"] == "torch.jit.trace"
    # the trace records cuDNN's allow_tf32 as a constant of each convolution: fp32 means off
    traced = torch.jit.load(str(ws / "formats" / "torchscript" / "model.pt"))
    convs = [n for n in traced.inlined_graph.nodes() if n.kind() == "aten::_convolution"]
    assert convs and all(list(n.inputs())[-1].toIValue() is False for n in convs)
    assert st["formats"]["torch_export"]["convert"]["exporter"] == "torch.export"
    assert st["formats"]["onnx"]["convert"]["exporter"] == "dynamo"
    assert st["formats"]["onnx"]["parent"] == "torch"
    assert json.loads((ws / "formats" / "torch" / "source.json").read_text())["kind"] == "factory"
    # reproduce.sh rebuilds the TorchScript from the factory, in a fresh process
    art = ws / "formats" / "torchscript" / "model.pt"
    art.unlink()
    p = subprocess.run(["bash", str(ws / "formats" / "torchscript" / "reproduce.sh")], capture_output=True, text=True,
                       env={"PATH": f"{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert art.is_file()
    # reproduce.py does the same with plain torch calls, dynamic dims spelled out
    script = ws / "formats" / "torch_export" / "reproduce.py"
    assert "d0_0 = torch.export.Dim('d0_0', min=1, max=8)" in script.read_text()
    (ws / "formats" / "torch_export" / "model.pt2").unlink()
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ws)
    assert p.returncode == 0, p.stderr
    assert torch.export.load(str(ws / "formats" / "torch_export" / "model.pt2")) is not None


def test_factory_with_a_samples_folder_from_the_cli(cli, tmp_path):
    """``file.py:factory --samples DIR``: the inputs' ranks, dtypes and static dims come from the
    folder's batches (they were read as rank 0, refusing every sample)."""
    import numpy as np

    folder = tmp_path / "samples"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, n in enumerate((8, 3)):
        np.savez(folder / f"{i}.npz", x=rng.random((n, 3, 32, 32), dtype=np.float32))
    r = cli("convert", f"{ROOT}/examples/cnn.py:small_cnn", "--samples", folder, "--workdir", tmp_path / "wd",
            "--targets", "onnx", "--no-profile", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "cnn.nav.workspace" / "status.yaml").read_text())
    assert st["signature"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 32, 32]}]
    assert st["samples"]["source"] == "folder"
    assert st["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["status"] == "ok"


def test_dict_inputs_and_structured_outputs_through_the_api(tmp_path):
    import navigator

    model = DictModel().eval()
    result = navigator.convert(model, _dict_batches(), workdir=tmp_path,
                               targets=["torchscript", "torch_export", "onnx"],
                               runners=["torch", "torchscript", "torch_export", "onnxruntime"],
                               **FAST)
    assert result.ok, result.failures
    st = result.status
    assert st.signature.input_names == ["ids", "mask"]
    assert st.signature.output_names == ["logits", "top.scores", "top.ids"]
    assert [t.dtype for t in st.signature.outputs] == ["float32", "float32", "int64"]
    assert st.signature.inputs[0].shape == [-1, -1]          # seq varies across the samples
    for key in ("torch", "torchscript", "torch_export", "onnx"):
        fs = st.formats[key]
        assert fs.verified, (key, fs)
        checks = next(iter(fs.runners.values())).verify.outputs
        assert checks["top.ids"].mode == "exact"
    assert st.formats["torch"].isolated is False and st.formats["torchscript"].isolated is False
    assert st.formats["onnx-optimized"].verified if "onnx-optimized" in st.formats else True
    # results come back in the module's own structure
    batch = _dict_batches(1)[0]
    with result.runner("torchscript") as run:
        flat = run({k: v.numpy() for k, v in batch.items()})
    nested = result.unflatten(flat)
    expected = model(batch)
    assert set(nested) == {"logits", "top"} and isinstance(nested["top"], Pair)
    np.testing.assert_allclose(nested["logits"], expected["logits"].detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(nested["top"].ids, expected["top"].ids.numpy())


def test_kwargs_inputs_and_tuple_outputs(tmp_path):
    import navigator

    g = torch.Generator().manual_seed(0)
    batches = [{"right": torch.rand(3, 6, generator=g), "left": torch.rand(3, 4, generator=g)} for _ in range(2)]
    result = navigator.convert(KwargsModel(), batches, workdir=tmp_path, targets=["torchscript", "onnx"],
                               no_profile=True, device="cpu")
    assert result.ok, result.failures
    assert result.status.signature.input_names == ["left", "right"]      # forward's order
    assert result.status.signature.output_names == ["output_0", "output_1"]


def test_export_failure_leaves_the_other_formats(tmp_path):
    import navigator

    x = [torch.rand(4, 4) for _ in range(2)]
    result = navigator.convert(DataDependent(), x, workdir=tmp_path, targets=["torchscript", "torch_export", "onnx"],
                               no_profile=True, device="cpu", runners=["torch", "torchscript", "onnxruntime"])
    formats = result.status.formats
    assert formats["torch_export"].convert.status == "failed"
    assert "data-dependent" in formats["torch_export"].convert.reason.lower() or \
        "guard" in formats["torch_export"].convert.reason.lower()
    assert formats["torchscript"].verified
    assert formats["onnx"].verified and formats["onnx"].convert.exporter == "legacy"
    assert "dynamo failed" in formats["onnx"].convert.reason
    assert result.exit_code == 1 and any("torch_export" in f for f in result.failures)


def test_static_shape_fallback_is_recorded(tmp_path):
    import navigator

    x = [torch.rand(8, 4) for _ in range(2)]
    result = navigator.convert(BatchSpecialised(), x, workdir=tmp_path, targets=["torch_export"], device="cpu",
                               runners=["torch_export"], profile_budget_s=1, max_batch_size=16)
    fs = result.status.formats["torch_export"]
    assert result.ok, result.failures
    assert fs.convert.exporter == "torch.export (static shapes)"
    assert fs.convert.reason.startswith("dynamic shapes failed")
    rs = fs.runners["torch_export-cpu"]
    assert rs.verify.batch_sizes == [8] and rs.verify.status == "ok"
    assert [r.batch_size for r in rs.profile.results] == [8]


def test_torch_source_needs_samples_or_shapes(cli, tmp_path):
    r = cli("convert", f"{ROOT}/examples/cnn.py:small_cnn", "--workdir", tmp_path / "wd")
    assert r.returncode == 2 and "needs samples or --shapes" in r.stderr
    r = cli("convert", f"{ROOT}/examples/cnn.py:no_such_factory", "--shapes", "x:1x3x8x8")
    assert r.returncode == 2 and "has no 'no_such_factory'" in r.stderr and "small_cnn" in r.stderr


@pytest.mark.slow
def test_aoti_and_torch_compile_on_cpu(cli, tmp_path):
    """AOTInductor only on request on CPU, here with frozen weights (the CUDA default: batch norms
    folded into the convolutions); torch.compile's compile time is kept apart (load_s)."""
    config = tmp_path / "nav.yaml"
    config.write_text("converter_params: {torch_export_to_aoti: {freezing: true}}\n")
    r = cli("convert", f"{ROOT}/examples/cnn.py:small_cnn", "--shapes", "x:4x3x16x16", "--workdir", tmp_path / "wd",
            "--targets", "torch,aoti", "--runners", "torch_compile,aoti", "--profile-budget-s", "1",
            "--max-batch-size", "2", "--device", "cpu", "--config-path", config, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "cnn.nav.workspace" / "status.yaml").read_text())
    aoti = st["formats"]["aoti"]
    assert aoti["parent"] == "torch_export" and aoti["convert"]["exporter"] == "aoti (cpu)"
    assert aoti["runners"]["aoti-cpu"]["verify"]["status"] == "ok"
    compiled = st["formats"]["torch"]["runners"]["torch_compile-cpu"]
    assert compiled["verify"]["status"] == "ok" and compiled["verify"]["load_s"] > 0
    assert compiled["profile"]["status"] == "ok"
    # compiled once per run: its verification compiled the graphs (or read them from the machine's seed,
    # where an earlier test put them), the race read them back from the run's cache
    ws = tmp_path / "wd" / "cnn.nav.workspace"
    verify_log = (ws / compiled["verify"]["log"]).read_text()
    found = re.search(r"torch_compile: inductor graph cache (\d+) hit, (\d+) miss", verify_log)
    assert found and int(found[1]) + int(found[2]) > 0, verify_log[-2000:]
    race = [line for line in (ws / "jobs" / "race.log").read_text().splitlines()
            if "on torch_compile-cpu loaded in" in line]
    assert race and all(re.search(r"\(inductor graph cache: [1-9]\d* hit, 0 miss\)", line) for line in race), race


@pytest.mark.parametrize("kind, suffix", [("torchscript", ".pt"), ("torchscript", ".jit"), ("torch_export", ".pt2")])
def test_model_files_as_sources(tmp_path, kind, suffix):
    """A TorchScript file (.pt, or .jit as some projects name it) and an ExportedProgram (.pt2)."""
    import warnings

    import navigator

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from cnn import small_cnn
    finally:
        sys.path.remove(str(ROOT / "examples"))
    x = torch.rand(4, 3, 16, 16)
    path = tmp_path / f"cnn{suffix}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "torchscript":
            torch.jit.trace(small_cnn(), (x,)).save(str(path))
        else:
            dim = torch.export.Dim("batch", min=1, max=64)
            torch.export.save(torch.export.export(small_cnn(), (x,), dynamic_shapes=({0: dim},)), str(path))
    result = navigator.convert(path, workdir=tmp_path / "wd", shapes="x:4x3x16x16", no_profile=True, device="cpu",
                               runners=["torch", "torchscript", "torch_export", "onnxruntime"])
    assert result.ok, result.failures
    formats = result.status.formats
    expected = {"torchscript": ["torch", "onnx", "onnx-optimized"],
                "torch_export": ["torch", "torchscript", "torch_export", "onnx", "onnx-optimized"]}[kind]
    assert list(formats) == expected
    assert formats["torch"].convert.exporter == kind
    assert formats["onnx"].convert.exporter == ("legacy" if kind == "torchscript" else "dynamo")
    assert all(fs.verified for fs in formats.values())
    assert (result.workspace / "formats" / "torch" / ("model.pt" if kind == "torchscript" else "model.pt2")).is_file()


def _small_cnn():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from cnn import small_cnn
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return small_cnn()


def test_a_live_modules_onnx_is_made_from_its_exported_program_in_a_worker(tmp_path):
    """Formats in parallel with torch_export in the run: the ONNX graph is translated from the saved
    ExportedProgram in a worker (torch_export_to_onnx), not exported a third time in the calling
    process -- isolated, its reason says so, its dims keep the run's names, reproduce.sh rebuilds it
    from the .pt2 alone, and it is verified like the rest. With --jobs 1 the module's own export."""
    import onnx

    import navigator

    x = [torch.rand(4, 3, 16, 16) for _ in range(2)]
    run = dict(targets=["torch_export", "onnx"], no_profile=True, device="cpu",
               runners=["torch", "torch_export", "onnxruntime"])
    result = navigator.convert(_small_cnn(), x, workdir=tmp_path / "par", jobs=2, **run)
    assert result.ok, result.failures
    fs = result.status.formats["onnx"]
    assert fs.isolated is True and fs.parent == "torch"
    assert fs.convert.exporter == "dynamo (from the ExportedProgram)"
    assert fs.convert.reason == "converted from torch_export in a worker"
    assert fs.runners["onnxruntime-cpu"].verify.status == "ok"
    ws = result.workspace
    art = ws / "formats" / "onnx" / "model.onnx"
    dims = [d.dim_param or d.dim_value for d in onnx.load(str(art)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["d0_0", 3, 16, 16]
    script = (ws / "formats" / "onnx" / "reproduce.sh").read_text()
    assert "navigator.converters.torch_export_to_onnx" in script and "formats/torch_export/model.pt2" in script
    art.unlink()
    p = subprocess.run(["bash", str(ws / "formats" / "onnx" / "reproduce.sh")], capture_output=True, text=True,
                       env={"PATH": f"{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert art.is_file()
    seq = navigator.convert(_small_cnn(), x, workdir=tmp_path / "seq", jobs=1, **run).status.formats["onnx"]
    assert seq.isolated is False and seq.convert.exporter == "dynamo" and seq.convert.reason is None
    # what the ONNX was made from is in its hash: the program and the route's edge, not the module's export
    assert fs.convert.inputs_sha256 != seq.convert.inputs_sha256


def test_a_failed_conversion_from_the_exported_program_falls_back_to_the_module(tmp_path):
    """The worker of the route dies (SIGSEGV, as a native crash in the exporter would: a registered
    edge for torch_export -> onnx that crashes wins over the built-in one): the module is exported in
    the calling process as usual, and the record keeps why the route failed."""
    import navigator

    from . import plugin_converters as plugins

    x = [torch.rand(4, 3, 16, 16) for _ in range(2)]
    with plugins.registered(plugins.ProgramToOnnxCrash):
        result = navigator.convert(_small_cnn(), x, workdir=tmp_path, jobs=2, targets=["torch_export", "onnx"],
                                   no_profile=True, device="cpu", runners=["torch", "torch_export", "onnxruntime"])
    assert result.ok, result.failures
    fs = result.status.formats["onnx"]
    assert fs.isolated is False and fs.convert.status == "ok" and fs.convert.exporter == "dynamo"
    assert fs.convert.reason.startswith("from torch_export in a worker: failed: ") and "SIGSEGV" in fs.convert.reason
    assert fs.runners["onnxruntime-cpu"].verify.status == "ok"
    assert "navigator.converters.torch_to_onnx" in (result.workspace / "formats" / "onnx" / "reproduce.sh").read_text()


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_live_module_is_measured_on_the_calling_thread(tmp_path, jobs):
    """A live module's profile runs on the thread that called navigator.convert, once the thread
    that verified it ended: measured from a second thread, or beside one whose OpenMP team is
    alive, torch ran at about half speed (GNU OpenMP stops busy-waiting when it manages more
    threads than there are cores). Sequential (jobs=1) and parallel (jobs=2) scheduling."""
    import threading

    import navigator

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(4, 2)
            self.calls = []

        def forward(self, x):
            if not torch.jit.is_tracing():
                alive = sorted(t.name for t in threading.enumerate() if t.name.startswith("navigator-job"))
                self.calls.append((threading.get_ident(), int(x.shape[0]), alive))
            return self.lin(x)

    model = Spy()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(2)]
    result = navigator.convert(model, samples, workdir=tmp_path / "wd", targets=["torchscript", "onnx"],
                               runners=["torch", "torchscript", "onnxruntime"], jobs=jobs, max_batch_size=64,
                               profile_budget_s=2, progress=False)
    rs = result.status.formats["torch"].runners["torch-cpu"]
    assert rs.verify.status == "ok" and rs.profile.status == "ok" and rs.profile.results, (rs.verify, rs.profile)
    here = threading.get_ident()
    assert any(c[0] != here and c[2] for c in model.calls)   # verified in the job's thread
    # sizes the verification never runs (its batch sizes: the samples' 3, 1 and 16): the profile's sweep,
    # and the preparation before any job (its 4s); however far the sweep got in its budget on a busy machine
    measured = [c for c in model.calls if c[1] not in set(rs.verify.batch_sizes) | {3}]
    assert measured and all(c[0] == here and not c[2] for c in measured), measured[:3]
    # its screened runner joins the race as a peer (its windows, if a contender, measured here too)
    job = json.loads((result.workspace / "jobs" / "race.json").read_text())
    assert [(p["key"], p["runner"]) for p in job["race_peers"]] == [("torch", "torch-cpu")]
    assert job["race_peers"][0]["profile"]["results"] and job["race_peers"][0]["profile"]["phase"] == "screening"


def test_a_live_profile_on_the_calling_thread_keeps_the_timeout(tmp_path):
    """--timeout bounds a live module's profile measured on the calling thread as it bounded one
    in the job's thread: a model that turns slow at batch 64 on the calling thread (only the sweep runs it there) fails
    that profile with the reason, the run goes on and ends."""
    import threading
    import time

    import navigator

    class SlowAtSixtyFour(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            if x.shape[0] == 64 and not torch.jit.is_tracing() \
                    and threading.current_thread() is threading.main_thread():
                for _ in range(200):    # Python bytecode: a StageTimeout can land between the sleeps
                    time.sleep(0.05)
            return self.lin(x)

    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(2)]
    start = time.monotonic()
    result = navigator.convert(SlowAtSixtyFour(), samples, workdir=tmp_path / "wd", targets=["torchscript"],
                               runners=["torch", "torchscript"], jobs=1, max_batch_size=64, timeout=6,
                               profile_budget_s=30, progress=False)
    rs = result.status.formats["torch"].runners["torch-cpu"]
    assert rs.verify.status == "ok"
    assert rs.profile.status == "failed"
    assert rs.profile.reason.startswith("timed out after 6 s in profile (--timeout) in the calling process")
    assert result.status.formats["torchscript"].runners["torchscript-cpu"].profile.status == "ok"
    assert time.monotonic() - start < 60


@pytest.mark.skipif(not deps.has("torch") or not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_runners_profile_on_the_device_channels_last(tmp_path):
    """On CUDA a CNN runs channels-last and is profiled with device-resident tensors."""
    import navigator
    from navigator import runners

    result = navigator.convert(f"{ROOT}/examples/cnn.py:small_cnn", shapes="x:8x3x32x32", workdir=tmp_path / "wd",
                               targets=["torch", "torch_export"], runners=["torch", "torch_export"],
                               profile_budget_s=1, max_batch_size=4, device="cuda")
    for key in ("torch", "torch_export"):
        rs = next(iter(result.status.formats[key].runners.values()))
        assert rs.verify.status == "ok", rs.verify.reason
        assert {r.io for r in rs.profile.results} == {"device"}
    runner = runners.create(runners.RunnerSpec(runner="torch", device="cuda", provider=None),
                            result.workspace / "formats" / "torch" / "source.json", inputs=["x"], outputs=["output"])
    with runner:
        assert runner._channels_last
        convs = [p for p in runner.fn.parameters() if p.dim() == 4]
        assert convs and all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)



def test_the_eager_runner_of_a_reduced_precision_variant_runs_its_dtype(cli, tmp_path):
    """torch-fp16 / torch-bf16 record their dtype in their own source.json (the converter), and the
    eager runner casts the workspace's module to it: before, it read the source's record and ran
    fp32 (with TF32 on CUDA) under the fp16 key, 3,290 img/s where fp16 runs 13,000+."""
    import types

    import torch

    from navigator import runners
    from navigator.converters.torch_precision import torch_to_torch_bf16

    r = cli("convert", f"{ROOT}/examples/cnn.py:small_cnn", "--shapes", "x:2x3x8x8", "--workdir", tmp_path / "wd",
            "--targets", "torch", "--runners", "torch", "--no-profile", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    ws = tmp_path / "wd" / "cnn.nav.workspace"
    out = ws / "formats" / "torch-bf16" / "source.json"
    out.parent.mkdir()
    torch_to_torch_bf16().convert(types.SimpleNamespace(source=ws / "formats" / "torch" / "source.json", output=out))
    for path, dtype in ((ws / "formats" / "torch" / "source.json", torch.float32), (out, torch.bfloat16)):
        with runners.create(runners.RunnerSpec("torch", "cpu"), path, inputs=["x"], outputs=["output"]) as runner:
            assert next(runner.fn.parameters()).dtype == dtype, path


LIVE_ONNX = """
import sys
import torch
import navigator

# Tanh, not ReLU: a ReLU zeroed every output of some random draws, and the check was then inconclusive
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
r = navigator.convert(model, torch.rand(2, 4), workdir=sys.argv[1], targets=["onnx"], jobs=1, no_profile=True,
                      device="cpu", progress=False)
print("ok", r.ok)
"""


def test_a_live_modules_exports_keep_the_libraries_logs_off_the_callers_terminal(tmp_path):
    """With --jobs 1 a live module's ONNX export runs in the calling process: torch's exporter logs
    through a stderr handler of its own ("W1127 … torchvision is not installed"); those records go to
    navigator.log, as a worker's would go to its log."""
    import re

    script = tmp_path / "live.py"
    script.write_text(LIVE_ONNX)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "wd")], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0 and "ok True" in r.stdout, r.stdout + r.stderr
    assert not re.search(r"^[IWE]\d{4} \d\d:\d\d", r.stderr, flags=re.M), r.stderr
