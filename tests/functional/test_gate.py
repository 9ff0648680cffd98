"""`navigator gate` on real workspaces from real runs: a policy met (exit 0), thresholds
missed (exit 1 with JUnit failures), a malformed policy (exit 2), a regression
against a baseline, a model converted first, and `result.gate()` in the API."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from ..conftest import FAST, models

pytestmark = pytest.mark.functional

GOOD = {"require_formats": ["onnx", "onnx-optimized"],
        "outputs": {"logits": {"mode": "tolerance", "atol": 1.0e-4, "rtol": 1.0e-3}},
        "min_throughput": {"onnx": 10, "onnx-optimized": {"batch_size": 1, "value": 10}},
        "max_p99_ms": {"onnx": 1000.0, "onnx-optimized": {"batch_size": 1, "value": 1000.0}}}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    import navigator

    tmp = tmp_path_factory.mktemp("gate")
    model = models.save(models.token_classifier(), tmp / "token_classifier.onnx")
    result = navigator.convert(model, workdir=tmp / "wd", targets=["onnx", "onnx-optimized"], device="cpu",
                               profile_budget_s=1, max_batch_size=4)
    assert result.ok, result.failures
    return result.workspace


@pytest.fixture
def ws_copy(workspace, tmp_path):
    """A copy of the shared workspace that a test may change."""
    def copy(name: str = "copy") -> Path:
        dest = tmp_path / name / workspace.name
        shutil.copytree(workspace, dest)
        return dest

    return copy


def _policy(tmp_path, data, name="gate.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if isinstance(data, dict) else data)
    return path


def _junit(path: Path):
    suite = ET.parse(path).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    return suite, cases


def test_policy_met_exits_0(cli, workspace, tmp_path):
    r = cli("gate", workspace.parent, "--policy", _policy(tmp_path, GOOD), "--junit", tmp_path / "out" / "gate.xml",
            "--markdown", tmp_path / "out" / "gate.md")          # a workdir holding the workspace
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gate passed" in r.stdout
    suite, cases = _junit(tmp_path / "out" / "gate.xml")
    assert suite.get("name") == "navigator-gate" and suite.get("failures") == "0"
    assert int(suite.get("tests")) == len(cases) >= 10
    kinds = {c.get("classname") for c in cases.values()}
    assert {"navigator.gate.workspace", "navigator.gate.format", "navigator.gate.tolerance",
            "navigator.gate.throughput", "navigator.gate.latency"} <= kinds
    assert "onnx-optimized [onnxruntime-cpu] probs" in cases        # outputs the policy does not name, too
    report = json.loads((workspace / "report" / "gate.json").read_text())
    assert report["passed"] is True and report["counts"]["failed"] == 0
    tol = next(c for c in report["checks"] if c["name"] == "onnx [onnxruntime-cpu] logits")
    assert tol["details"]["rule_from"] == "policy" and tol["details"]["atol"] == 1e-4
    assert tol["details"]["comparisons"] == 4                        # 2 samples x batch sizes 1 and 8
    assert (tmp_path / "out" / "gate.md").read_text().startswith("## Navigator gate: ✅ passed")


def test_thresholds_missed_exit_1_with_junit_failures(cli, ws_copy, tmp_path):
    import numpy as np

    from navigator.workspace import npz

    ws = ws_copy()
    # status.yaml still says every output passed: the gate must re-compare the stored outputs
    stored = ws / "formats" / "onnx" / "outputs" / "onnxruntime-cpu" / "001-bs1.npz"
    outputs = npz.load(stored)
    npz.save(stored, outputs | {"logits": outputs["logits"] + np.float32(1e-2)})
    policy = {"require_formats": ["onnx", "onnx-optimized", "openvino"],
              "outputs": {"logits": {"atol": 1e-4, "rtol": 1e-3}},
              "min_throughput": {"onnx": 1e12, "onnx-optimized": {"batch_size": 64, "value": 1}},
              "max_p99_ms": {"onnx-optimized": {"batch_size": 1, "value": 1e-9}}}
    r = cli("gate", ws, "--policy", _policy(tmp_path, policy), "--junit", tmp_path / "gate.xml")
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: gate failed: 5 of ") and "Traceback" not in r.stderr
    suite, cases = _junit(tmp_path / "gate.xml")
    failed = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failed == {"openvino converted and verified",
                      "onnx [onnxruntime-cpu] logits",
                      "onnx throughput >= 1e+12/s at the best batch size",
                      "onnx-optimized throughput >= 1/s at batch 64",
                      "onnx-optimized p99 latency <= 1e-09 ms at batch 1"}
    assert suite.get("failures") == str(len(failed)) == "5"
    msg = {name: cases[name].find("failure").get("message") for name in failed}
    assert "is not in the workspace" in msg["openvino converted and verified"]
    assert "exceed atol 0.0001 / rtol 0.001" in msg["onnx [onnxruntime-cpu] logits"]
    assert "(sample 001, batch 1)" in msg["onnx [onnxruntime-cpu] logits"]
    assert "not profiled at batch 64 (profiled: 1" in msg["onnx-optimized throughput >= 1/s at batch 64"]
    assert "< 1e+12/s" in msg["onnx throughput >= 1e+12/s at the best batch size"]
    # the untouched output and format still pass
    assert cases["onnx [onnxruntime-cpu] probs"].find("failure") is None
    assert cases["onnx-optimized [onnxruntime-cpu] logits"].find("failure") is None
    assert json.loads((ws / "report" / "gate.json").read_text())["passed"] is False


def test_malformed_policy_exits_2(cli, workspace, tmp_path):
    for text, names in (("require_formats: [onnx]\nmin_thruput: {onnx: 5}\n", ["min_thruput"]),
                        ("require_formats: [onnx]\noutputs: {logitz: {atol: 1.0e-3}}\n", ["outputs.logitz",
                                                                                         "'logits'"]),
                        ("require_formats: [onnx\n", ["not valid YAML"])):
        r = cli("gate", workspace, "--policy", _policy(tmp_path, text), "--junit", tmp_path / "never.xml")
        assert r.returncode == 2, r.stdout + r.stderr
        line = r.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, line
        for name in names:
            assert name in line, line
        assert not (tmp_path / "never.xml").exists()
    r = cli("gate", workspace, "--policy", _policy(tmp_path, GOOD), "--baseline", workspace)
    assert r.returncode == 2 and "has no max_regression" in r.stderr


def _scale_throughput(ws: Path, factor: float, **environment) -> None:
    path = ws / "status.yaml"
    st = yaml.safe_load(path.read_text())
    for fmt in st["formats"].values():
        for runner in fmt["runners"].values():
            for res in runner["profile"]["results"]:
                res["throughput"] *= factor
    st["environment"].update(environment)
    path.write_text(yaml.safe_dump(st, sort_keys=False))


def test_regression_against_a_baseline(ws_copy, workspace, tmp_path, capsys):
    from navigator.cli.main import main

    policy = _policy(tmp_path, {"require_formats": ["onnx", "onnx-optimized"], "max_regression": 0.05,
                                "noise_margin": 0.03})
    junit = tmp_path / "gate.xml"
    # the baseline was 2x faster: a 50% drop
    slow = ws_copy("twice")
    _scale_throughput(slow, 2.0)
    assert main(["gate", str(workspace), "--policy", str(policy), "--baseline", str(slow), "--junit",
                 str(junit)]) == 1
    _, cases = _junit(junit)
    failure = cases["onnx throughput regression <= 0.05 vs baseline"].find("failure")
    assert failure is not None and "-50.0%; allowed drop 8.0% (5.0% + noise margin 3.0%" in failure.get("message")
    # 1.06x: a 5.7% drop is inside max_regression + the noise margin; 1.10x (9.1%) is not
    near = ws_copy("near")
    _scale_throughput(near, 1.06)
    assert main(["gate", str(workspace), "--policy", str(policy), "--baseline", str(near)]) == 0
    far = ws_copy("far")
    _scale_throughput(far, 1.10)
    assert main(["gate", str(workspace), "--policy", str(policy), "--baseline", str(far)]) == 1
    # another machine: not compared, reported as skipped with the reason
    other = ws_copy("other")
    _scale_throughput(other, 2.0, cpu_count=1024)
    assert main(["gate", str(workspace), "--policy", str(policy), "--baseline", str(other), "--junit",
                 str(junit)]) == 0
    suite, cases = _junit(junit)
    skipped = cases["onnx throughput regression <= 0.05 vs baseline"].find("skipped")
    assert skipped is not None and "cpu_count: 1024 -> " in skipped.get("message")
    regressions = [c for name, c in cases.items() if "throughput regression" in name]
    assert [c.find("skipped") is not None for c in regressions] == [True, True] and suite.get("failures") == "0"
    capsys.readouterr()
    # another model's workspace is no baseline: one error line, not a passed regression check
    for edit, needle in ((lambda st: st["model"].__setitem__("name", "resnet"), "model 'resnet'"),
                         (lambda st: st["signature"]["outputs"][0].__setitem__("name", "scores"),
                          "another interface")):
        lie = ws_copy(needle.split()[0].strip("'"))
        st = yaml.safe_load((lie / "status.yaml").read_text())
        edit(st)
        (lie / "status.yaml").write_text(yaml.safe_dump(st, sort_keys=False))
        assert main(["gate", str(workspace), "--policy", str(policy), "--baseline", str(lie)]) == 2
        err = capsys.readouterr().err
        assert needle in err and "earlier run of the same model" in err


def test_gate_a_model_converts_first(cli, tmp_path):
    model = models.save(models.foldable_mlp(), tmp_path / "mlp.onnx")
    policy = _policy(tmp_path, {"require_formats": ["onnx-optimized"], "min_throughput": {"onnx-optimized": 1}})
    r = cli("gate", model, "--policy", policy, "--workdir", tmp_path / "wd", *FAST, "--markdown",
            tmp_path / "gate.md")
    assert r.returncode == 0, r.stdout + r.stderr
    st = yaml.safe_load((tmp_path / "wd" / "mlp.nav.workspace" / "status.yaml").read_text())
    assert list(st["formats"]) == ["onnx", "onnx-optimized"]         # the policy's formats, not the defaults
    assert "onnx-optimized throughput >= 1/s" in (tmp_path / "gate.md").read_text()
    # a typo in the policy's outputs is refused before converting
    bad = _policy(tmp_path, {"require_formats": ["onnx"], "outputs": {"z": {"atol": 1}}}, "bad.yaml")
    r = cli("gate", model, "--policy", bad, "--workdir", tmp_path / "wd2", *FAST)
    assert r.returncode == 2 and "outputs.z" in r.stderr and not (tmp_path / "wd2").exists()
    r = cli("gate", tmp_path / "nothing-here", "--policy", policy)
    assert r.returncode == 2 and "no such workspace, workdir or model" in r.stderr


def test_api_gate(workspace, tmp_path):
    import navigator
    from navigator.errors import GateFailed, UserInputError

    result = navigator.load(workspace)
    gate = result.gate(GOOD, junit=tmp_path / "api.xml")
    assert gate.passed and all(c.passed for c in gate.checks) and (tmp_path / "api.xml").is_file()
    strict = dict(GOOD, min_throughput={"onnx": 1e15})
    gate = result.gate(strict)
    assert not gate.passed and [c.kind for c in gate.failures] == ["throughput"]
    with pytest.raises(GateFailed, match="onnx throughput"):
        result.gate(strict, raise_on_failure=True)
    with pytest.raises(UserInputError, match="require_formatz"):
        result.gate({"require_formatz": ["onnx"]})
    path = _policy(tmp_path, GOOD)
    assert result.gate(str(path)).passed


def test_gate_every_workspace_of_a_workdir(cli, workspace, tmp_path):
    """A workdir holding several workspaces (navigator convert-many's): each gated with the same
    policy, one JUnit file with a suite per workspace, outputs applied where the model has them,
    a baseline workdir matched by workspace name."""
    import navigator

    from ..conftest import one_line_error

    workdir = tmp_path / "zoo"
    shutil.copytree(workspace, workdir / workspace.name)
    other = models.save(models.foldable_mlp(), tmp_path / "foldable_mlp.onnx")      # output y, not logits
    assert navigator.convert(other, workdir=workdir, targets=["onnx", "onnx-optimized"], device="cpu",
                             profile_budget_s=1, max_batch_size=4).ok
    policy = _policy(tmp_path, {**GOOD, "max_regression": 0.5})
    r = cli("gate", workdir, "--policy", policy, "--junit", tmp_path / "out.xml", "--markdown", tmp_path / "out.md")
    assert r.returncode == 0, r.stdout + r.stderr
    root = ET.parse(tmp_path / "out.xml").getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"navigator-gate.token_classifier", "navigator-gate.foldable_mlp"}
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites.values())
    names = {c.get("name") for c in suites["navigator-gate.foldable_mlp"].findall("testcase")}
    assert not any("logits" in n for n in names) and any(n.endswith("] y") for n in names)
    assert any(n.endswith("] logits") for n in
               (c.get("name") for c in suites["navigator-gate.token_classifier"].findall("testcase")))
    classes = {c.get("classname") for c in suites["navigator-gate.foldable_mlp"].findall("testcase")}
    assert "navigator.gate.foldable_mlp.tolerance" in classes
    for ws in workdir.glob("*.nav.workspace"):
        assert json.loads((ws / "report" / "gate.json").read_text())["passed"] is True
    md = (tmp_path / "out.md").read_text()
    assert "### token_classifier: ✅ passed" in md and "### foldable_mlp: ✅ passed" in md

    # a bound one model misses fails the whole gate, and says which
    tight = _policy(tmp_path, {"require_formats": ["onnx"], "min_throughput": {"onnx": 1e12}}, "tight.yaml")
    r = cli("gate", workdir, "--policy", tight, "--junit", tmp_path / "out.xml")
    assert r.returncode == 1 and "2 of 2 workspaces failed" in r.stderr
    assert ET.parse(tmp_path / "out.xml").getroot().get("failures") == "2"
    # an output no model has is still a typo
    one_line_error(cli("gate", workdir, "--policy", _policy(tmp_path, {"require_formats": ["onnx"],
                                                                        "outputs": {"logitz": "exact"}}, "typo.yaml")),
                   "logitz")
    # the baseline is the earlier run's workdir; a workspace missing there skips its regression check
    base = tmp_path / "base"
    shutil.copytree(workspace, base / workspace.name)
    r = cli("gate", workdir, "--policy", policy, "--baseline", base, "--junit", tmp_path / "out.xml")
    assert r.returncode == 0, r.stdout + r.stderr
    fold = json.loads((workdir / "foldable_mlp.nav.workspace" / "report" / "gate.json").read_text())
    reg = [c for c in fold["checks"] if c["kind"] == "regression"]
    assert reg and all(c["status"] == "skipped" and "no workspace foldable_mlp in the baseline" in c["message"]
                       for c in reg)
    tok = json.loads((workdir / workspace.name / "report" / "gate.json").read_text())
    assert any(c["kind"] == "regression" and c["status"] == "passed" for c in tok["checks"])
    one_line_error(cli("gate", workdir, "--policy", policy, "--baseline", base / workspace.name),
                   "a single workspace")
