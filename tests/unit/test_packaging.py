"""The four code folders install as one package `navigator` (ARCHITECTURE.md)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPING = {"navigator": "navigator", "converters": "navigator.converters", "validators": "navigator.validators",
           "workspace": "navigator.workspace"}


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed():
    """A folder with __init__.py missing from `packages` silently drops out of the wheel."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    assert found == listed


def test_package_dir_mapping():
    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    assert mapping == {v: k for k, v in MAPPING.items()}


@pytest.mark.parametrize("bare", ["converters", "validators", "workspace"])
def test_bare_names_are_refused(bare):
    r = subprocess.run([sys.executable, "-c", f"import {bare}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0
    assert f"import it as 'navigator.{bare}'" in r.stderr


def test_console_script_and_module_entry():
    scripts = _pyproject()["project"]["scripts"]
    assert scripts == {"navigator": "navigator.cli.main:main"}
    r = subprocess.run([sys.executable, "-m", "navigator", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("navigator 0.")


def test_core_dependencies():
    deps = _pyproject()["project"]["dependencies"]
    names = {d.split("[")[0].split(">")[0].split("~")[0].split("=")[0] for d in deps}
    assert names == {"numpy", "pyyaml", "onnx", "onnx-graphsurgeon", "polygraphy", "protobuf", "tritonclient", "rich",
                     "jsonschema"}
    assert "polygraphy~=0.53.6" in deps
    extras = _pyproject()["project"]["optional-dependencies"]
    assert not any("onnxruntime" in d for d in extras["gpu"] if "gpu" not in d)
    assert {"cpu", "gpu", "torch", "tensorflow", "tensorrt", "openvino", "test"} <= set(extras)
