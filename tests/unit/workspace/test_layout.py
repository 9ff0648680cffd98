"""The workspace folder: model-name sanitising, finding a workspace, paths inside it."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from navigator.errors import UserInputError
from navigator.workspace.layout import MAX_NAME_LENGTH, SUFFIX, Workspace, sanitize_model_name


@pytest.mark.parametrize("name, expected", [
    ("../../etc/passwd", "etc_passwd"),
    ("ünïcødé name", "unicde_name"),     # accents fold to ASCII; ø has no ASCII form and is dropped
    ("a/b\\c", "a_b_c"),
    ("résumé.v2", "resume.v2"),
    ("-_a__b-_", "a_b"),
    ("bert-base  (uncased)", "bert-base_uncased"),
    ("ﬁle", "file"),                     # NFKD compatibility fold of the ligature
])
def test_sanitize_model_name(name, expected):
    assert sanitize_model_name(name) == expected


@pytest.mark.parametrize("name", ["", "...", "/", "../..", "日本語", " \t\n"])
def test_sanitize_model_name_without_usable_characters(name):
    with pytest.raises(UserInputError, match="has no usable characters") as info:
        sanitize_model_name(name)
    assert info.value.hint == "pass --model-name with letters or digits"


def test_long_names_are_cut_and_kept_apart():
    a = sanitize_model_name("x" * 300 + "a")
    b = sanitize_model_name("x" * 300 + "b")
    assert len(a) == len(b) == MAX_NAME_LENGTH
    assert a != b
    assert re.fullmatch(r"x{91}-[0-9a-f]{8}", a)
    assert sanitize_model_name("x" * 300 + "a") == a                      # stable
    assert sanitize_model_name("y" * MAX_NAME_LENGTH) == "y" * MAX_NAME_LENGTH  # not cut at the limit
    # the cut never leaves a separator before the hash
    assert re.fullmatch(r"a{90}-[0-9a-f]{8}", sanitize_model_name("a" * 90 + "._" + "b" * 50))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text())
def test_for_model_never_leaves_the_workdir(tmp_path, name):
    workdir = tmp_path / "work"
    try:
        ws = Workspace.for_model(workdir, name)
    except UserInputError as e:
        assert "has no usable characters" in str(e)
        return
    assert ws.root.parent == workdir.resolve()
    assert ws.root.name.endswith(SUFFIX)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", ws.name)
    assert len(ws.name) <= MAX_NAME_LENGTH
    assert not workdir.exists()  # creating the object writes nothing


def test_for_model_refuses_a_symlink_that_leads_out(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (workdir / f"m{SUFFIX}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserInputError, match="would write outside"):
        Workspace.for_model(workdir, "m")


def _make_ws(folder):
    folder.mkdir(parents=True)
    (folder / "status.yaml").write_text("schema_version: 1\n")
    return folder


def test_find_a_workspace_path(tmp_path):
    root = _make_ws(tmp_path / f"m{SUFFIX}")
    assert Workspace.find(root).root == root.resolve()
    assert Workspace.find(str(root)).name == "m"


def test_find_in_a_workdir_with_one_workspace(tmp_path):
    root = _make_ws(tmp_path / f"m{SUFFIX}")
    (tmp_path / f"half{SUFFIX}").mkdir()           # no status.yaml: not a workspace
    (tmp_path / "other").mkdir()
    assert Workspace.find(tmp_path).root == root.resolve()


def test_find_in_a_workdir_with_two_workspaces(tmp_path):
    _make_ws(tmp_path / f"b{SUFFIX}")
    _make_ws(tmp_path / f"a{SUFFIX}")
    with pytest.raises(UserInputError) as info:
        Workspace.find(tmp_path)
    assert f"holds 2 workspaces (a{SUFFIX}, b{SUFFIX}); name one of them" in str(info.value)


def test_find_all(tmp_path):
    b = _make_ws(tmp_path / f"b{SUFFIX}")
    a = _make_ws(tmp_path / f"a{SUFFIX}")
    (tmp_path / f"half{SUFFIX}").mkdir()           # no status.yaml: not a workspace
    assert [ws.root for ws in Workspace.find_all(tmp_path)] == [a.resolve(), b.resolve()]
    assert [ws.root for ws in Workspace.find_all(a)] == [a.resolve()]
    with pytest.raises(UserInputError, match="not a Navigator workspace"):
        Workspace.find_all(tmp_path / f"half{SUFFIX}")


def test_find_in_a_folder_with_no_workspace(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(UserInputError, match="not a Navigator workspace"):
        Workspace.find(tmp_path)


def test_find_a_missing_path(tmp_path):
    with pytest.raises(UserInputError, match="no such workspace or workdir"):
        Workspace.find(tmp_path / "missing")


def test_root_is_always_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ws = Workspace(f"m{SUFFIX}")
    assert ws.root == tmp_path.resolve() / f"m{SUFFIX}"
    assert ws.abs("formats/onnx/model.onnx") == ws.root / "formats" / "onnx" / "model.onnx"
    assert ws.rel(ws.format_dir("onnx") / "model.onnx") == os.path.join("formats", "onnx", "model.onnx")


def test_paths_inside(tmp_path):
    ws = Workspace(tmp_path / f"m{SUFFIX}")
    assert ws.status_path == ws.root / "status.yaml"
    assert ws.lock_path == ws.root / "navigator.lock"
    assert ws.sample_file("inputs", 7) == ws.root / "samples" / "inputs" / "007.npz"
    assert ws.outputs_dir("onnx", "onnxruntime-cpu") == ws.root / "formats" / "onnx" / "outputs" / "onnxruntime-cpu"


@pytest.mark.parametrize("rel", ["../x", "formats/../../x", "/etc/passwd", ".."])
def test_abs_refuses_paths_outside(tmp_path, rel):
    ws = Workspace(tmp_path / f"m{SUFFIX}")
    with pytest.raises(UserInputError, match="points outside the workspace"):
        ws.abs(rel)


def test_abs_accepts_paths_inside(tmp_path):
    ws = Workspace(tmp_path / f"m{SUFFIX}")
    assert ws.abs(".") == ws.root
    assert ws.abs("formats/../samples/x.npz") == ws.root / "samples" / "x.npz"
