"""navigator's CPU stand-in for Triton's ``onnxruntime`` backend: a TEST DOUBLE.

Not NVIDIA's C++ ONNX Runtime backend. ``navigator serve --cpu-backends``
installs this file as ``<backend_dir>/onnxruntime/model.py``; Triton then
runs models whose config says ``backend: "onnxruntime"`` (or platform
``onnxruntime_onnx``) through its Python backend with this code, which runs
the ONNX file with the onnxruntime package on the CPU. It checks the model
against config.pbtxt at load as the real backend does (see
_standin_common.py) and prints a line saying it is a stand-in into the
server log. Reads ``<version>/<default_model_filename or model.onnx>``, or
``model.onnx/model.onnx`` when that is a folder (external data).
"""

import os


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

_ORT_TYPES = {
    "tensor(float)": "TYPE_FP32", "tensor(float16)": "TYPE_FP16", "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16", "tensor(int8)": "TYPE_INT8", "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32", "tensor(int64)": "TYPE_INT64", "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16", "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64",
    "tensor(bool)": "TYPE_BOOL", "tensor(string)": "TYPE_STRING",
}


def _dims(shape):
    if shape is None:
        return None
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


class TritonPythonModel(common.StandinModel):
    BACKEND = "onnxruntime"
    DEFAULT_FILE = "model.onnx"

    def resolve(self, args, config):
        path = common.model_path(args, config, self.DEFAULT_FILE)
        if os.path.isdir(path):               # Triton's layout for external data: model.onnx/model.onnx
            inner = os.path.join(path, "model.onnx")
            if not os.path.isfile(inner):
                raise common.ModelConfigMismatch("model '%s': folder %s holds no model.onnx"
                                                 % (args["model_name"], path))
            path = inner
        return path

    def load(self, path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("NAVIGATOR_STANDIN_THREADS", "1"))
        session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        inputs = {i.name: (_ORT_TYPES.get(i.type, i.type), _dims(i.shape)) for i in session.get_inputs()}
        outputs = {o.name: (_ORT_TYPES.get(o.type, o.type), _dims(o.shape)) for o in session.get_outputs()}
        names = list(outputs)

        def run(feeds):
            return dict(zip(names, session.run(names, feeds)))

        return inputs, outputs, run, "onnxruntime %s" % ort.__version__
