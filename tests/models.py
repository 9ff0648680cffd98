"""Tiny ONNX models built in code for the tests, each with what it checks.

Run ``python tests/models.py DIR`` to write them all to DIR for a look.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


def _model(nodes, inputs, outputs, initializers=(), name="m") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="navigator-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def token_classifier(vocab: int = 1000, dim: int = 16, classes: int = 4, seed: int = 0) -> onnx.ModelProto:
    """int64 ids [batch, seq] into an embedding (Gather): sampled ids must stay < vocab;
    two dynamic dims; two outputs (logits, probs)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((dim, classes)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["tok"]),
             helper.make_node("ReduceMean", ["tok", "axes"], ["pooled"], keepdims=0),
             helper.make_node("MatMul", ["pooled", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
                   helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])], inits)


def topk_model(features: int = 16, k: int = 3, seed: int = 1) -> onnx.ModelProto:
    """float x [batch, 16] -> MatMul -> TopK: an int64 indices output that needs
    the `exact` mode at fp32 (and mismatch_fraction under reduced precision)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((features, 10)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([k], np.int64), "k")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"]),
             helper.make_node("TopK", ["scores", "k"], ["values", "indices"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
                  [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["batch", k]),
                   helper.make_tensor_value_info("indices", TensorProto.INT64, ["batch", k])], inits)


def foldable_mlp(features: int = 8, seed: int = 2) -> onnx.ModelProto:
    """A constant subgraph (w1 * 2 computed at run time) that onnx-optimized folds away."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((features, features)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Mul", ["w1", "two"], ["w1x2"]),
             helper.make_node("MatMul", ["x", "w1x2"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])], inits)


def foldable_mlp_w1() -> np.ndarray:
    """foldable_mlp's weight ``w1`` (its default arguments)."""
    return {i.name: numpy_helper.to_array(i) for i in foldable_mlp().graph.initializer}["w1"]


def foldable_mlp_torch():
    """The same function as foldable_mlp, with its weights, as a torch module (eval mode)
    returning a one-tuple; torch is imported only here."""
    import torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(foldable_mlp_w1().copy()))

        def forward(self, x):
            return (torch.relu(x @ (self.w * 2.0)),)

    return MLP().eval()


def small_cnn(channels: int = 8, classes: int = 4, seed: int = 3) -> onnx.ModelProto:
    """Conv (with bias) + Relu + global pool + MatMul on x [batch, 3, h, w]: three
    dynamic dims; the shape of net that fp16 casts and int8 Q/DQ (per-channel
    Conv weights, fp32 bias) are checked on, and that TensorRT-RTX builds. A second
    MatMul on the first pixel carries each input's own values into the logits: a global
    average of random pixels is nearly the same for every sample, and a check whose
    output does not depend on the input cannot fail (the negative control says so)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.5).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "conv_b"),
             numpy_helper.from_array(rng.standard_normal((channels, classes)).astype(np.float32), "fc"),
             numpy_helper.from_array((rng.standard_normal((3, classes)) * 4).astype(np.float32), "pixel_fc"),
             numpy_helper.from_array(np.array([0, 0], np.int64), "p0"),
             numpy_helper.from_array(np.array([1, 1], np.int64), "p1"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "hw")]
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["pooled_logits"]),
             helper.make_node("Slice", ["x", "p0", "p1", "hw"], ["pixel"]),
             helper.make_node("Flatten", ["pixel"], ["pixel_flat"]),
             helper.make_node("MatMul", ["pixel_flat", "pixel_fc"], ["pixel_logits"]),
             helper.make_node("Add", ["pooled_logits", "pixel_logits"], ["logits"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], inits)


# Ensemble steps for the Triton tests: uint8 pixels in, label and score out.
ENSEMBLE_PRE = '''
import numpy as np


def example_inputs():
    """Raw inputs unlike the model's: uint8 pixels."""
    return {"pixels": np.random.default_rng(0).integers(0, 256, size=(4, 8), dtype=np.uint8)}


def preprocess(pixels):
    return {"x": (pixels / 255.0).astype(np.float32)}
'''

ENSEMBLE_POST = '''
import numpy as np


def postprocess(y):
    return {"label": y.argmax(-1).astype(np.int64)[:, None], "score": y.max(-1, keepdims=True)}
'''


def scaled_mlp(scale: float = 1.0, constant: bool = False, seed: int = 4) -> onnx.ModelProto:
    """x [batch, 8] -> tanh(x @ w1) @ w2 * scale: logits of a chosen magnitude (1e-9 for a near-zero
    output, 30 for large logits). ``constant``: the output ignores x (0 * x + c), the same for every
    input: a check of it cannot fail, whatever it compares."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((16, 4)) * scale).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros((8, 4), np.float32), "zero"),
             numpy_helper.from_array(rng.standard_normal((1, 4)).astype(np.float32), "c")]
    if constant:
        nodes = [helper.make_node("MatMul", ["x", "zero"], ["z"]),
                 helper.make_node("Add", ["z", "c"], ["logits"])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
                 helper.make_node("MatMul", ["t", "w2"], ["logits"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])], inits)


def rope_positions(dim: int = 8) -> onnx.ModelProto:
    """x [batch, seq, dim] + positions: int64 positions (Shape -> Range) cast to float by a node named as
    torch's dynamo exporter names it (``node__to_copy_1``): onnxconverter-common 1.16 marks that Cast's
    output fp16 while it still casts to fp32 (microsoft/onnxconverter-common#320, Llama's RoPE), so
    the fp16 graph fails shape inference until the node is kept in fp32."""
    freq = np.linspace(0.1, 1.0, dim, dtype=np.float32).reshape(1, dim)
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "ax"), numpy_helper.from_array(freq, "freq")]
    nodes = [helper.make_node("Shape", ["x"], ["shp"], name="shape"),
             helper.make_node("Gather", ["shp", "one"], ["seqlen"], name="seqlen", axis=0),
             helper.make_node("Range", ["zero", "seqlen", "one"], ["pos"], name="range"),
             helper.make_node("Cast", ["pos"], ["posf"], name="node__to_copy_1", to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["posf", "ax"], ["posu"], name="unsqueeze"),
             helper.make_node("Mul", ["posu", "freq"], ["angles"], name="mul"),
             helper.make_node("Sin", ["angles"], ["s"], name="sin"),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", dim])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", dim])], inits)


def erfc_gelu(features: int = 8, seed: int = 5) -> onnx.ModelProto:
    """x @ w -> exact gelu written as tf2onnx writes Keras' gelu: 0.5 * x * Erfc(-x / sqrt 2). ``Erfc``
    is no ONNX op: the ONNX checker and onnxruntime refuse this graph until it is repaired."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((features, features)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(-1 / np.sqrt(2), np.float32), "k"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Mul", ["h", "k"], ["hk"], name="scale"),
             helper.make_node("Erfc", ["hk"], ["e"], name="gelu/Erfc"),
             helper.make_node("Mul", ["h", "e"], ["he"], name="mul"),
             helper.make_node("Mul", ["he", "half"], ["y"], name="half")]
    graph = helper.make_graph(nodes, "erfc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="navigator-tests")
    model.ir_version = 9
    return model   # not checked: the checker refuses Erfc, which is the point


def erf_gelu(features: int = 8, seed: int = 5) -> onnx.ModelProto:
    """erfc_gelu's function in valid ONNX: x @ w -> 0.5 * h * (1 + Erf(h / sqrt 2)); the source whose
    Erf a plugin edge rewrites with Erfc (tests/functional/plugin_converters.py, WritesErfc)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((features, features)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(1 / np.sqrt(2), np.float32), "k"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Mul", ["h", "k"], ["hk"], name="scale"),
             helper.make_node("Erf", ["hk"], ["e"], name="gelu/Erf"),
             helper.make_node("Add", ["e", "one"], ["e1"], name="plus_one"),
             helper.make_node("Mul", ["h", "e1"], ["he"], name="mul"),
             helper.make_node("Mul", ["he", "half"], ["y"], name="half")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])], inits)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


ALL = {"token_classifier": token_classifier, "topk_model": topk_model, "foldable_mlp": foldable_mlp,
       "small_cnn": small_cnn, "scaled_mlp": scaled_mlp, "rope_positions": rope_positions, "erfc_gelu": erfc_gelu,
       "erf_gelu": erf_gelu}

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for name, make in ALL.items():
        print(save(make(), out / f"{name}.onnx"))
