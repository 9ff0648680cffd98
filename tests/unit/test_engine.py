"""navigator/engine.py: plan headers, the Triton <-> TensorRT table, verdicts, and
the check-engine command on synthetic plan headers (real plans: tests/functional/
test_tensorrt_rtx.py)."""

from __future__ import annotations

import json

import pytest

from navigator.tools import engine
from navigator.cli.main import main
from navigator.errors import UserInputError


def plan_bytes(magic=b"ftrt", version=(10, 4, 0, 26), extra=b"\x00" * 36) -> bytes:
    return magic + b"\x00" * 20 + bytes(version) + extra


def test_header_of_a_tensorrt_plan():
    h = engine.parse_header(plan_bytes(version=(10, 13, 3, 9)))
    assert (h.builder, h.version, h.magic) == ("tensorrt", (10, 13, 3, 9), "ftrt")
    assert h.version_text == "10.13.3.9" and h.display == "TensorRT 10.13.3.9" and h.compute_capabilities == ()


def test_header_of_a_tensorrt_rtx_plan_decodes_its_targets():
    extra = b"vtrt" + bytes([0b0001_1010]) + b"\x00" * 31    # SM80, SM89, SM120
    h = engine.parse_header(b"vtrt" + b"\x00" * 20 + bytes((1, 7, 1, 116)) + extra)
    assert h.builder == "tensorrt_rtx" and h.display == "TensorRT-RTX 1.7.1.116"
    assert h.compute_capabilities == ("SM80", "SM89", "SM120")


@pytest.mark.parametrize("data, match", [
    (b"ftrt" + b"\x00" * 10, "shorter than a plan header"),
    (b"ONNX" + b"\x00" * 40, "not a TensorRT plan"),
    (plan_bytes(version=(0, 0, 0, 0)), "no builder version"),
])
def test_header_errors(data, match):
    with pytest.raises(UserInputError, match=match):
        engine.parse_header(data)


def test_read_header_of_a_folder_and_a_missing_file(tmp_path):
    (tmp_path / "model.plan").write_bytes(plan_bytes())
    assert engine.read_header(tmp_path).size == len(plan_bytes())
    with pytest.raises(UserInputError, match="no such file"):
        engine.read_header(tmp_path / "nope.plan")


@pytest.mark.parametrize("text", ["24.09", "24.09-py3", "nvcr.io/nvidia/tritonserver:24.09-py3"])
def test_triton_release_spellings(text):
    r = engine.triton_release(text)
    assert (r.release, r.tensorrt, r.confirmed) == ("24.09", (10, 4, 0), True)


@pytest.mark.parametrize("text", ["24.13", "2409", "r24.09", "", "24.09-trtllm-python-py3"])
def test_triton_release_rejects(text):
    with pytest.raises(UserInputError):
        engine.triton_release(text)


def test_table_rows():
    rows = engine.triton_releases()
    assert rows[0].release == "23.01" and rows[-1].release >= "25.12"
    # months in order, TensorRT never goes backwards from one month to the next
    assert [r.release for r in rows] == sorted(r.release for r in rows)
    versions = [r.tensorrt for r in rows]
    assert versions == sorted(versions)
    table = {r.release: r.tensorrt for r in rows}
    assert table["25.01"] == (10, 8, 0) and table["24.05"] == (10, 0, 1) and table["24.03"] == (8, 6, 3)
    assert engine.triton_release("26.03").tensorrt is None          # exists, not in the table
    assert engine.releases_with((10, 4, 0, 26)) == ["24.09"]


def test_same_version_loads():
    v = engine.check(engine.parse_header(plan_bytes()), engine.triton_release("24.09"))
    assert v.status == "compatible" and v.exit_code == 0 and not v.cures


def test_other_version_fails_with_the_version_tag_error_and_its_cures():
    v = engine.check(engine.parse_header(plan_bytes(version=(10, 8, 0, 43))), engine.triton_release("24.09"),
                     key_dir="formats/tensorrt")
    assert v.status == "incompatible" and v.exit_code == 1
    assert "Version tag does not match" in v.summary and "TensorRT 10.8.0.43" in v.summary
    assert any("formats/tensorrt/reproduce.sh" in c and "tritonserver:24.09-py3" in c for c in v.cures)
    assert any("version-compatible=true" in c for c in v.cures)


def test_version_compatible_engines():
    older = engine.parse_header(plan_bytes(version=(10, 1, 0, 27)))
    v = engine.check(older, engine.triton_release("24.09"), version_compatible=True)
    assert v.status == "compatible" and any("version-compatible=true" in d for d in v.details)
    newer = engine.parse_header(plan_bytes(version=(10, 8, 0, 43)))
    assert engine.check(newer, engine.triton_release("24.09"), version_compatible=True).status == "incompatible"
    other_major = engine.parse_header(plan_bytes(version=(8, 6, 1, 6)))
    v = engine.check(other_major, engine.triton_release("24.09"), version_compatible=True)
    assert v.status == "incompatible" and "major" in v.summary


def test_patch_release_and_unknown_release_are_uncertain():
    patch = engine.parse_header(plan_bytes(version=(10, 13, 2, 6)))
    assert engine.check(patch, engine.triton_release("25.09")).status == "uncertain"
    v = engine.check(engine.parse_header(plan_bytes()), engine.triton_release("26.03"))
    assert v.status == "uncertain" and "libnvinfer" in " ".join(v.details)


def test_rtx_engines_never_load_in_the_tensorrt_backend():
    rtx = engine.parse_header(plan_bytes(magic=b"vtrt", version=(1, 7, 1, 116)))
    v = engine.check(rtx, engine.triton_release("24.09"))
    assert v.status == "incompatible" and "TensorRT-RTX" in v.summary


def test_check_engine_cli(tmp_path, capsys):
    plan = tmp_path / "model.plan"
    plan.write_bytes(plan_bytes())
    assert main(["check-engine", str(plan), "--triton", "24.09"]) == 0
    assert "Triton 24.09: loads" in capsys.readouterr().out
    assert main(["check-engine", str(plan), "--triton", "25.01"]) == 1
    out = capsys.readouterr().out
    assert "will NOT load" in out and "Version tag does not match" in out and "cures:" in out
    assert main(["check-engine", str(plan)]) == 0
    assert "24.09" in capsys.readouterr().out
    # engine.yaml beside the plan says it is version-compatible
    (tmp_path / "engine.yaml").write_text("version_compatible: true\n")
    assert main(["check-engine", str(tmp_path), "--triton", "25.01", "--json"]) == 0   # 10.4 plan, 10.8 server
    data = json.loads(capsys.readouterr().out)
    assert data["version_compatible"] is True and data["verdict"] == "compatible"
    assert data["builder_version"] == "10.4.0.26" and data["triton_tensorrt"] == "10.8.0"
    assert main(["check-engine", str(plan), "--triton", "24.13"]) == 2
    assert "YY.MM" in capsys.readouterr().err
