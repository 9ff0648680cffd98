"""Running a generated Triton Python-backend ``model.py`` in this process: a small fake
``triton_python_backend_utils`` (the module Triton's Python backend provides; only the
request/response plumbing: get_input_tensor_by_name, Tensor, InferenceResponse,
TritonError) and the initialize/execute calls Triton makes. A test double: the real
Python backend runs in the ``navigator serve`` tests."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from navigator.triton import config as cfg_mod


def fake_pb_utils() -> types.ModuleType:
    m = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name, array):
            self._name, self._array = name, array

        def name(self):
            return self._name

        def as_numpy(self):
            return self._array

    class TritonError(Exception):
        def message(self):
            return str(self)

    class InferenceResponse:
        def __init__(self, output_tensors, error=None):
            self._tensors, self._error = output_tensors, error

        def output_tensors(self):
            return self._tensors

        def has_error(self):
            return self._error is not None

        def error(self):
            return self._error

    class Request:                      # what Triton hands execute(); only read through get_input_tensor_by_name
        def __init__(self, tensors):
            self.tensors = {t.name(): t for t in tensors}

    m.Tensor, m.TritonError, m.InferenceResponse, m.Request = Tensor, TritonError, InferenceResponse, Request
    m.get_input_tensor_by_name = lambda request, name: request.tensors.get(name)
    return m


def load_model(model_dir: Path, version: int = 1):
    """Import <model>/<version>/model.py and initialize it as Triton would (args of the Python backend)."""
    cfg = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    path = model_dir / str(version) / "model.py"
    spec = importlib.util.spec_from_file_location(f"triton_model_{model_dir.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(cfg_mod.as_dict(cfg)), "model_repository": str(model_dir),
                      "model_version": str(version), "model_name": model_dir.name, "model_instance_kind": "CPU",
                      "model_instance_device_id": "0", "model_instance_name": f"{model_dir.name}_0"})
    return model, cfg


def infer(pb_utils, model, feeds: dict) -> dict:
    request = pb_utils.Request([pb_utils.Tensor(k, v) for k, v in feeds.items()])
    [response] = model.execute([request])
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}
