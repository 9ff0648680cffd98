"""navigator's CPU stand-ins for Triton's ``onnxruntime`` and ``openvino`` backends.

TEST DOUBLES, NOT NVIDIA'S BACKENDS. ``navigator serve --cpu-backends`` copies
this one file as ``<backend_dir>/onnxruntime/model.py`` and
``<backend_dir>/openvino/model.py`` into the server's private backend
directory; the folder it sits in says which backend it stands in for. Triton
uses a folder ``<backend_dir>/<name>/model.py`` without a
``libtriton_<name>.so`` as a *Python-based backend* (run by the Python
backend), so the unchanged native ``config.pbtxt`` files navigator emits
(``backend: "onnxruntime"`` / ``"openvino"``, or platform ``onnxruntime_onnx``)
load and serve on a machine whose Triton build has only the Python backend.
They exist for quick local checks and tests; performance, threading and GPU
execution are not modelled: deploy with the real backends. A stateful model's
implicit state (``sequence_batching.state``) is kept here per correlation id,
its initial state (zeros, or initial_state's data_file) at a sequence's START flag and forgotten at its END: the
Python backend has no implicit state of its own, so the stand-in does what the onnxruntime
backend does with Triton's state. What changes the
numbers is modelled as the real backends do it: onnxruntime's graph optimisation
level (``optimization.graph.level``: -1 basic, 1 extended, 2 disabled, else all)
and OpenVINO's inference precision, which that backend cannot pin to f32 (only
``HINT_BF16: YES`` asks for bf16): the CPU plugin's default, bf16 on a CPU that has
it. Each prints a line saying it is a stand-in into the server log.

Like the real backends they check the model against its configuration at
load: the file (``default_model_filename``; ONNX: ``model.onnx``, or
``model.onnx/model.onnx`` when that is a folder for external data; OpenVINO:
``model.xml``), input/output names, data types and dims, including the
implicit batch dimension when ``max_batch_size > 0`` (the model's first
dimension must then be variable). A mismatch fails the load with a message
naming the tensor.
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


def config_states(config):
    """[(input name, output name, data_type, dims)] of sequence_batching.state: the implicit state the
    sequence batcher keeps (Triton sets it at a sequence's start: initial_state zero_data or data_file)."""
    out = []
    for st in (config.get("sequence_batching") or {}).get("state", []) or []:
        out.append((st["input_name"], st["output_name"], st.get("data_type", "TYPE_INVALID"),
                    [int(d) for d in st.get("dims", [])]))
    return out


def initial_states(config, model_dir):
    """{state input: array} of the initial states given as ``data_file`` (in the model's
    ``initial_state/`` folder, as Triton reads them: raw row-major values of the state's type and
    dims); zero_data states are absent. A file that is not a regular file of the right size is refused."""
    import stat

    out = {}
    for st in (config.get("sequence_batching") or {}).get("state", []) or []:
        for init in st.get("initial_state", []) or []:
            name = init.get("data_file")
            if not name:
                continue
            dims = [int(d) for d in init.get("dims", st.get("dims", []))]
            dtype = np.dtype(NUMPY.get(st.get("data_type"), np.float32))
            path = os.path.join(model_dir, "initial_state", name)
            want = int(np.prod(dims)) * dtype.itemsize
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                raise ModelConfigMismatch("initial state of '%s': cannot read %s (%s)"
                                          % (st["input_name"], path, e)) from e
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_size != want:
                    raise ModelConfigMismatch("initial state of '%s': %s must be a regular file of %d bytes (dims %s)"
                                              % (st["input_name"], path, want, dims))
                data = os.read(fd, want)
            finally:
                os.close(fd)
            out[st["input_name"]] = np.frombuffer(data, dtype=dtype).reshape(dims).copy()
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
    states = config_states(config)
    count = len(model_inputs) if input_count is None else input_count
    # as the onnxruntime backend counts them: the configuration's inputs and its implicit states
    if len(cfg_inputs) + len(states) != count:
        raise ModelConfigMismatch("%s: the configuration expects %d inputs, the model provides %d (%s)"
                                  % (head, len(cfg_inputs) + len(states), count, ", ".join(model_inputs)))
    io_names = {n for n, _, _ in cfg_inputs} | {n for n, _, _ in config_tensors(config, "output")}
    for name, output_name, dtype, _dims in states:
        for tname in (name, output_name):
            if tname in io_names:
                raise ModelConfigMismatch("%s: state tensor '%s' is also an input or output of the configuration"
                                          % (head, tname))
        for kind, table, tname in (("input", model_inputs, name), ("output", model_outputs, output_name)):
            if tname not in table:
                raise ModelConfigMismatch("%s: state %s '%s' is not a model %s" % (head, kind, tname, kind))
            if table[tname][0] != dtype:
                raise ModelConfigMismatch("%s: state '%s' is %s in the configuration but %s in the model"
                                          % (head, tname, dtype, table[tname][0]))
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
            if not batching and not model_dims and all(d == 1 for d in dims):
                continue   # a rank-0 model tensor is dims [1] without batching (the backend feeds a scalar)
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
        self.config = config
        inputs, outputs, self.run, version = self.load(path)
        check(name, self.BACKEND, config, inputs, outputs, getattr(self, "input_count", None))
        self.inputs = [n for n, _, _ in config_tensors(config, "input")]
        self.outputs = [n for n, _, _ in config_tensors(config, "output")]
        # rank-0 model inputs arrive as [1] (dims [1] without batching): fed as scalars
        self.scalars = {n for n, (_, dims) in inputs.items() if dims == []}
        self.states = config_states(config)
        self.batching = int(config.get("max_batch_size", 0) or 0) > 0
        self.initial = initial_states(config, args["model_repository"])
        self.sequences = {}    # correlation id -> {state input: array}: the implicit state of each sequence
        log("navigator CPU stand-in for Triton's %s backend (a test double, not NVIDIA's backend): "
            "model '%s' loaded from %s with %s" % (self.BACKEND, name, path, version))

    def resolve(self, args, config):
        return model_path(args, config, self.DEFAULT_FILE)

    def _state(self, request, feeds):
        """Implicit state, kept here per correlation id since the Python backend has none of its own
        (Triton's core hands it no state to update): its initial state at a sequence's start, then each step's
        state output; forgotten at its end."""
        corrid = request.correlation_id()
        start = bool(request.flags() & getattr(pb_utils, "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", 1))
        if start or corrid not in self.sequences:
            self.sequences[corrid] = {
                name: (self.initial[name][None] if self.batching else self.initial[name]) if name in self.initial
                else np.zeros(([1] if self.batching else []) + dims, NUMPY.get(dtype, np.float32))
                for name, _, dtype, dims in self.states}
        feeds.update(self.sequences[corrid])
        return corrid

    def _keep_state(self, request, corrid, results):
        if request.flags() & getattr(pb_utils, "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END", 2):
            self.sequences.pop(corrid, None)
        else:
            self.sequences[corrid] = {name: results[output] for name, output, _, _ in self.states}

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
                    if name in self.scalars and not self.batching:
                        feeds[name] = feeds[name].reshape(())
                corrid = self._state(request, feeds) if self.states else None
                results = self.run(feeds)
                if self.states:
                    self._keep_state(request, corrid, results)
                tensors = [pb_utils.Tensor(name, np.ascontiguousarray(results[name])) for name in self.outputs]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as e:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError("%s: %s" % (type(e).__name__, e))))
        return responses

    def finalize(self):
        self.run = None


_ORT_TYPES = {
    "tensor(float)": "TYPE_FP32", "tensor(float16)": "TYPE_FP16", "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16", "tensor(int8)": "TYPE_INT8", "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32", "tensor(int64)": "TYPE_INT64", "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16", "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64",
    "tensor(bool)": "TYPE_BOOL", "tensor(string)": "TYPE_STRING",
}


def _ort_dims(shape):
    if shape is None:
        return None
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


class OnnxruntimeStandin(StandinModel):
    BACKEND = "onnxruntime"
    DEFAULT_FILE = "model.onnx"

    def resolve(self, args, config):
        path = model_path(args, config, self.DEFAULT_FILE)
        if os.path.isdir(path):               # Triton's layout for external data: model.onnx/model.onnx
            inner = os.path.join(path, "model.onnx")
            if not os.path.isfile(inner):
                raise ModelConfigMismatch("model '%s': folder %s holds no model.onnx"
                                                 % (args["model_name"], path))
            path = inner
        return path

    def load(self, path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        params = _parameters(self)
        # the backend's thread and execution-mode parameters where the config sets them
        options.intra_op_num_threads = int(params.get("intra_op_thread_count")
                                           or os.environ.get("NAVIGATOR_STANDIN_THREADS", "1"))
        if params.get("inter_op_thread_count"):
            options.inter_op_num_threads = int(params["inter_op_thread_count"])
        if params.get("execution_mode") == "1":
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        level = int(((getattr(self, "config", None) or {}).get("optimization") or {}).get("graph", {}).get("level", 0))
        options.graph_optimization_level = {-1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                            1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                            2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL}.get(
            level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        inputs = {i.name: (_ORT_TYPES.get(i.type, i.type), _ort_dims(i.shape)) for i in session.get_inputs()}
        outputs = {o.name: (_ORT_TYPES.get(o.type, o.type), _ort_dims(o.shape)) for o in session.get_outputs()}
        names = list(outputs)

        def run(feeds):
            return dict(zip(names, session.run(names, feeds)))

        mode = "parallel" if params.get("execution_mode") == "1" else "sequential"
        return inputs, outputs, run, "onnxruntime %s, %d intra-op thread(s), %s execution" % (
            ort.__version__, options.intra_op_num_threads, mode)


def _parameters(model) -> dict:
    """The config's ``parameters`` as {key: string value}."""
    found = ((getattr(model, "config", None) or {}).get("parameters") or {}).items()
    return {k: str((v or {}).get("string_value", "")).strip() for k, v in found}


_OV_TYPES = {
    "f32": "TYPE_FP32", "f16": "TYPE_FP16", "f64": "TYPE_FP64", "bf16": "TYPE_BF16", "i8": "TYPE_INT8",
    "i16": "TYPE_INT16", "i32": "TYPE_INT32", "i64": "TYPE_INT64", "u8": "TYPE_UINT8", "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32", "u64": "TYPE_UINT64", "boolean": "TYPE_BOOL", "string": "TYPE_STRING",
}


def _ov_dims(partial_shape):
    if partial_shape.rank.is_dynamic:
        return None
    return [-1 if d.is_dynamic else d.get_length() for d in partial_shape]


def _ports(ports):
    """{name: (index, port)} under every name a port has."""
    out = {}
    for index, port in enumerate(ports):
        for name in sorted(port.get_names()):
            out.setdefault(name, (index, port))
    return out


class OpenVINOStandin(StandinModel):
    BACKEND = "openvino"
    DEFAULT_FILE = "model.xml"

    def load(self, path):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(path)
        in_ports, out_ports = _ports(model.inputs), _ports(model.outputs)
        inputs = {n: (_OV_TYPES.get(p.get_element_type().get_type_name(), str(p.get_element_type())),
                      _ov_dims(p.get_partial_shape())) for n, (_, p) in in_ports.items()}
        outputs = {n: (_OV_TYPES.get(p.get_element_type().get_type_name(), str(p.get_element_type())),
                       _ov_dims(p.get_partial_shape())) for n, (_, p) in out_ports.items()}
        properties = {"INFERENCE_NUM_THREADS": os.environ.get("NAVIGATOR_STANDIN_THREADS", "1")}
        params = _parameters(self)
        if params.get("HINT_BF16", "").lower() == "yes":   # the backend's one precision key; no key pins f32
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        for name in ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS"):   # the backend's own keys
            if params.get(name):
                properties[name] = params[name]
        compiled = core.compile_model(model, "CPU", properties)
        precision = compiled.get_property("INFERENCE_PRECISION_HINT")
        self.precision = getattr(precision, "get_type_name", lambda: str(precision))()
        request = compiled.create_infer_request()
        in_index = {n: i for n, (i, _) in in_ports.items()}
        out_index = {n: i for n, (i, _) in out_ports.items()}

        def run(feeds):
            result = request.infer({in_index[n]: v for n, v in feeds.items()})
            return {n: np.array(result[compiled.outputs[i]]) for n, i in out_index.items()}

        self.input_count = len(model.inputs)
        applied = ", ".join("%s %s" % (k, compiled.get_property(k))
                            for k in ("PERFORMANCE_HINT", "INFERENCE_NUM_THREADS"))
        return inputs, outputs, run, "openvino %s, inference precision %s, %s" % (
            ov.__version__, self.precision, applied)


class _NotInstalled(StandinModel):
    def initialize(self, args):
        raise ModelConfigMismatch("navigator stand-in: %s is not inside a backend folder named onnxruntime or "
                                  "openvino" % __file__)


BACKENDS = {"onnxruntime": OnnxruntimeStandin, "openvino": OpenVINOStandin}
# The backend this copy stands in for: the name of the folder Triton found it in.
TritonPythonModel = BACKENDS.get(os.path.basename(os.path.dirname(os.path.abspath(__file__))), _NotInstalled)
