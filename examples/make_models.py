"""Builds the example ONNX models shipped in examples/ (run: python examples/make_models.py).

tiny_classifier.onnx: int64 token ids [batch, seq] -> embedding (Gather from a
1000 x 32 table) -> mean over seq -> linear 32 -> 8 -> logits [batch, 8], and
softmax probabilities; both dims of the input are dynamic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def tiny_classifier(vocab: int = 1000, dim: int = 32, classes: int = 8, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    emb = numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32) * 0.1, "embedding")
    w = numpy_helper.from_array(rng.standard_normal((dim, classes)).astype(np.float32) * 0.3, "fc.weight")
    b = numpy_helper.from_array(rng.standard_normal((classes,)).astype(np.float32) * 0.1, "fc.bias")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("Gather", ["embedding", "ids"], ["tokens"], axis=0),
        helper.make_node("ReduceMean", ["tokens", "axes"], ["pooled"], keepdims=0),
        helper.make_node("MatMul", ["pooled", "fc.weight"], ["mm"]),
        helper.make_node("Add", ["mm", "fc.bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_classifier",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])],
        initializer=[emb, w, b, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="navigator-examples")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def main() -> None:
    onnx.save(tiny_classifier(), HERE / "tiny_classifier.onnx")
    print(f"wrote {HERE / 'tiny_classifier.onnx'}")


if __name__ == "__main__":
    main()
