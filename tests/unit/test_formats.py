"""The format records (navigator/formats): each built-in format is fully described, and
every table that used to be spread over the tree now reads from them."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from navigator import formats
from navigator.converters.registry import registry as converters
from navigator.errors import UserInputError
from navigator.formats.descriptor import DEVICES
from navigator.formats.registry import DuplicateFormat, FormatRegistry
from navigator.runners.base import Runner
from navigator.triton import backends, python_backend

ALL = formats.all_formats()


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.name)
def test_every_format_is_fully_described(fmt):
    assert re.fullmatch(r"[a-z][a-z0-9_]*", fmt.name)
    assert fmt.artifact, "an artifact file name"
    for device in DEVICES:   # a runner, or an explicit "cannot be verified here: reason"
        assert fmt.runners_on(device) or fmt.unverifiable.get(device), (fmt.name, device)
    assert any(fmt.runners_on(d) for d in DEVICES), f"{fmt.name}: no runner on any device"
    # Triton: a backend, a Python-backend loader, or an explicit "not servable: reason"
    assert fmt.servable or fmt.not_servable, fmt.name
    assert not (fmt.serving and fmt.not_servable), fmt.name
    assert set(fmt.precisions) <= set(formats.PRECISIONS)
    for target in fmt.default_targets + fmt.cuda_default_targets:
        formats.parse_key(target.rstrip("?"))


@pytest.mark.parametrize("runner", sorted(formats.registry.runner_classes()))
def test_every_runner_names_a_real_runner_class(runner):
    module, _, name = formats.registry.runner_classes()[runner].partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Runner) and cls.name == runner


def test_every_runner_a_format_lists_has_a_class():
    classes = formats.registry.runner_classes()
    for fmt in ALL:
        for specs in fmt.runners.values():
            for spec in specs:
                assert spec.runner in classes, (fmt.name, spec.runner)


def test_every_debug_side_names_a_side_class():
    sides = {fmt.name: fmt.debug_side for fmt in ALL if fmt.debug_side}
    assert {"onnx", "openvino"} <= set(sides)
    for name, spec in sides.items():
        module, _, cls_name = spec.partition(":")
        cls = getattr(importlib.import_module(module), cls_name)
        assert callable(getattr(cls, "compared", None)) and isinstance(cls.graph, bool), name
    assert [n for n, spec in sides.items() if spec.endswith(":OnnxSide")] == ["onnx"]   # the one graph reference


def test_python_loaders_exist_in_the_model_py_template():
    tree = ast.parse(python_backend.template().replace(python_backend.PLACEHOLDER, "{}"))
    loaders = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "_LOADERS")
    keys = {k.value for k in loaders.value.keys}
    for fmt in ALL:
        if fmt.python_loader:
            assert fmt.python_loader in keys, fmt.name


def test_every_converter_edge_joins_registered_formats():
    for edge in converters.edges():
        for key in (edge.source, edge.target):
            formats.parse_key(key)


# edges that claim the CPU but cannot convert on a machine without a GPU, and why
NO_CPU_PATH = {"tf_trt": "TF-TRT needs TensorFlow built with TensorRT and a GPU"}


def test_every_edge_that_can_run_here_has_a_functional_test():
    """A functional test names the target of every edge a CPU machine can convert; the rest run
    on CUDA only (their converters say so) and are tested on a GPU machine."""
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1] / "functional"
    text = "".join(p.read_text() for p in sorted(tests.rglob("*.py")))
    untested = [f"{e.source} -> {e.target}" for e in converters.edges()
                if "cpu" in e.devices and formats.parse_key(e.target).format not in NO_CPU_PATH
                and not re.search(r"[\"' ,]%s[\"' ,]" % re.escape(e.target), text)]
    assert not untested, untested
    cuda_only = {e.target for e in converters.edges() if "cpu" not in e.devices}
    assert {"tensorrt-fp16", "torch_export-bf16", "aoti-fp16"} <= cuda_only


def test_serving_and_fixed_batch_read_the_records():
    assert backends.serving_for("onnx", python_backend=False, aoti_native=False).platform == "onnxruntime_onnx"
    assert backends.serving_for("torch_export", python_backend=False, aoti_native=False) is formats.PYTHON
    with pytest.raises(UserInputError, match="cannot be served by Triton: the eager PyTorch source"):
        backends.serving_for("torch", python_backend=False, aoti_native=False)
    assert backends.fixed_batch("tensorrt", "tensorrt_plan")
    assert not backends.fixed_batch("pytorch", "pytorch_libtorch")      # TorchScript shares it
    assert backends.fixed_batch("pytorch", "torch_aoti")
    assert formats.file_name("openvino") == "model.xml" and formats.get("openvino").companions == ("model.bin",)
    assert formats.preference_rank("tensorrt") < formats.preference_rank("onnx") < formats.preference_rank("torch")


def test_preference_is_a_total_order():
    """A variant before its plain key; equal preferences (a plugin's beside a built-in) by key name,
    whatever order the candidates come in."""
    import dataclasses
    from unittest import mock

    assert formats.preference_rank("onnx-optimized") < formats.preference_rank("onnx")
    reg = FormatRegistry(entry_point_group=None)
    reg.register(dataclasses.replace(formats.get("onnx"), name="ort", artifact="model.ort", check=None,
                                     debug_side=None, source_suffixes=(), runner_classes={}))
    assert reg.get("ort").preference == formats.get("onnx").preference
    with mock.patch("navigator.formats.registry.registry", reg):
        ranks = sorted(["ort", "onnx-fp16", "onnx", "ort-x", "onnx-x"], key=formats.preference_rank)
        assert ranks == ["onnx-x", "ort-x", "onnx", "onnx-fp16", "ort"]


def test_a_registry_refuses_duplicates_and_lists_the_known_formats():
    reg = FormatRegistry(entry_point_group=None)
    onnx = reg.get("onnx")
    reg.register(onnx)                      # the same record again: fine
    with pytest.raises(DuplicateFormat, match="already registered"):
        reg.register(formats.Format("onnx", "other.onnx"))
    with pytest.raises(DuplicateFormat, match="runner 'onnxruntime' is already"):
        reg.register(formats.Format("x", "x.bin", runner_classes={"onnxruntime": "elsewhere:Runner"}))
    with pytest.raises(UserInputError, match="unknown format 'nope'; formats: .*onnx"):
        reg.get("nope")
    reg.register(formats.Format("mine", "model.mine", runners={"cpu": (formats.RunnerSpec("mine_rt", "cpu"),)},
                                runner_classes={"mine_rt": "mod:MineRunner"}))
    assert reg.get("mine").artifact == "model.mine" and reg.runner_classes()["mine_rt"] == "mod:MineRunner"


def test_keys_need_a_registered_format():
    assert formats.parse_key("onnx-optimized-fp16") == formats.Key("onnx", "optimized", "fp16")
    with pytest.raises(UserInputError, match="not a format key"):
        formats.parse_key("nosuchformat-fp16")


def test_a_debug_side_that_cannot_be_loaded_is_one_line(monkeypatch):
    import dataclasses

    from navigator.tools import debug

    bad = dataclasses.replace(formats.get("onnx"), debug_side="no_such_module:Side")
    monkeypatch.setattr(formats, "get", lambda name: bad)
    with pytest.raises(UserInputError, match="debug_side 'no_such_module:Side' cannot be loaded"):
        debug._side("onnx")
