"""status.yaml v5: golden file, JSON Schema, lenient loading, migrations (real v1-v4 files), atomic save."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec
from navigator.workspace import schema, status
from navigator.workspace.status import (
    Best,
    ConvertStep,
    FormatStatus,
    ModelInfo,
    OutputCheck,
    ProfileResult,
    ProfileStep,
    RunnerStatus,
    RunnerUp,
    SamplesInfo,
    ServingConfig,
    ServingPoint,
    ServingStatus,
    Status,
    VerifyStep,
)

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "status_v5.yaml"
GOLDEN_V4 = Path(__file__).resolve().parents[2] / "golden" / "status_v4.yaml"
GOLDEN_V3 = Path(__file__).resolve().parents[2] / "golden" / "status_v3.yaml"
GOLDEN_V2 = Path(__file__).resolve().parents[2] / "golden" / "status_v2.yaml"
GOLDEN_V1 = Path(__file__).resolve().parents[2] / "golden" / "status_v1.yaml"
SHA_MODEL = "a" * 64
SHA_SAMPLES = "0123456789abcdef" * 4


def full_status() -> Status:
    """Every field set, two formats, fixed timestamps: the golden file's content."""
    return Status(
        schema_version=5,
        navigator_version="0.1.0",
        created="2025-01-02T03:04:05+00:00",
        updated="2025-01-02T03:09:10+00:00",
        state="complete",
        environment={"python": "3.11.9", "platform": "Linux-x86_64", "cpu": "AMD EPYC", "gpu": None,
                     "packages": {"onnx": "1.17.0", "onnxruntime": "1.20.1"}},
        model=ModelInfo(name="tiny", source_format="onnx", path="/models/tiny.onnx", sha256=SHA_MODEL),
        signature=ModelSignature(
            inputs=[TensorSpec("ids", "int64", [-1, -1]), TensorSpec("mask", "bool", [-1, -1])],
            outputs=[TensorSpec("logits", "float32", [-1, 8]), TensorSpec("top", "int64", [-1, 2])],
        ),
        batch_dim=0,
        shape_profiles=[{"ids": {"min": [1, 4], "opt": [8, 16], "max": [32, 64]},
                         "mask": {"min": [1, 4], "opt": [8, 16], "max": [32, 64]}}],
        samples=SamplesInfo(count=2, source="generated", value_ranges={"ids": [0, 1000], "mask": [0, 2]},
                            shapes=[{"ids": [8, 16], "mask": [8, 16]}, {"ids": [1, 16], "mask": [1, 16]},
                                    {"ids": [1, 4], "mask": [1, 4]}],
                            corners=[2], sha256=SHA_SAMPLES, reference_sha256="b" * 64,
                            reference={"key": "onnx", "runner": "onnxruntime-cpu",
                                       "options": {"graph_optimization_level": "disabled"},
                                       "variation": {"runner": "onnxruntime-cpu",
                                                     "options": {"graph_optimization_level": "all"}}}),
        config={"targets": ["onnx", "onnx-fp16"], "atol": None, "max_batch_size": 32, "device": "cpu"},
        formats={
            "onnx": FormatStatus(
                format="onnx", precision="fp32", path="formats/onnx/model.onnx", parent=None, isolated=False,
                io_names={"ids": "ids", "mask": "attention_mask"},
                convert=ConvertStep(status="ok", duration_s=1.25, exporter="copy", inputs_sha256=SHA_MODEL,
                                    artifact_sha256="b" * 64,
                                    log="formats/onnx/convert.log"),
                runners={
                    "onnxruntime-cpu": RunnerStatus(
                        runner="onnxruntime", device="cpu", provider="cpu",
                        verify=VerifyStep(
                            status="ok", duration_s=0.5, batch_sizes=[1, 8], log="formats/onnx/verify.log",
                            outputs_sha256="c" * 64,
                            outputs={
                                "logits": OutputCheck(mode="tolerance", passed=True, max_abs=2.1e-07,
                                                      max_rel=3.0e-06, atol=1.0e-05, rtol=1.0e-05,
                                                      min_atol=2.1e-07, min_rtol=3.0e-06, scale=1.0,
                                                      atol_rule="1e-05 x scale 1 (p99 of |reference|)",
                                                      conclusive=True,
                                                      control="wrong answers rejected (a zero output) in 4 of 4 "
                                                              "comparisons",
                                                      kind="logits", kind_reason="named 'logits'", floor=3.0e-06),
                                "top": OutputCheck(mode="exact", passed=True, measured=0.0, conclusive=True),
                            },
                            settings={"graph_optimization_level": "all", "providers": ["CPUExecutionProvider"]},
                        ),
                        profile=ProfileStep(
                            status="ok", duration_s=4.5, stable=True, log="formats/onnx/profile.log", phase="race",
                            results=[
                                ProfileResult(1, 2100.5, {"p50": 0.47, "p90": 0.5, "p95": 0.52, "p99": 0.6}),
                                ProfileResult(8, 5400.25, {"p50": 1.4, "p90": 1.5, "p95": 1.6, "p99": 2.0},
                                              raced=True),
                            ],
                            options={"intra_op_num_threads": 1},
                            tuning={"defaults": {"throughput": 4900.5, "spread": 0.03},
                                    "candidates": [{"options": {"intra_op_num_threads": 1}, "throughput": 5400.25,
                                                    "spread": 0.02},
                                                   {"options": {"execution_mode": "parallel"}, "throughput": 4100.0,
                                                    "spread": 0.04, "out": "separated from defaults"}],
                                    "rounds": 6, "verify": "ok", "duration_s": 1.2,
                                    "reason": "intra_op_num_threads=1 separated from the defaults after 6 rounds"},
                        ),
                    ),
                },
            ),
            "onnx-fp16": FormatStatus(
                format="onnx", precision="fp16", path="formats/onnx-fp16/model.onnx", parent="onnx",
                convert=ConvertStep(status="ok", duration_s=0.75, inputs_sha256=SHA_MODEL,
                                    artifact_sha256="c" * 64,
                                    log="formats/onnx-fp16/convert.log"),
                runners={
                    "onnxruntime-cpu": RunnerStatus(
                        runner="onnxruntime", device="cpu", provider="cpu",
                        verify=VerifyStep(
                            status="failed", reason="logits: max_abs 0.02 > atol 0.001", duration_s=0.25,
                            batch_sizes=[1, 8],
                            outputs={
                                "logits": OutputCheck(mode="tolerance", passed=False, max_abs=0.02, max_rel=0.1,
                                                      atol=1.0e-03, rtol=1.0e-03, min_atol=0.02, min_rtol=0.1,
                                                      reason="max_abs 0.02 > atol 0.001"),
                                "top": OutputCheck(mode="mismatch_fraction", passed=True, threshold=0.01,
                                                   measured=0.005),
                            },
                        ),
                        profile=ProfileStep(status="skipped", reason="verification failed"),
                    ),
                },
                peak_rss_mb=812.5,
            ),
            "onnx-int8": FormatStatus(
                format="onnx", precision="int8", path="formats/onnx-int8/model.onnx", parent="onnx",
                convert=ConvertStep(status="ok", duration_s=2.5, inputs_sha256=SHA_MODEL,
                                    artifact_sha256="d" * 64,
                                    log="formats/onnx-int8/convert.log", precision_share=0.97),
                runners={
                    "onnxruntime-cpu": RunnerStatus(
                        runner="onnxruntime", device="cpu", provider="cpu",
                        verify=VerifyStep(
                            status="inconclusive", duration_s=0.25, batch_sizes=[1, 8],
                            reason="logits: inconclusive: the reference is the same for different inputs",
                            samples=["001", "002"], calibrated_on=["000"],
                            outputs={
                                "logits": OutputCheck(mode="top1", passed=True, max_abs=0.01, max_rel=0.01,
                                                      threshold=0.99, measured=1.0, scale=0.5, conclusive=False,
                                                      control="the reference is the same for different inputs",
                                                      cure="verify with trained weights or real inputs",
                                                      kind="logits", kind_reason="named 'logits'",
                                                      slices=[{"slice": "axis 1: 0:4", "passed": True,
                                                               "scale": 0.5, "conclusive": False}]),
                                "top": OutputCheck(mode="mismatch_fraction", passed=True, threshold=0.05,
                                                   measured=0.0, conclusive=True),
                            },
                        ),
                        profile=ProfileStep(status="skipped", reason="verification inconclusive"),
                    ),
                },
            ),
        },
        best=Best(key="onnx", runner="onnxruntime-cpu", batch_size=8, throughput=5400.25, basis="profile",
                  spread=0.04, stable=True, margin=1.2857, separated=True, note=None,
                  runner_up=RunnerUp(key="onnx-optimized", runner="onnxruntime-cpu", batch_size=8,
                                     throughput=4200.0, spread=0.05)),
        serving=ServingStatus(
            status="ok", date="2025-01-02T03:10:00+00:00", duration_s=12.5, budget_s=60.0,
            machine={"cpu": "AMD EPYC", "cores": 2, "gpu": None, "platform": "Linux-x86_64"},
            model="tiny", key="onnx", backend="onnxruntime", tool="perf_analyzer", search="brute",
            objective={"kind": "throughput", "max_p99_ms": 50.0, "min_throughput": None},
            batch_sizes=[1], load={"mode": "request_rate", "shared_memory": "system", "levels": [100.0, 200.0]},
            server={"remote": True, "url": "grpc://gpu-box:8001", "version": "2.51.0", "loaded_configs": True,
                    "restored": True},
            configurations=[ServingConfig(
                name="i1_b8_d0_p4_cache", instances=1, max_batch_size=8, dynamic_batching=True,
                max_queue_delay_us=0, preferred_batch_sizes=[4], response_cache=True, meets_constraints=True,
                best=ServingPoint(concurrency=None, request_rate=200.0, throughput=199.5,
                                  latency_ms={"avg": 1.2, "p50": 1.1, "p99": 2.5}, windows=3, stable=True,
                                  window_ms=500),
                results=[ServingPoint(concurrency=None, request_rate=200.0, throughput=199.5,
                                      latency_ms={"avg": 1.2, "p50": 1.1, "p99": 2.5}, windows=3, stable=True,
                                      window_ms=500)])],
            ranked=["i1_b8_d0_p4_cache"], chosen="i1_b8_d0_p4_cache", setup_s=3.0),
    )


# --------------------------------------------------------------------------- golden file

def test_dumps_matches_golden_file():
    text = status.dumps(full_status())
    if os.environ.get("NAVIGATOR_UPDATE_GOLDEN") == "1":  # regenerate on purpose, then review the diff
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_golden_file_has_the_documented_layout():
    text = GOLDEN.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "schema_version: 5"
    top_keys = [line.split(":")[0] for line in lines if line and not line.startswith((" ", "-"))]
    assert top_keys == ["schema_version", "navigator_version", "created", "updated", "state", "environment",
                        "model", "signature", "batch_dim", "shape_profiles", "samples", "config", "formats",
                        "best", "serving"]
    # short lists of scalars in flow style, as ARCHITECTURE.md shows them
    assert "    shape: [-1, 8]\n" in text
    assert "      batch_sizes: [1, 8]\n" in text
    assert "    min: [1, 4]\n" in text
    # timestamps stay strings (quoted, so YAML readers do not turn them into datetimes)
    assert "created: '2025-01-02T03:04:05+00:00'\n" in text
    assert "best: null" not in text


def test_golden_file_loads_back_equal():
    loaded = status.loads(GOLDEN.read_text(encoding="utf-8"))
    assert loaded == full_status()
    assert loaded.to_dict() == full_status().to_dict()
    assert loaded.formats["onnx-fp16"].runners["onnxruntime-cpu"].verify.outputs["top"].threshold == 0.01
    assert loaded.formats["onnx"].verified is True
    assert loaded.formats["onnx-fp16"].verified is False
    assert loaded.formats["onnx"].runners["onnxruntime-cpu"].profile.peak().batch_size == 8


def test_save_then_load_round_trip(tmp_path):
    st = full_status()
    path = tmp_path / "ws" / "status.yaml"
    status.save(st, path)
    assert st.created == "2025-01-02T03:04:05+00:00"   # kept
    assert st.updated != "2025-01-02T03:09:10+00:00"   # refreshed by save
    assert status.load(path).to_dict() == st.to_dict()


def test_load_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserInputError, match="no status.yaml here"):
        status.load(tmp_path / "status.yaml")


# --------------------------------------------------------------------------- JSON Schema

def test_schema_file_is_valid_draft_2020_12():
    import json

    import jsonschema

    data = json.loads(schema.schema_path().read_text(encoding="utf-8"))
    assert data["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(data)


def test_golden_file_validates_against_schema():
    schema.validate(yaml.safe_load(GOLDEN.read_text(encoding="utf-8")))


def test_minimal_status_validates():
    st = Status(model=ModelInfo(name="m", source_format="onnx"), created="2025-01-01T00:00:00+00:00",
                updated="2025-01-01T00:00:00+00:00")
    schema.validate(st.to_dict())


HF = {"task": "text-classification", "chosen_by": "config.architectures BertForSequenceClassification",
      "architecture": "BertForSequenceClassification", "model_type": "bert", "dtype": "float32",
      "weights": ["model.safetensors"], "tokenizer": "tokenizer.json", "trust_remote_code": False}


def test_huggingface_record_is_optional_and_round_trips():
    plain = full_status()
    assert "huggingface" not in plain.to_dict()["model"]          # other sources' files are unchanged
    st = full_status()
    st.model = ModelInfo(name="bert", source_format="torch", path="/models/bert", sha256=SHA_MODEL, huggingface=HF)
    data = st.to_dict()
    schema.validate(data)
    assert status.loads(status.dumps(st)).model == st.model
    data["model"]["huggingface"]["trust_remote_code"] = "yes"     # negative control: the schema checks it
    with pytest.raises(UserInputError, match=r"\$\.model\.huggingface\.trust_remote_code"):
        schema.validate(data)


@pytest.mark.parametrize("mutate, path, words", [
    (lambda d: d.update(state="done"), "$.state", "'done' is not one of"),
    (lambda d: d.update(schema_version=1), "$.schema_version", "5 was expected"),
    (lambda d: d["formats"]["onnx"]["convert"].update(status="passed"), "$.formats.onnx.convert.status",
     "'passed' is not one of"),
    (lambda d: d["formats"]["onnx-fp16"]["runners"]["onnxruntime-cpu"]["verify"].update(status="error"),
     "$.formats['onnx-fp16'].runners['onnxruntime-cpu'].verify.status", "'error' is not one of"),
    (lambda d: d["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["profile"]["results"][1].pop("throughput"),
     "$.formats.onnx.runners['onnxruntime-cpu'].profile.results[1]", "'throughput' is a required property"),
    (lambda d: d["signature"]["outputs"][0].update(shape="[-1, 8]"), "$.signature.outputs[0].shape",
     "is not of type 'array'"),
    (lambda d: d.pop("formats"), "$", "'formats' is a required property"),
    (lambda d: d["best"].update(basis="fastest"), "$.best.basis", "'fastest' is not one of"),
    (lambda d: d.update(best=[]), "$.best", "is not valid under any of the given schemas"),
])
def test_schema_errors_name_the_json_path(mutate, path, words):
    data = full_status().to_dict()
    mutate(data)
    with pytest.raises(UserInputError) as info:
        schema.validate(data)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"status.yaml: {path}: "), message
    assert words in message


def test_schema_allows_unknown_keys_everywhere():
    data = full_status().to_dict()
    data["future_top"] = 1
    data["model"]["future"] = {"x": 1}
    data["formats"]["onnx"]["future"] = True
    data["formats"]["onnx"]["convert"]["future"] = None
    data["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["verify"]["outputs"]["logits"]["future"] = 1.0
    data["formats"]["onnx"]["runners"]["onnxruntime-cpu"]["profile"]["results"][0]["future"] = "y"
    data["best"]["future"] = []
    schema.validate(data)


# --------------------------------------------------------------------------- lenient loading

def _add_unknown_keys(cls, node: dict) -> int:
    """An ``x_unknown`` key in the mapping of every record (not in keyed collections
    such as ``formats`` or ``runners``, where a new key is a new entry). Returns how many."""
    node["x_unknown"] = {"nested": [1, {"deeper": True}]}
    count = 1
    for name, (sub, kind) in cls._nested.items():
        value = node.get(name)
        if value is None:
            continue
        children = [value] if kind == "one" else value if kind == "list" else list(value.values())
        count += sum(_add_unknown_keys(sub, child) for child in children)
    return count


def test_unknown_keys_at_every_level_are_ignored():
    data = full_status().to_dict()
    count = _add_unknown_keys(Status, data)
    # status, model, signature + 4 specs, samples (8); per format (3): format, convert, runner, verify,
    # 2 outputs, profile (7 each), 2 profile results of onnx; best and its runner_up; serving, its
    # configuration, that one's best and its one result
    assert count == 8 + 7 * 3 + 2 + 2 + 4
    text = yaml.safe_dump(data, sort_keys=False)
    assert text.count("x_unknown:") == count
    loaded = status.loads(text)
    assert loaded == full_status()
    assert loaded.to_dict() == full_status().to_dict()
    assert "x_unknown" not in status.dumps(loaded)


def test_newer_schema_version_is_refused():
    data = full_status().to_dict()
    data["schema_version"] = 6
    with pytest.raises(UserInputError) as info:
        status.loads(yaml.safe_dump(data), source="ws/status.yaml")
    assert "newer" in str(info.value)
    assert "schema_version 6" in str(info.value)
    assert info.value.hint == "upgrade navigator"


@pytest.mark.parametrize("text, words", [
    ("schema_version: 1\nmodel: {name: [unclosed\n", "not valid YAML"),
    ("- schema_version: 1\n", "expected a mapping"),
    ("just a string\n", "expected a mapping"),
    ("", "expected a mapping"),
    ("navigator_version: 0.1.0\nmodel: {name: m, source_format: onnx}\n", "schema_version is missing"),
    ("schema_version: '1'\nmodel: {name: m, source_format: onnx}\n", "not an integer"),
    ("schema_version: true\nmodel: {name: m, source_format: onnx}\n", "not an integer"),
    ("schema_version: -1\n", "not an integer"),
    ("schema_version: 1\n", "malformed status"),                                    # no model
    ("schema_version: 1\nmodel: {name: m, source_format: onnx}\nformats: {onnx: 5}\n", "malformed status"),
    ("schema_version: 1\nmodel: {name: m}\n", "malformed status"),
])
def test_malformed_files_are_user_errors(text, words):
    with pytest.raises(UserInputError) as info:
        status.loads(text, source="ws/status.yaml")
    assert str(info.value).startswith("ws/status.yaml: ")
    assert words in str(info.value)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- migrations

def test_migrations_run_in_order(monkeypatch):
    calls = []

    def v0_to_v1(data):
        calls.append(("v0->v1", data["schema_version"]))
        data["model"] = {"name": data.pop("model_name"), "source_format": "onnx"}
        data["schema_version"] = 1
        return data

    def v1_to_v2(data):
        calls.append(("v1->v2", data["schema_version"]))
        data["state"] = {"finished": "complete"}.get(data["state"], data["state"])
        data["schema_version"] = 2
        return data

    def v2_to_v3(data):
        calls.append(("v2->v3", data["schema_version"]))
        data["schema_version"] = 3
        return data

    def v3_to_v4(data):
        calls.append(("v3->v4", data["schema_version"]))
        data["schema_version"] = 4
        return data

    def v4_to_v5(data):
        calls.append(("v4->v5", data["schema_version"]))
        data["schema_version"] = 5
        return data

    # registered out of order on purpose: the version decides the order
    monkeypatch.setattr(status, "MIGRATIONS", {1: v1_to_v2, 4: v4_to_v5, 3: v3_to_v4, 2: v2_to_v3, 0: v0_to_v1})
    original = {"schema_version": 0, "model_name": "old", "state": "finished"}
    snapshot = copy.deepcopy(original)
    migrated = status.migrate(original)
    assert calls == [("v0->v1", 0), ("v1->v2", 1), ("v2->v3", 2), ("v3->v4", 3), ("v4->v5", 4)]
    assert migrated == {"schema_version": 5, "model": {"name": "old", "source_format": "onnx"},
                        "state": "complete"}
    assert original == snapshot  # the caller's mapping is not changed

    st = status.loads("schema_version: 0\nmodel_name: old\nstate: finished\n")
    assert st.model == ModelInfo(name="old", source_format="onnx")
    assert st.state == "complete"
    assert st.schema_version == 5


def test_current_version_runs_no_migration(monkeypatch):
    def boom(data):
        raise AssertionError("must not run")

    monkeypatch.setattr(status, "MIGRATIONS", {0: boom, 1: boom, 2: boom, 3: boom, 4: boom})
    assert status.migrate({"schema_version": 5, "x": 1}) == {"schema_version": 5, "x": 1}


def test_migration_that_does_not_raise_the_version_is_an_error(monkeypatch):
    monkeypatch.setattr(status, "MIGRATIONS", {0: lambda data: data})
    with pytest.raises(RuntimeError, match="migration from schema_version 0 did not raise it by one"):
        status.migrate({"schema_version": 0})


def test_migration_that_skips_a_version_is_an_error(monkeypatch):
    monkeypatch.setattr(status, "MIGRATIONS", {0: lambda data: {**data, "schema_version": 2}})
    monkeypatch.setattr(status, "SCHEMA_VERSION", 2)
    with pytest.raises(RuntimeError, match="did not raise it by one"):
        status.migrate({"schema_version": 0})


def test_missing_migration_is_a_user_error(monkeypatch):
    monkeypatch.setattr(status, "MIGRATIONS", {})
    with pytest.raises(UserInputError, match="no migration from schema_version 0"):
        status.loads("schema_version: 0\nmodel: {name: m, source_format: onnx}\n")


# --------------------------------------------------------------------------- atomic save

def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "status.yaml"
    status.save(full_status(), path)
    before = path.read_bytes()

    def fail_replace(src, dst):
        assert Path(src).exists() and Path(src).parent == tmp_path  # the new text was fully written first
        assert Path(src).read_text(encoding="utf-8").startswith("schema_version: 5\n")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_replace)
    changed = full_status()
    changed.state = "interrupted"
    with pytest.raises(OSError, match="No space left"):
        status.save(changed, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.yaml"]


def test_a_v4_file_migrates_and_validates_as_v5():
    """The v4 golden file (profiles at the runtimes' defaults) loads through the v4 -> v5 migration,
    validates against the v5 schema once re-dumped and keeps its content: no options, no tuning."""
    old = yaml.safe_load(GOLDEN_V4.read_text(encoding="utf-8"))
    assert old["schema_version"] == 4
    loaded = status.loads(GOLDEN_V4.read_text(encoding="utf-8"))
    assert loaded.schema_version == 5
    profile = loaded.formats["onnx"].runners["onnxruntime-cpu"].profile
    assert profile.results[1].raced and profile.options is None and profile.tuning is None
    schema.validate(loaded.to_dict())


def test_a_v3_file_migrates_and_validates_as_v5():
    """The v3 golden file loads through the v3 -> v4 -> v5 migrations and validates against the v5 schema;
    a v3 serving record (navigator's own server, closed loop) says so once migrated."""
    loaded = status.loads(GOLDEN_V3.read_text(encoding="utf-8"))
    assert loaded.schema_version == 5
    schema.validate(loaded.to_dict())
    v3 = yaml.safe_load(GOLDEN_V3.read_text(encoding="utf-8"))
    v3["serving"] = {"status": "ok", "date": "2025-01-02T03:10:00+00:00", "machine": {}, "model": "tiny",
                     "backend": "onnxruntime", "stand_in": True, "tool": "navigator", "concurrency": [1, 2],
                     "configurations": [{"name": "i1_b8_d0", "results": [
                         {"concurrency": 2, "batch_size": 1, "throughput": 10.0, "latency_ms": {"p99": 1.0}}]}],
                     "ranked": ["i1_b8_d0"], "chosen": "i1_b8_d0"}
    migrated = status.loads(yaml.safe_dump(v3))
    assert migrated.serving.load == {"mode": "concurrency", "levels": [1, 2], "shared_memory": "none"}
    assert migrated.serving.server == {"remote": False}
    assert migrated.serving.configurations[0].results[0].level == "2"
    schema.validate(migrated.to_dict())


def test_a_v2_file_migrates_and_validates_as_v5():
    """The v2 golden file (before output kinds, floors and runner settings) loads through the
    v2 -> … -> v5 migrations, validates against the v5 schema once re-dumped, and keeps its content."""
    old = yaml.safe_load(GOLDEN_V2.read_text(encoding="utf-8"))
    assert old["schema_version"] == 2
    loaded = status.loads(GOLDEN_V2.read_text(encoding="utf-8"))
    assert loaded.schema_version == 5
    logits = loaded.formats["onnx"].runners["onnxruntime-cpu"].verify.outputs["logits"]
    assert logits.max_abs == 2.1e-07 and logits.kind is None and logits.floor is None
    schema.validate(loaded.to_dict())


def test_a_v1_file_migrates_and_validates_as_v5():
    """The v1 golden file (written by Navigator 0.1 before the inconclusive status) loads through
    the v1 -> … -> v5 migrations, validates against the v5 schema once re-dumped, and keeps its content."""
    old = yaml.safe_load(GOLDEN_V1.read_text(encoding="utf-8"))
    assert old["schema_version"] == 1
    loaded = status.loads(GOLDEN_V1.read_text(encoding="utf-8"))
    assert loaded.schema_version == 5
    assert loaded.formats["onnx"].runners["onnxruntime-cpu"].verify.outputs["logits"].max_abs == 2.1e-07
    assert loaded.formats["onnx"].runners["onnxruntime-cpu"].verify.outputs["logits"].conclusive is None
    schema.validate(loaded.to_dict())
    assert old["schema_version"] == 1     # the caller's mapping is not changed by the migration
