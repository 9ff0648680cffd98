"""ONNX graph clean-up: constant folding, dead-node removal, onnxslim when installed."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.onnx_io import save_onnx
from navigator.converters.registry import register


@dataclass(frozen=True)
class OnnxOptimizeParams:
    fold_constants: bool = True
    slim: bool = True                  # run onnxslim when it is installed
    fold_size_threshold: int | None = 1 << 24   # bytes; larger folded constants stay computed


@register
class OnnxToOnnxOptimized(Converter):
    """Fold constants and clean up the graph with onnx-graphsurgeon, then onnxslim."""

    name = "onnx_to_onnx_optimized"
    source = "onnx"
    target = "onnx-optimized"
    requires = ("onnx", "onnx_graphsurgeon", "onnxruntime")
    devices = ("cpu", "cuda")
    Params = OnnxOptimizeParams

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import onnx
        import onnx_graphsurgeon as gs

        from navigator import deps

        p: OnnxOptimizeParams = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=True)
        names_out = [o.name for o in model.graph.output]
        graph = gs.import_onnx(model)
        before = len(graph.nodes)
        if p.fold_constants:
            graph.fold_constants(size_threshold=p.fold_size_threshold)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        model = gs.export_onnx(graph, do_type_check=True)
        ctx.log.info("graphsurgeon: %d -> %d nodes", before, len(graph.nodes))
        strategy = "graphsurgeon"
        if p.slim and deps.has("onnxslim"):
            import onnxslim

            try:
                slimmed = onnxslim.slim(model)
                if slimmed is not None:
                    ctx.log.info("onnxslim: %d -> %d nodes", len(model.graph.node), len(slimmed.graph.node))
                    model = slimmed
                    strategy = "graphsurgeon+onnxslim"
            except Exception as e:  # onnxslim is best effort: keep the graphsurgeon result
                ctx.log.warning("onnxslim failed, keeping the graphsurgeon result: %s: %s", type(e).__name__, e)
        missing = [n for n in names_out if n not in {o.name for o in model.graph.output}]
        if missing:
            raise RuntimeError(f"optimization lost outputs {missing}")
        save_onnx(model, ctx.output)
        onnx.checker.check_model(str(ctx.output))
        return ConvertOutcome(exporter=strategy)


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxOptimized))
