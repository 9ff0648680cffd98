"""Shared part of navigator's CPU stand-ins for Triton's C++ backends.

TEST DOUBLES, NOT NVIDIA'S BACKENDS. ``navigator serve --cpu-backends`` puts
``onnxruntime/model.py`` and ``openvino/model.py`` into the server's private
backend directory. Triton uses a folder ``<backend_dir>/<name>/model.py``
without a ``libtriton_<name>.so`` as a *Python-based backend* (run by the
Python backend), so the unchanged native ``config.pbtxt`` files navigator emits
(``backend: "onnxruntime"`` / ``"openvino"``) load and serve on a machine whose
Triton build has only the Python backend. They exist for quick local checks
and tests; performance, threading, GPU execution and every backend parameter
are not modelled: deploy with the real backends.

Like the real backends they check the model against its configuration at
load: the file (``default_model_filename``), input/output names, data types
and dims, including the implicit batch dimension when ``max_batch_size > 0``
(the model's first dimension must then be variable). A mismatch fails the
load with a message naming the tensor.
"""

import json
import os

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:          # imported outside Triton (unit tests of the checks)
    pb_utils = None

NUMPY = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


class ModelConfigMismatch(Exception):
    """The model file does not match config.pbtxt (the load fails)."""


def log(message):
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        try:
            logger.log_info(message)
            return
        except Exception:
            pass
    print(message, flush=True)


def config_tensors(config, key):
    """[(name, data_type, dims)] of config["input"|"output"]; dims as the model sees them
    (``reshape`` applied), without the batch dimension."""
    out = []
    for t in config.get(key, []) or []:
        dims = t.get("reshape", {}).get("shape") if t.get("reshape") else None
        if dims is None:
            dims = t.get("dims", [])
        out.append((t["name"], t.get("data_type", "TYPE_INVALID"), [int(d) for d in dims]))
    return out


def _shape(dims):
    return "[" + ",".join(str(d) for d in dims) + "]"


def check(model_name, backend, config, model_inputs, model_outputs, input_count=None):
    """Raise ModelConfigMismatch unless config agrees with the model.

    ``model_inputs``/``model_outputs``: {name: (data_type, dims)} with the
    model's dims (-1 for a variable dimension), data types as Triton names;
    ``input_count`` when a model input has several names (OpenVINO)."""
    batching = int(config.get("max_batch_size", 0) or 0) > 0
    head = "%s stand-in: model '%s'" % (backend, model_name)
    cfg_inputs = config_tensors(config, "input")
    count = len(model_inputs) if input_count is None else input_count
    if len(cfg_inputs) != count:
        raise ModelConfigMismatch("%s: the configuration expects %d inputs, the model provides %d (%s)"
                                  % (head, len(cfg_inputs), count, ", ".join(model_inputs)))
    for kind, cfg_list, model_map in (("input", cfg_inputs, model_inputs),
                                      ("output", config_tensors(config, "output"), model_outputs)):
        for name, dtype, dims in cfg_list:
            if name not in model_map:
                raise ModelConfigMismatch("%s: unexpected %s '%s' in the configuration; the model's %ss are: %s"
                                          % (head, kind, name, kind, ", ".join(model_map) or "none"))
            model_dtype, model_dims = model_map[name]
            if model_dtype != dtype:
                raise ModelConfigMismatch("%s: %s '%s' is %s in the model but %s in the configuration"
                                          % (head, kind, name, model_dtype, dtype))
            if model_dims is None:       # rank unknown: nothing more to check
                continue
            full = ([-1] if batching else []) + list(dims)
            if batching and (not model_dims or model_dims[0] != -1):
                raise ModelConfigMismatch(
                    "%s: max_batch_size > 0 but the first dimension of %s '%s' is not variable in the model "
                    "(model shape %s)" % (head, kind, name, _shape(model_dims)))
            ok = len(full) == len(model_dims) and all(m == -1 or m == c for m, c in zip(model_dims, full))
            if not ok:
                raise ModelConfigMismatch(
                    "%s: %s '%s': the model expects shape %s but the configuration gives %s%s"
                    % (head, kind, name, _shape(model_dims), _shape(full),
                       " (the batch dimension of max_batch_size > 0, then dims)" if batching else ""))


def model_path(args, config, default_file):
    """<model_repository>/<version>/<default_model_filename or default_file>."""
    name = config.get("default_model_filename") or default_file
    path = os.path.join(args["model_repository"], str(args["model_version"]), name)
    if not os.path.exists(path):
        raise ModelConfigMismatch("model '%s': unable to find '%s' (default_model_filename %s)"
                                  % (args["model_name"], path, name))
    return path


class StandinModel:
    """TritonPythonModel of a stand-in: subclasses set BACKEND and implement load(path)
    returning (inputs, outputs, run) where run(feeds) -> {name: array}."""

    BACKEND = ""
    DEFAULT_FILE = ""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        name = args["model_name"]
        path = self.resolve(args, config)
        inputs, outputs, self.run, version = self.load(path)
        check(name, self.BACKEND, config, inputs, outputs, getattr(self, "input_count", None))
        self.inputs = [n for n, _, _ in config_tensors(config, "input")]
        self.outputs = [n for n, _, _ in config_tensors(config, "output")]
        log("navigator CPU stand-in for Triton's %s backend (a test double, not NVIDIA's backend): "
            "model '%s' loaded from %s with %s" % (self.BACKEND, name, path, version))

    def resolve(self, args, config):
        return model_path(args, config, self.DEFAULT_FILE)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                feeds = {}
                for name in self.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is None:
                        raise ValueError("the request has no input '%s'" % name)
                    feeds[name] = tensor.as_numpy()
                results = self.run(feeds)
                tensors = [pb_utils.Tensor(name, np.ascontiguousarray(results[name])) for name in self.outputs]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError("%s: %s" % (type(e).__name__, e))))
        return responses

    def finalize(self):
        self.run = None
