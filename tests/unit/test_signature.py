"""Unit tests for navigator.sources.signature: ONNX signatures, batch dim, index bounds."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from navigator.errors import UserInputError
from navigator.sources.signature import (
    detect_batch_dim,
    external_data_files,
    index_bounds,
    load_onnx,
    onnx_signature,
)
from navigator.types import ModelSignature, TensorSpec

OPSET = [helper.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=OPSET)


def _table(name, rows, cols=32):
    return numpy_helper.from_array(np.zeros((rows, cols), np.float32), name)


def embedding_model():
    """ids int64 [batch, seq] -> Gather(1000x32) -> emb; ids -> Cast -> Unsqueeze -> Gather; two outputs."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    emb = helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["batch", "seq", 32])
    pooled = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 1, "seq", 32])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["ids32", "axes"], ["ids_u"]),
        helper.make_node("Gather", ["table", "ids_u"], ["pooled"], axis=0),
    ]
    return _model(nodes, [ids], [emb, pooled], [_table("table", 1000), axes])


def two_tables_model():
    """One int input indexing a 1000-row and a 300-row table: the bound is the minimum."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", 4])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    nodes = [
        helper.make_node("Gather", ["big", "ids"], ["a"], axis=0),
        helper.make_node("Gather", ["small", "ids"], ["b"], axis=0),
        helper.make_node("Add", ["a", "b"], ["out"]),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    return _model(nodes, [ids, x], [out, y], [_table("big", 1000), _table("small", 300)])


def static_batch_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, "n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, "n"])
    return _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])


def sig(*inputs):
    return ModelSignature(inputs=[TensorSpec(n, d, s) for n, d, s in inputs],
                          outputs=[TensorSpec("out", "float32", [-1])])


# --- onnx_signature ---------------------------------------------------------

def test_signature_names_dtypes_and_dynamic_dims():
    s = onnx_signature(embedding_model())
    assert [t.to_dict() for t in s.inputs] == [{"name": "ids", "dtype": "int64", "shape": [-1, -1]}]
    assert [t.to_dict() for t in s.outputs] == [
        {"name": "emb", "dtype": "float32", "shape": [-1, -1, 32]},
        {"name": "pooled", "dtype": "float32", "shape": [-1, 1, -1, 32]},
    ]


def test_signature_two_inputs_and_static_batch():
    s = onnx_signature(two_tables_model())
    assert [(t.name, t.dtype, t.shape) for t in s.inputs] == [("ids", "int32", [-1, 4]), ("x", "float32", [-1, 4])]
    s2 = onnx_signature(static_batch_model())
    assert s2.inputs[0].shape == [4, -1]


def test_signature_excludes_initializer_backed_inputs():
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])
    table_vi = helper.make_tensor_value_info("table", TensorProto.FLOAT, [1000, 32])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 32])
    m = _model([helper.make_node("Gather", ["table", "ids"], ["out"])], [ids, table_vi], [out], [_table("table", 1000)])
    assert onnx_signature(m).input_names == ["ids"]


def test_model_whose_only_input_is_an_initializer_has_no_inputs():
    table_vi = helper.make_tensor_value_info("table", TensorProto.FLOAT, [10, 32])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [10, 32])
    m = _model([helper.make_node("Relu", ["table"], ["out"])], [table_vi], [out], [_table("table", 10)])
    with pytest.raises(UserInputError) as e:
        onnx_signature(m)
    assert str(e.value) == "the model has no inputs; Navigator needs at least one input to feed samples"


# --- detect_batch_dim -------------------------------------------------------

def test_batch_dim_auto_when_dim0_dynamic_on_every_input():
    assert detect_batch_dim(onnx_signature(two_tables_model())) == 0
    assert detect_batch_dim(onnx_signature(static_batch_model())) is None
    # one input with a static dim 0 is enough to turn auto-detection off
    assert detect_batch_dim(sig(("a", "float32", [-1, 3]), ("b", "float32", [2, 3]))) is None
    # a scalar input cannot carry a batch dim
    assert detect_batch_dim(sig(("a", "float32", [-1, 3]), ("b", "float32", []))) is None


def test_batch_dim_override_and_out_of_range():
    s = sig(("a", "float32", [-1, -1, 3]), ("b", "int64", [-1, -1]))
    assert detect_batch_dim(s, batch_dim=1) == 1
    with pytest.raises(UserInputError) as e:
        detect_batch_dim(s, batch_dim=2)
    assert str(e.value) == "--batch-dim 2: input 'b' has only 2 dims"


def test_batch_dim_override_on_static_dim_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="navigator.sources.signature"):
        assert detect_batch_dim(onnx_signature(static_batch_model()), batch_dim=0) == 0
    assert "--batch-dim 0: input 'x' has static size 4 there" in caplog.text


def test_no_batching_wins():
    s = onnx_signature(two_tables_model())
    assert detect_batch_dim(s, no_batching=True) is None
    assert detect_batch_dim(s, batch_dim=0, no_batching=True) is None


# --- index_bounds -----------------------------------------------------------

def test_index_bounds_through_gather_cast_and_unsqueeze():
    assert index_bounds(embedding_model()) == {"ids": 1000}


def test_index_bounds_only_through_cast_and_unsqueeze():
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 1, 32])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Cast", ["ids"], ["c"], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["c", "axes"], ["u"]),
        helper.make_node("Gather", ["table", "u"], ["out"], axis=0),
    ]
    m = _model(nodes, [ids], [out], [_table("table", 1000), axes])
    assert index_bounds(m) == {"ids": 1000}


def test_index_bounds_min_over_two_tables_and_none_for_float():
    assert index_bounds(two_tables_model()) == {"ids": 300}


def test_index_bounds_gather_axis_and_constant_table():
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [7, "n"])
    const = helper.make_node("Constant", [], ["table"], value=numpy_helper.from_array(np.zeros((7, 50), np.float32)))
    m = _model([const, helper.make_node("Gather", ["table", "ids"], ["out"], axis=1)], [ids], [out])
    assert index_bounds(m) == {"ids": 50}


def test_index_bounds_ignores_ints_used_as_data():
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", 3])
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    out = helper.make_tensor_value_info("out", TensorProto.INT64, [1, 3])
    m = _model([helper.make_node("Gather", ["ids", "idx"], ["out"], axis=0)], [ids], [out], [idx])
    assert index_bounds(m) == {}


# --- load_onnx / external data ---------------------------------------------

def test_load_onnx_round_trip(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save_model(embedding_model(), str(p))
    assert onnx_signature(load_onnx(p)).input_names == ["ids"]


def test_load_onnx_missing_file(tmp_path):
    with pytest.raises(UserInputError) as e:
        load_onnx(tmp_path / "nope.onnx")
    assert str(e.value) == f"{tmp_path / 'nope.onnx'}: no such ONNX file"


@pytest.mark.parametrize("kind", ["truncated", "random"])
def test_load_onnx_bad_bytes_one_line(tmp_path, kind):
    p = tmp_path / "bad.onnx"
    if kind == "truncated":
        data = embedding_model().SerializeToString()
        p.write_bytes(data[: len(data) // 3])
    else:
        p.write_bytes(np.random.default_rng(1).bytes(512))
    with pytest.raises(UserInputError) as e:
        load_onnx(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: not a valid ONNX model (")
    assert "\n" not in msg
    assert e.value.exit_code == 2


def test_load_onnx_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(UserInputError) as e:
        load_onnx(p)
    assert str(e.value) == f"{p}: not a valid ONNX model (the graph is empty)"


def _gather_model():
    return _model([helper.make_node("Gather", ["table", "ids"], ["out"])],
               [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 32])],
               [_table("table", 1000)])


def test_external_data_files(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save_model(_gather_model(), str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    assert (tmp_path / "m.onnx.data").is_file()
    loaded = load_onnx(p)
    assert external_data_files(loaded, tmp_path) == [tmp_path / "m.onnx.data"]
    assert index_bounds(loaded) == {"ids": 1000}   # dims are known without loading the data
    onnx.save_model(_gather_model(), str(tmp_path / "inline.onnx"))
    assert external_data_files(load_onnx(tmp_path / "inline.onnx"), tmp_path) == []


def test_an_input_compared_with_a_constant_is_generated_at_that_value():
    """A voice-activity model takes a rank-0 sample rate and branches on ``sr == 16000``: generated
    values in [0, 16) took a branch no real input takes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from navigator.sources.signature import compared_values

    nodes = [helper.make_node("Cast", ["sr"], ["sr64"], to=TensorProto.INT64),
             helper.make_node("Equal", ["sr64", "rate"], ["is16k"]),
             helper.make_node("Where", ["is16k", "x", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
                                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
                              [numpy_helper.from_array(np.array(16000, np.int64), "rate"),
                               numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    assert compared_values(model) == {"sr": (16000.0, 16001.0)}
