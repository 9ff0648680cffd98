"""The files of a serving profile, from synthetic inputs: config.pbtxt variants and
--apply, the Model Analyzer / perf_analyzer hand-off, Perf Analyzer's CSV, the
report (Markdown and self-contained HTML) and the PNG plots (real matplotlib)."""

from __future__ import annotations

import base64

import pytest
import yaml

from navigator.errors import UserInputError
from navigator.serving import handoff, perf_analyzer, plots, variants
from navigator.serving import perf_analyzer as pa
from navigator.serving.measure import Load
from navigator.serving.search import Candidate, Objective, Space
from navigator.triton import config as cfg_mod

from ..conftest import importable

BASE = '''name: "m"
backend: "onnxruntime"
max_batch_size: 8
input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
instance_group { kind: KIND_CPU count: 1 }
dynamic_batching { preferred_batch_size: [ 2, 8 ] max_queue_delay_microseconds: 100 }
model_warmup { name: "b1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
model_warmup { name: "b8" batch_size: 8 inputs { key: "x" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
'''


def test_variant_replaces_only_the_searched_settings():
    base = cfg_mod.parse(BASE)
    v = variants.variant(base, Candidate(3, 4, 500))
    assert v.max_batch_size == 4 and v.instance_group[0].count == 3
    assert v.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(v.dynamic_batching.preferred_batch_size) == [2]          # 8 no longer fits
    assert [w.name for w in v.model_warmup] == ["b1"]                       # the batch-8 warm-up would be refused
    assert v.input == base.input and v.backend == "onnxruntime"
    assert cfg_mod.problems(v) == []
    off = variants.variant(base, Candidate(1, 8, None))
    assert not off.HasField("dynamic_batching")
    assert base.instance_group[0].count == 1                                # the base is not changed


def test_variant_of_a_model_without_batching():
    base = cfg_mod.parse(BASE.replace("max_batch_size: 8", "max_batch_size: 0").split("dynamic_batching")[0])
    assert variants.variant(base, Candidate(2, 0, None)).instance_group[0].count == 2
    with pytest.raises(UserInputError, match="does not batch"):
        variants.variant(base, Candidate(1, 4, 0))


def test_apply_writes_the_chosen_settings_atomically(tmp_path):
    (tmp_path / "repo" / "m").mkdir(parents=True)
    path = tmp_path / "repo" / "m" / "config.pbtxt"
    path.write_text(BASE)
    assert variants.apply(tmp_path / "repo", "m", Candidate(2, 4, 0), preferred=[2, 4]) == path.resolve()
    cfg = cfg_mod.parse(path.read_text())
    assert (cfg.instance_group[0].count, cfg.max_batch_size) == (2, 4)
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2, 4]
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.pbtxt"]      # no temp file left
    with pytest.raises(UserInputError, match="no m2/config.pbtxt"):
        variants.apply(tmp_path / "repo", "m2", Candidate(1, 1, 0), preferred=[])


def test_model_analyzer_config_names_the_model_and_the_searched_ranges(tmp_path):
    config = handoff.model_analyzer_config(
        repo=tmp_path / "triton", model="m", space=Space((1, 2), (1, 4, 8), (0, 500, None)),
        load=Load("concurrency", (1, 2, 4)), batch_sizes=[1],
        objective=Objective("p99_latency", max_p99_ms=5, min_throughput=100),
        search="quick", input_data="perf_input.json", shapes=["ids:16"], kind="KIND_GPU", preferred=[4],
        measurement_ms=5000)
    path = tmp_path / "model_analyzer.yaml"
    handoff.write_model_analyzer_yaml(path, config, ["machine: test"], ["a note"])
    data = yaml.safe_load(path.read_text())
    entry = data["profile_models"]["m"]
    assert data["model_repository"] == str(tmp_path / "triton") and data["run_config_search_mode"] == "quick"
    assert entry["model_config_parameters"] == {
        "max_batch_size": [1, 4, 8],
        "dynamic_batching": {"max_queue_delay_microseconds": [0, 500], "preferred_batch_size": [[4]]},
        "instance_group": [{"kind": "KIND_GPU", "count": [1, 2]}]}
    assert entry["parameters"] == {"concurrency": [1, 2, 4], "batch_sizes": [1]}
    assert entry["perf_analyzer_flags"] == {"input-data": "perf_input.json", "measurement-interval": 5000,
                                            "shape": ["ids:16"]}
    # open loop: Model Analyzer's request_rate parameter; an intervals file goes to perf_analyzer as is
    rate = handoff.model_analyzer_config(
        repo=tmp_path, model="m", space=Space(), load=Load("request_rate", (10.0, 20.0), shared_memory="system"),
        batch_sizes=[1], objective=Objective(), search="brute", input_data="perf_input.json", shapes=[],
        kind="KIND_CPU", preferred=[], measurement_ms=1000)["profile_models"]["m"]
    assert rate["parameters"] == {"request_rate": [10.0, 20.0], "batch_sizes": [1]}
    assert rate["perf_analyzer_flags"]["shared-memory"] == "system"
    gaps = handoff.model_analyzer_config(
        repo=tmp_path, model="m", space=Space(), load=Load("request_intervals", (50.0,), intervals_us=(20000,),
                                                           intervals_file="/x/gaps.txt"),
        batch_sizes=[1], objective=Objective(), search="brute", input_data="perf_input.json", shapes=[],
        kind="KIND_CPU", preferred=[], measurement_ms=1000)["profile_models"]["m"]
    assert gaps["parameters"] == {"batch_sizes": [1]}
    assert gaps["perf_analyzer_flags"]["request-intervals"] == "/x/gaps.txt"
    assert entry["objectives"] == ["perf_latency_p99"]
    assert entry["constraints"] == {"perf_latency_p99": {"max": 5}, "perf_throughput": {"min": 100}}
    assert "cpu_only" not in entry
    assert "# note: a note" in path.read_text()


def test_perf_analyzer_script_holds_the_exact_lines(tmp_path):
    cmd = handoff.command_for(model="m", load=pa.load_flags(concurrency=4), batch_size=2, shapes=["ids:16", "mask:16"],
                              window_ms=500, csv_name="i1_b4_d0_b2_c4.csv")
    path = tmp_path / "perf_analyzer.sh"
    handoff.write_perf_analyzer_sh(path, model="m", groups=[("i1_b4_d0", "configs/i1_b4_d0.config.pbtxt", [cmd])],
                                   provenance=["machine: test"])
    text = path.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith('"$PA"'))
    assert line == ('"$PA" -m m -u "$URL" -i grpc -b 2 --concurrency-range 4:4 --measurement-mode time_windows '
                    '--measurement-interval 500 --stability-percentage 10 --max-trials 10 --input-data '
                    'perf_input.json --shape ids:16 --shape mask:16 -f i1_b4_d0_b2_c4.csv')
    assert text.startswith("#!/usr/bin/env bash") and path.stat().st_mode & 0o111
    import subprocess

    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_perf_analyzer_csv_is_read_in_milliseconds():
    text = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
            "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
            "4,9387.54,1,129,117,18,94,62,0,397,542,593,742\n")
    rows = perf_analyzer.parse_csv(text, batch_size=1)
    assert rows == [{"concurrency": 4, "batch_size": 1, "throughput": 9387.54,
                     "latency_ms": {"p50": 0.397, "p90": 0.542, "p95": 0.593, "p99": 0.742}}]


def _configs():
    def pt(c, thr, p99):
        return {"concurrency": c, "batch_size": 1, "throughput": thr,
                "latency_ms": {"p50": p99 / 2, "p90": p99 * 0.7, "p95": p99 * 0.8, "p99": p99}}

    return [{"name": "i1_b4_d0", "results": [pt(1, 100, 1.0), pt(2, 180, 1.5), pt(4, 200, 3.0)]},
            {"name": "i2_b4_d0", "results": [pt(1, 90, 1.1), pt(2, 170, 1.4), pt(4, 260, 2.5)]}]


def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, len(data)


needs_matplotlib = pytest.mark.skipif(not importable("matplotlib"),
                                      reason="needs matplotlib (pip install 'navigator[serve]')")


@needs_matplotlib
def test_plots_are_real_pngs(tmp_path):
    plots.throughput_v_latency(tmp_path / "t.png", _configs(), chosen="i2_b4_d0", max_p99_ms=2.8, title="t")
    plots.latency_v_concurrency(tmp_path / "l.png", _configs()[1], title="l")
    plots.gpu_mem_v_latency(tmp_path / "g.png", [("i1_b4_d0", 3.0, 900.0), ("i2_b4_d0", 2.5, 1700.0)], title="g")
    for name in ("t.png", "l.png", "g.png"):
        _png(tmp_path / name)


@needs_matplotlib
def test_report_markdown_and_self_contained_html(tmp_path):
    from navigator.serving import report

    img = tmp_path / "serving" / "t.png"
    img.parent.mkdir()
    plots.throughput_v_latency(img, _configs(), chosen=None, max_p99_ms=None, title="t")
    items = [("h", 1, "Title"), ("p", "Best: **onnx** `x|y`"), ("table", ["a", "b"], [["1", "x|y"]]),
             ("img", img, "plot"), ("code", "name: \"m\"\n")]
    md = report.to_markdown(items, tmp_path / "report")
    assert "# Title" in md and "| 1 | x\\|y |" in md and "![plot](../serving/t.png)" in md and "```\nname" in md
    page = report.to_html(items, "Title <x>")
    assert "<title>Title &lt;x&gt;</title>" in page and "<b>onnx</b>" in page and "<code>x|y</code>" in page
    encoded = page.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(encoded) == img.read_bytes()
    assert "t.png" not in page                          # nothing refers to a file beside the page


def test_gpu_memory_is_read_from_the_metrics_page():
    from navigator.serving.outputs import gpu_memory_from_metrics

    page = ("# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n"
            "# TYPE nv_gpu_memory_used_bytes gauge\n"
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1500000000\n'
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 500000000\n'
            'nv_inference_count{model="m",version="1"} 12\n')
    assert gpu_memory_from_metrics(page) == 2000.0
    assert gpu_memory_from_metrics('nv_inference_count{model="m"} 3\n') is None     # a CPU-only server


def test_report_of_a_workspace_never_served(tmp_path):
    from navigator.serving import report
    from navigator.workspace.layout import Workspace
    from navigator.workspace.status import (
        Best, ConvertStep, FormatStatus, ModelInfo, ProfileResult, ProfileStep, RunnerStatus, Status, VerifyStep)

    ws = Workspace(tmp_path / "m.nav.workspace")
    st = Status(model=ModelInfo(name="m", source_format="onnx"), state="complete", formats={
        "onnx": FormatStatus(format="onnx", convert=ConvertStep(status="ok"), runners={
            "onnxruntime-cpu": RunnerStatus(runner="onnxruntime", device="cpu", verify=VerifyStep(status="ok"),
                                            profile=ProfileStep(status="ok", results=[
                                                ProfileResult(4, 1234.5, {"p99": 0.5})]))}),
        "onnx-fp16": FormatStatus(format="onnx", precision="fp16",
                                  convert=ConvertStep(status="failed", reason="no onnxconverter_common"))},
        best=Best(key="onnx", runner="onnxruntime-cpu", batch_size=4, throughput=1234.5))
    path = report.write(ws, st, html_too=True)
    md = path.read_text()
    assert "| onnx | fp32 | onnxruntime-cpu | ok | ok | ok | 1234.5/s @ 4, p99 0.500 ms |  |" in md
    assert "no onnxconverter_common" in md and "Best: **onnx**" in md
    assert "`navigator profile WS --triton`" in md                    # says how to get the serving part
    assert (ws.report_dir / "summary.html").read_text().startswith("<!DOCTYPE html>")
