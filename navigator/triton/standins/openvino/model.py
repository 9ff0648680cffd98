"""navigator's CPU stand-in for Triton's ``openvino`` backend: a TEST DOUBLE.

Not NVIDIA's C++ OpenVINO backend. ``navigator serve --cpu-backends``
installs this file as ``<backend_dir>/openvino/model.py``; Triton then runs
models whose config says ``backend: "openvino"`` through its Python backend
with this code, which reads ``<version>/<default_model_filename or
model.xml>`` (an IR ``model.xml`` + ``model.bin``, or an ``.onnx`` file, as
the real backend reads them) with the openvino package and runs it on the
CPU. It checks the model against config.pbtxt at load as the real backend
does (see _standin_common.py) and prints a line saying it is a stand-in
into the server log.
"""

import os

import numpy as np


def _common():
    """_standin_common.py: beside this file in the server's backend folder, one level up in
    navigator's source tree."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (here, os.path.dirname(here)):
        path = os.path.join(folder, "_standin_common.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("navigator_standin_common", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise ImportError("navigator stand-in: _standin_common.py is missing beside %s" % __file__)


common = _common()

_OV_TYPES = {
    "f32": "TYPE_FP32", "f16": "TYPE_FP16", "f64": "TYPE_FP64", "bf16": "TYPE_BF16", "i8": "TYPE_INT8",
    "i16": "TYPE_INT16", "i32": "TYPE_INT32", "i64": "TYPE_INT64", "u8": "TYPE_UINT8", "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32", "u64": "TYPE_UINT64", "boolean": "TYPE_BOOL", "string": "TYPE_STRING",
}


def _dims(partial_shape):
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


class TritonPythonModel(common.StandinModel):
    BACKEND = "openvino"
    DEFAULT_FILE = "model.xml"

    def load(self, path):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(path)
        in_ports, out_ports = _ports(model.inputs), _ports(model.outputs)
        inputs = {n: (_OV_TYPES.get(p.get_element_type().get_type_name(), str(p.get_element_type())),
                      _dims(p.get_partial_shape())) for n, (_, p) in in_ports.items()}
        outputs = {n: (_OV_TYPES.get(p.get_element_type().get_type_name(), str(p.get_element_type())),
                       _dims(p.get_partial_shape())) for n, (_, p) in out_ports.items()}
        threads = os.environ.get("NAVIGATOR_STANDIN_THREADS", "1")
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                     "INFERENCE_NUM_THREADS": threads})
        request = compiled.create_infer_request()
        in_index = {n: i for n, (i, _) in in_ports.items()}
        out_index = {n: i for n, (i, _) in out_ports.items()}

        def run(feeds):
            result = request.infer({in_index[n]: v for n, v in feeds.items()})
            return {n: np.array(result[compiled.outputs[i]]) for n, i in out_index.items()}

        self.input_count = len(model.inputs)
        return inputs, outputs, run, "openvino %s" % ov.__version__
