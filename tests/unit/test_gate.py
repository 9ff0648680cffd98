"""Unit tests for navigator.tools.gate: policy validation, the JUnit / markdown renderings,
environment fingerprints and the regression margin."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from navigator.errors import UserInputError
from navigator.tools.gate import (DEFAULT_NOISE_MARGIN, UNSTABLE_NOISE_MARGIN, Bound, Check, GatePolicy,
                                  GateResult, OutputPolicy, best_throughput, fingerprint_differences, load_policy,
                                  parse_policy, regression_margin)
from navigator.workspace.status import FormatStatus, ProfileResult, ProfileStep, RunnerStatus, VerifyStep

ARCHITECTURE_EXAMPLE = """
require_formats: [onnx, onnx-optimized]
outputs: {logits: {mode: tolerance, atol: 1.0e-4, rtol: 1.0e-3}}
min_throughput: {onnx: 1000}      # at the best batch size; or {onnx: {batch_size: 8, value: 1000}}
max_p99_ms: {onnx: 5.0}           # same two forms
max_regression: 0.05              # with --baseline OLD_WS
"""


def test_the_documented_policy_parses(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(ARCHITECTURE_EXAMPLE)
    p = load_policy(path)
    assert p.require_formats == ("onnx", "onnx-optimized")
    assert p.outputs == {"logits": OutputPolicy(mode="tolerance", atol=1e-4, rtol=1e-3)}
    assert p.min_throughput == {"onnx": Bound(1000.0)} and p.max_p99_ms == {"onnx": Bound(5.0)}
    assert p.max_regression == 0.05 and p.noise_margin is None
    assert p.formats == ["onnx", "onnx-optimized"]


def test_both_bound_forms_and_yaml_strings():
    p = parse_policy({"min_throughput": {"onnx": {"batch_size": 8, "value": 1000}, "openvino": "2e3"},
                      "max_p99_ms": {"onnx-fp16": 1}, "outputs": {"idx": "exact"}})
    assert p.min_throughput == {"onnx": Bound(1000.0, 8), "openvino": Bound(2000.0)}
    assert p.formats == ["onnx", "openvino", "onnx-fp16"]     # gated without require_formats
    assert p.outputs["idx"].mode == "exact"
    assert p.to_dict()["min_throughput"] == {"onnx": {"batch_size": 8, "value": 1000.0}, "openvino": 2000.0}


@pytest.mark.parametrize("policy,names", [
    ({"require_formats": ["onnx"], "min_throughput_x": 3}, ["min_throughput_x", "valid: require_formats"]),
    ({"require_formats": ["onnx"], "outputs": {"logits": {"mode": "tolerance", "aotl": 1}}}, ["outputs.logits",
                                                                                               "'aotl'"]),
    ({"require_formats": ["onxx"]}, ["require_formats[0]", "'onxx'"]),
    ({"require_formats": 5}, ["require_formats", "int"]),
    ({"require_formats": ["onnx"], "min_throughput": {"onnx": "fast"}}, ["min_throughput.onnx", "'fast'"]),
    ({"require_formats": ["onnx"], "min_throughput": {"onnx": True}}, ["min_throughput.onnx", "bool"]),
    ({"require_formats": ["onnx"], "min_throughput": {"onnx": -5}}, ["min_throughput.onnx", "> 0"]),
    ({"require_formats": ["onnx"], "min_throughput": [1000]}, ["min_throughput", "mapping"]),
    ({"min_throughput": {"tensorrt-foo-bar-fp16": 1}}, ["min_throughput.tensorrt-foo-bar-fp16"]),
    ({"max_p99_ms": {"onnx": {"batch_size": 0, "value": 1}}}, ["max_p99_ms.onnx.batch_size", ">= 1"]),
    ({"max_p99_ms": {"onnx": {"batch": 8, "value": 1}}}, ["max_p99_ms.onnx", "'batch'"]),
    ({"max_p99_ms": {"onnx": {"batch_size": 8}}}, ["max_p99_ms.onnx", "'value'"]),
    ({"require_formats": ["onnx"], "max_regression": 1.5}, ["max_regression", "< 1"]),
    ({"require_formats": ["onnx"], "max_regression": "5%"}, ["max_regression", "'5%'"]),
    ({"require_formats": ["onnx"], "noise_margin": -0.1}, ["noise_margin", ">= 0"]),
    ({"require_formats": ["onnx"], "outputs": {"y": {"mode": "cosine"}}}, ["outputs.y", "threshold"]),
    ({"require_formats": ["onnx"], "outputs": {"y": {"mode": "cosine", "threshold": 2}}}, ["outputs.y.threshold"]),
    ({"require_formats": ["onnx"], "outputs": {"y": {"atol": 1, "threshold": 0.1}}}, ["outputs.y.threshold"]),
    ({"require_formats": ["onnx"], "outputs": {"y": {"mode": "close"}}}, ["outputs.y.mode", "'close'"]),
    ({"require_formats": ["onnx"], "outputs": {"y": {"atol": -1}}}, ["outputs.y.atol", ">= 0"]),
    ({"require_formats": ["onnx"], "outputs": {"y": 3}}, ["outputs.y", "mapping"]),
    ({}, ["names no format"]),
    ([1, 2], ["mapping"]),
])
def test_malformed_policies_name_the_key(policy, names):
    with pytest.raises(UserInputError) as e:
        parse_policy(policy, source="gate.yaml")
    line = e.value.one_line()
    assert line.startswith("gate.yaml"), line
    for name in names:
        assert name in line, line


def test_policy_files(tmp_path):
    with pytest.raises(UserInputError, match="no such file"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("require_formats: [onnx\n")
    with pytest.raises(UserInputError, match="not valid YAML"):
        load_policy(bad)
    with pytest.raises(UserInputError, match="is a directory"):
        load_policy(tmp_path)
    with pytest.raises(UserInputError, match="expected a path"):
        load_policy(42)


def test_outputs_are_checked_against_the_model():
    p = parse_policy({"require_formats": ["onnx"], "outputs": {"logitz": {"atol": 1e-3}}}, source="gate.yaml")
    with pytest.raises(UserInputError) as e:
        p.check_outputs(["logits", "probs"])
    assert "outputs.logitz" in e.value.one_line() and "'logits', 'probs'" in e.value.one_line()
    p.check_outputs(["logitz"])


def _result() -> GateResult:
    return GateResult(checks=[
        Check("format", "onnx converted and verified", True, "onnxruntime-cpu verify ok"),
        Check("throughput", "onnx throughput >= 1e+12/s at the best batch size", False,
              'only 5.0/s < 1e12 & "quotes" <tag> \x01 | pipe', {"throughput": 5.0}),
        Check("regression", "onnx throughput regression <= 0.05 vs baseline", True, "environments differ",
              skipped=True),
    ], workspace="/w/m.nav.workspace", policy={}, baseline="/w/old.nav.workspace", created="2026-01-01T00:00:00")


def test_junit_has_one_case_per_check_and_parses():
    result = _result()
    assert not result.passed and [c.name for c in result.failures] == [result.checks[1].name]
    root = ET.fromstring(result.junit_xml().split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite.get("name") == "navigator-gate"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["navigator.gate.format", "navigator.gate.throughput",
                                                   "navigator.gate.regression"]
    assert cases[0].find("failure") is None and cases[0].find("skipped") is None
    failure = cases[1].find("failure")
    assert failure.get("message") == 'only 5.0/s < 1e12 & "quotes" <tag> ? | pipe'   # control char replaced
    assert "throughput: 5.0" in failure.text
    assert cases[2].find("skipped").get("message") == "environments differ"


def test_markdown_table():
    md = _result().markdown()
    assert md.startswith("## Navigator gate: ❌ failed")
    assert "| ✅ | onnx converted and verified | format |" in md
    assert "| ❌ |" in md and "\\| pipe" in md
    assert "| ⏭️ |" in md and "baseline `old.nav.workspace`" in md
    ok = GateResult(checks=[Check("format", "x", True, "fine")], workspace="/w", policy={})
    assert ok.passed and ok.markdown().startswith("## Navigator gate: ✅ passed")
    assert ok.headline() == "gate passed: 1 checks, 1 passed, 0 failed, 0 skipped"


ENV = {"python": "3.11.7", "platform": "Linux-x86_64", "cpu": "x86_64", "cpu_count": 2, "gpu": None,
       "device": "cpu", "packages": {"onnxruntime": "1.20.0", "numpy": "2.0", "torch": "2.5"}}


def test_fingerprints():
    assert fingerprint_differences(ENV, dict(ENV)) == []
    other = ENV | {"cpu_count": 16, "packages": ENV["packages"] | {"numpy": "2.1"}}
    assert fingerprint_differences(other, ENV) == ["cpu_count: 2 -> 16"]       # numpy is not in the fingerprint
    other = ENV | {"packages": {"onnxruntime": "1.21.0", "torch": "2.5"}}
    assert fingerprint_differences(other, ENV) == ["packages.onnxruntime: '1.20.0' -> '1.21.0'"]


def test_the_fingerprint_counts_only_the_runtimes_the_formats_used():
    """An ONNX model run by onnxruntime is compared even when torch's version changed."""
    from types import SimpleNamespace

    from navigator.tools.gate.evaluate import packages_used

    ort = FormatStatus(format="onnx", runners={"onnxruntime-cpu": RunnerStatus(runner="onnxruntime", device="cpu")})
    trt = FormatStatus(format="trt", runners={"tensorrt": RunnerStatus(runner="tensorrt", device="cuda")})
    st = SimpleNamespace(formats={"onnx": ort, "trt": trt})
    assert packages_used([st], ["onnx"]) == {"onnxruntime"}
    assert packages_used([st], ["onnx", "trt"]) == {"onnxruntime", "tensorrt"}
    other = ENV | {"packages": ENV["packages"] | {"torch": "2.13.0"}}
    assert fingerprint_differences(other, ENV, {"onnxruntime"}) == []
    assert fingerprint_differences(other, ENV) == ["packages.torch: '2.5' -> '2.13.0'"]
    gone = ENV | {"packages": {"onnxruntime": "1.20.0"}}     # torch not installed at all: still compared
    assert fingerprint_differences(gone, ENV, {"onnxruntime"}) == []
    plugin = SimpleNamespace(formats={"x": FormatStatus(format="x", runners={"r": RunnerStatus(runner="mine",
                                                                                               device="cpu")})})
    assert packages_used([plugin], ["x"]) is None       # an unknown runner: every runtime counts


def test_noise_margin():
    stable, unstable = ProfileStep(status="ok", stable=True), ProfileStep(status="ok", stable=False)
    policy = GatePolicy(require_formats=("onnx",), max_regression=0.05)
    assert regression_margin(policy, stable, stable) == (DEFAULT_NOISE_MARGIN, "default")
    assert regression_margin(policy, stable, unstable)[0] == UNSTABLE_NOISE_MARGIN
    fixed = GatePolicy(require_formats=("onnx",), max_regression=0.05, noise_margin=0.0)
    assert regression_margin(fixed, unstable, unstable) == (0.0, "policy noise_margin")
    # measured noise: the spreads of the two peaks' repeated windows, added
    now = ProfileStep(status="ok", stable=True, results=[ProfileResult(1, 100.0, spread=0.5),
                                                         ProfileResult(8, 400.0, spread=0.012)])
    then = ProfileStep(status="ok", stable=True, results=[ProfileResult(8, 390.0, spread=0.02)])
    assert regression_margin(policy, now, then) == (0.032, "spread of the repeated profiling windows")
    assert regression_margin(policy, now, stable) == (DEFAULT_NOISE_MARGIN, "default")   # no spread recorded


def test_best_throughput_only_counts_verified_profiled_runners():
    def runner(verify, results):
        return RunnerStatus(runner="onnxruntime", device="cpu", verify=VerifyStep(status=verify),
                            profile=ProfileStep(status="ok", results=[ProfileResult(b, t) for b, t in results]))

    fs = FormatStatus(format="onnx", runners={"a": runner("ok", [(1, 10.0), (2, 30.0)]),
                                              "b": runner("failed", [(1, 99.0)]),
                                              "c": runner("ok", [(1, 20.0), (4, 25.0)])})
    fs.convert.status = "ok"
    rk, r = best_throughput(fs)
    assert (rk, r.batch_size, r.throughput) == ("a", 2, 30.0)
    rk, r = best_throughput(fs, 1)
    assert (rk, r.throughput) == ("c", 20.0)
    assert best_throughput(fs, 8) is None


def _yaml_blocks(path) -> list[str]:
    import re

    return re.findall(r"```yaml\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_policies_and_workflow_are_valid():
    """docs/how-to/ci-gate.md and the help: the policies parse and the workflow gates with JUnit."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    docs = _yaml_blocks(root / "docs" / "how-to" / "ci-gate.md")
    policies = [b for b in docs if "require_formats" in b]
    assert len(policies) >= 2
    for text in policies:
        parse_policy(yaml.safe_load(text), source="docs")
    (workflow,) = [yaml.safe_load(b) for b in docs if "jobs:" in b]
    steps = workflow["jobs"]["gate"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "navigator convert" in runs and "navigator gate nav --policy gate.yaml --junit gate-junit.xml" in runs
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert any(s["with"]["path"] == "gate-junit.xml" and s["if"] == "always()" for s in uploads)
