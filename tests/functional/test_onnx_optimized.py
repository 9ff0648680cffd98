"""onnx -> onnx-optimized keeps what the model carries beside its graph and never leaves an invalid
graph: PP-OCR's recognizer holds its character list in metadata_props (graphsurgeon's export
dropped it), and constant folding inside If bodies has written graphs the checker rejects."""

from __future__ import annotations

import logging

import onnx
import pytest

from navigator.converters.base import ConvertContext
from navigator.converters.onnx_to_onnx_optimized import OnnxOptimizeParams, OnnxToOnnxOptimized

from .. import models

pytestmark = pytest.mark.functional


def _ctx(tmp_path, model):
    source = models.save(model, tmp_path / "src" / "model.onnx")
    return ConvertContext(workspace=tmp_path, source=source, output=tmp_path / "out" / "model.onnx",
                          params=OnnxOptimizeParams(), log=logging.getLogger("test"))


def test_metadata_props_survive_the_optimization(tmp_path):
    model = models.foldable_mlp()
    onnx.helper.set_model_props(model, {"character": "0123456789abc"})
    ctx = _ctx(tmp_path, model)
    ctx.output.parent.mkdir()
    OnnxToOnnxOptimized().convert(ctx)
    out = onnx.load(str(ctx.output))
    assert {p.key: p.value for p in out.metadata_props} == {"character": "0123456789abc"}
    assert "Mul" not in [n.op_type for n in out.graph.node]      # still folded


def test_an_invalid_result_falls_back_and_is_never_left_on_disk(tmp_path, monkeypatch):
    """The first way (folding inside subgraphs) writes a graph the checker rejects: it is removed,
    the next way is taken, and convert.reason says which and why."""
    ctx = _ctx(tmp_path, models.foldable_mlp())
    ctx.output.parent.mkdir()
    real = OnnxToOnnxOptimized._optimize
    seen = []

    def first_breaks(self, ctx, model, fold, recurse, slim):
        seen.append((fold, recurse, slim))
        model, strategy = real(self, ctx, model, fold, recurse, slim)
        if len(seen) == 1:   # an edge to a value nothing produces: invalid
            model.graph.node[0].input[0] = "nowhere"
        return model, strategy

    monkeypatch.setattr(OnnxToOnnxOptimized, "_optimize", first_breaks)
    outcome = OnnxToOnnxOptimized().convert(ctx)
    assert seen[:2] == [(True, True, True), (True, False, True)]
    assert "top-level folding instead" in outcome.notes[0] and "nowhere" in outcome.notes[0]
    onnx.checker.check_model(str(ctx.output), full_check=True)
