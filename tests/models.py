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


DETECTOR_SIZE = 128     # tiny_detector's square input (the letterbox target)
DETECTOR_TOPK = 20      # detections kept per image by DETECT_POST


def tiny_detector(channels: int = 32, seed: int = 5) -> onnx.ModelProto:
    """A detection-shaped net: images [batch, 3, 128, 128] (static H, W as YOLO exports are) ->
    boxes [batch, 256, 4] (cx, cy, w, h in input pixels) and scores [batch, 256], one anchor per
    cell of a 16x16 grid. Two 3x3 convs of 32 channels at full resolution make it the heavy step
    of its ensemble (~10 ms per image on this CPU), so a dynamic batcher in front of it sees a
    queue while a light preprocess feeds it."""
    rng = np.random.default_rng(seed)
    s, grid, stride = DETECTOR_SIZE, DETECTOR_SIZE // 8, 8
    gy, gx = np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32), indexing="ij")
    offsets = np.stack([gx.reshape(-1), gy.reshape(-1)], -1)[None]          # [1, 256, 2] cell corners
    inits = [numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32),
                                     "w2"),
             numpy_helper.from_array((rng.standard_normal((5, channels, 8, 8)) * 0.01).astype(np.float32), "head"),
             numpy_helper.from_array(np.array([0, 5, grid * grid], np.int64), "flat"),
             numpy_helper.from_array(offsets, "cells"),
             numpy_helper.from_array(np.array(float(stride), np.float32), "stride"),
             numpy_helper.from_array(np.array([2, 2, 1], np.int64), "split"),
             numpy_helper.from_array(np.array([2], np.int64), "last")]
    nodes = [helper.make_node("Conv", ["images", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "head"], ["raw"], strides=[stride, stride]),    # [B, 5, 16, 16]
             helper.make_node("Reshape", ["raw", "flat"], ["raw_flat"]),                       # [B, 5, 256]
             helper.make_node("Transpose", ["raw_flat"], ["per_anchor"], perm=[0, 2, 1]),      # [B, 256, 5]
             helper.make_node("Split", ["per_anchor", "split"], ["xy_raw", "wh_raw", "score_raw"], axis=2),
             helper.make_node("Sigmoid", ["xy_raw"], ["xy_sig"]),
             helper.make_node("Add", ["xy_sig", "cells"], ["xy_cell"]),
             helper.make_node("Mul", ["xy_cell", "stride"], ["xy"]),
             helper.make_node("Exp", ["wh_raw"], ["wh_exp"]),
             helper.make_node("Mul", ["wh_exp", "stride"], ["wh"]),
             helper.make_node("Concat", ["xy", "wh"], ["boxes"], axis=2),
             helper.make_node("Sigmoid", ["score_raw"], ["score_sig"]),
             helper.make_node("Squeeze", ["score_sig", "last"], ["scores"])]
    return _model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, s, s])],
                  [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", grid * grid, 4]),
                   helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", grid * grid])], inits,
                  name="tiny_detector")


# The detection pipeline's steps (a YOLO-style deployment): raw uint8 HWC images of any size in,
# letterboxed to 128x128 with the scale and padding kept; postprocess decodes the boxes, undoes
# the letterbox with preprocess's scale and padding (a pre -> post edge) and runs NMS in numpy.
DETECT_PRE = '''
import math

import numpy as np

SIZE = 128


def example_inputs():
    """Two batches of different image sizes: the height and width vary, the channels do not."""
    rng = np.random.default_rng(0)
    return [{"image": rng.integers(0, 256, size=(2, 96, 120, 3), dtype=np.uint8)},
            {"image": rng.integers(0, 256, size=(3, 128, 80, 3), dtype=np.uint8)}]


def letterbox(image):
    """One HWC uint8 image -> CHW float32 in [0, 1] of SIZE x SIZE (nearest resize, grey padding),
    the scale and the (x, y) padding."""
    h, w = image.shape[:2]
    scale = min(SIZE / h, SIZE / w)
    nh, nw = max(1, int(math.floor(h * scale + 0.5))), max(1, int(math.floor(w * scale + 0.5)))
    rows = np.minimum((np.arange(nh) / scale).astype(np.int64), h - 1)
    cols = np.minimum((np.arange(nw) / scale).astype(np.int64), w - 1)
    top, left = (SIZE - nh) // 2, (SIZE - nw) // 2
    canvas = np.full((SIZE, SIZE, 3), 114, np.uint8)
    canvas[top:top + nh, left:left + nw] = image[rows][:, cols]
    return canvas.transpose(2, 0, 1).astype(np.float32) / 255.0, scale, (left, top)


def preprocess(image):
    out = [letterbox(im) for im in image]
    return {"images": np.stack([o[0] for o in out]),
            "scale": np.array([o[1] for o in out], np.float32),
            "pad": np.array([o[2] for o in out], np.float32)}
'''

DETECT_POST = '''
import numpy as np

SCORE_MIN, IOU_MAX, TOPK = 0.58, 0.3, %d


def nms(boxes, scores):
    """Greedy non-maximum suppression: indices kept, best first."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size and len(keep) < TOPK:
        i, rest = order[0], order[1:]
        keep.append(i)
        x1 = np.maximum(boxes[i, 0], boxes[rest, 0])
        y1 = np.maximum(boxes[i, 1], boxes[rest, 1])
        x2 = np.minimum(boxes[i, 2], boxes[rest, 2])
        y2 = np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        iou = inter / (area(boxes[i]) + area(boxes[rest]) - inter + 1e-9)
        order = rest[iou <= IOU_MAX]
    return np.array(keep, np.int64)


def postprocess(boxes, scores, scale, pad):
    """Boxes in the original image's pixels (x1, y1, x2, y2), TOPK per image, zero-padded."""
    n = boxes.shape[0]
    out_boxes = np.zeros((n, TOPK, 4), np.float32)
    out_scores = np.zeros((n, TOPK), np.float32)
    count = np.zeros((n,), np.int32)
    for b in range(n):
        xyxy = np.concatenate([boxes[b, :, :2] - boxes[b, :, 2:] / 2, boxes[b, :, :2] + boxes[b, :, 2:] / 2], -1)
        xyxy = (xyxy - np.tile(pad[b], 2)) / scale[b]
        mask = scores[b] >= SCORE_MIN
        cand, cand_scores = xyxy[mask], scores[b][mask]
        keep = nms(cand, cand_scores)
        out_boxes[b, :len(keep)] = cand[keep]
        out_scores[b, :len(keep)] = cand_scores[keep]
        count[b] = len(keep)
    return {"detections": out_boxes, "confidences": out_scores, "count": count}
''' % DETECTOR_TOPK


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
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
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
    graph = helper.make_graph(nodes, "erfc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
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


def dynamic_detector(classes: int = 3, seed: int = 7) -> onnx.ModelProto:
    """A YOLOv8-style head exported with dynamic height and width: [B, 4+C, h*w] from a stride-2
    convolution, its anchor grid computed in float from the feature map's dynamic shape (Shape ->
    Cast(to=FLOAT) -> Range -> Add 0.5 -> Expand), box centres = (anchor + sigmoid) x stride,
    class scores sigmoid. The shape arithmetic in float is what an fp16 pass by op type breaks
    (Range has no float16); by op schema it stays fp32 and the network around it converts."""
    rng = np.random.default_rng(seed)
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.5, (4 + classes, 8, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([2], np.int64), "i2"),
             numpy_helper.from_array(np.array([3], np.int64), "i3"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(2.0, np.float32), "stride"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([0, 4 + classes, -1], np.int64), "flat"),
             numpy_helper.from_array(np.array([4 + classes], np.int64), "all"),
             numpy_helper.from_array(np.array([1, 2, -1], np.int64), "grid_shape")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Sigmoid", ["c1"], ["a1"], name="act1"),
             helper.make_node("Conv", ["a1", "w2"], ["head"], name="conv2"),
             helper.make_node("Shape", ["head"], ["shp"], name="shape"),
             helper.make_node("Gather", ["shp", "i2"], ["h64"], axis=0, name="h"),
             helper.make_node("Gather", ["shp", "i3"], ["w64"], axis=0, name="w"),
             helper.make_node("Cast", ["h64"], ["hf1"], to=f, name="hf"),
             helper.make_node("Cast", ["w64"], ["wf1"], to=f, name="wf"),
             helper.make_node("Squeeze", ["hf1", "ax0"], ["hf"], name="hsq"),
             helper.make_node("Squeeze", ["wf1", "ax0"], ["wf"], name="wsq"),
             helper.make_node("Range", ["zero", "hf", "one"], ["ry"], name="range_y"),
             helper.make_node("Range", ["zero", "wf", "one"], ["rx"], name="range_x"),
             helper.make_node("Add", ["ry", "half"], ["cy"], name="centre_y"),
             helper.make_node("Add", ["rx", "half"], ["cx"], name="centre_x"),
             helper.make_node("Unsqueeze", ["cy", "ax1"], ["cyu"], name="cyu"),
             helper.make_node("Concat", ["h64", "w64"], ["hw"], axis=0, name="hw"),
             helper.make_node("Expand", ["cyu", "hw"], ["gy"], name="grid_y"),
             helper.make_node("Expand", ["cx", "hw"], ["gx"], name="grid_x"),
             helper.make_node("Concat", ["gx", "gy"], ["g2"], axis=0, name="grid"),
             helper.make_node("Reshape", ["g2", "grid_shape"], ["anchors"], name="anchors"),
             helper.make_node("Reshape", ["head", "flat"], ["hflat"], name="flatten"),
             helper.make_node("Slice", ["hflat", "ax0", "i2", "ax1"], ["xy_raw"], name="xy_raw"),
             helper.make_node("Sigmoid", ["xy_raw"], ["xy_sig"], name="xy_sig"),
             helper.make_node("Add", ["anchors", "xy_sig"], ["xy_a"], name="xy_anchor"),
             helper.make_node("Mul", ["xy_a", "stride"], ["xy"], name="xy"),
             helper.make_node("Slice", ["hflat", "i2", "all", "ax1"], ["rest"], name="rest_raw"),
             helper.make_node("Sigmoid", ["rest"], ["rest_sig"], name="rest"),
             helper.make_node("Concat", ["xy", "rest_sig"], ["output0"], axis=1, name="out")]
    return _model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 3, "height", "width"])],
                  [helper.make_tensor_value_info("output0", f, ["batch", 4 + classes, "anchors"])], inits)


def gru_step(features: int = 4, hidden: int = 8, seed: int = 11, use_state: bool = True) -> onnx.ModelProto:
    """One step of a GRU with explicit state, as a streaming model is exported: x [1, B, F] (one
    time step), h0 [1, B, H] in, y [1, 1, B, H] and hn [1, B, H] out; the batch sits at dim 1, so
    Triton serves it one sequence step at a time. ``use_state=False``: the same net fed a zero
    state whatever h0 says (hn still comes out): a model whose state does nothing."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 0.6, (1, 3 * hidden, features)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 0.6, (1, 3 * hidden, hidden)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.normal(0, 0.1, (1, 6 * hidden)).astype(np.float32), "B")]
    nodes = []
    h = "h0"
    if not use_state:
        inits.append(numpy_helper.from_array(np.zeros((1,), np.float32), "zero"))
        nodes.append(helper.make_node("Mul", ["h0", "zero"], ["h0_ignored"]))
        h = "h0_ignored"
    nodes.append(helper.make_node("GRU", ["x", "W", "R", "B", "", h], ["y", "hn"], hidden_size=hidden))
    f = TensorProto.FLOAT
    return _model(nodes, [helper.make_tensor_value_info("x", f, [1, "batch", features]),
                          helper.make_tensor_value_info("h0", f, [1, "batch", hidden])],
                  [helper.make_tensor_value_info("y", f, [1, 1, "batch", hidden]),
                   helper.make_tensor_value_info("hn", f, [1, "batch", hidden])], inits)


def speech_chunks(seconds: float = 1.2, rate: int = 16000, chunk: int = 512, context: int = 64,
                  seed: int = 0) -> list[np.ndarray]:
    """A voiced sound (a 120 Hz glottal tone with /a/ formants, syllables at 4 Hz, faint noise) cut
    into [1, context + chunk] steps, each led by the previous step's last ``context`` samples as
    silero-vad's streaming wrapper feeds its model; its speech probability reaches ~0.9."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 120 * (1 + 0.1 * np.sin(2 * np.pi * 3 * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    sig = np.zeros_like(t)
    for h in range(1, 30):
        gain = sum(np.exp(-((h * f0 - f) / b) ** 2) for f, b in ((700, 130), (1200, 150), (2600, 200))) + 0.05
        sig += gain * np.sin(h * phase) / h ** 0.5
    sig *= 0.5 * (1 + np.sin(2 * np.pi * 4 * t - np.pi / 2))
    sig = (0.5 * sig / np.abs(sig).max() + 0.01 * rng.standard_normal(len(t))).astype(np.float32)
    steps, ctx = [], np.zeros((1, context), np.float32)
    for k in range(len(sig) // chunk):
        x = np.concatenate([ctx, sig[None, k * chunk:(k + 1) * chunk]], axis=1)
        ctx = x[:, -context:]
        steps.append(x)
    return steps


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


ALL = {"token_classifier": token_classifier, "topk_model": topk_model, "foldable_mlp": foldable_mlp,
       "small_cnn": small_cnn, "scaled_mlp": scaled_mlp, "rope_positions": rope_positions, "erfc_gelu": erfc_gelu,
       "erf_gelu": erf_gelu, "tiny_detector": tiny_detector, "dynamic_detector": dynamic_detector,
       "gru_step": gru_step}

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for name, make in ALL.items():
        print(save(make(), out / f"{name}.onnx"))
