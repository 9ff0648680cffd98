"""ONNX graph clean-up: constant folding, dead-node removal, onnxslim when installed."""

from __future__ import annotations

from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.onnx_io import (copy_external_data, external_tensors, inline_small_external, save_onnx,
                                          save_proto)
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

        from navigator.converters.onnx_check import InvalidGraph, check_file
        from navigator.converters.onnx_io import remove_onnx

        p: OnnxOptimizeParams = ctx.params
        model = onnx.load(str(ctx.source), load_external_data=False)
        if external_tensors(model):
            return self._convert_external(ctx, model)
        source = onnx.load(str(ctx.source), load_external_data=True)
        # the first way whose graph checks and loads wins: constant folding inside If/Loop bodies
        # (graphsurgeon's default) and onnxslim have each produced invalid graphs
        ways = {(p.fold_constants, True, p.slim): "graphsurgeon",
                (p.fold_constants, False, p.slim): "top-level folding",
                (False, False, p.slim): "no folding", (False, False, False): "cleanup only"}
        failures = []
        for (fold, recurse, slim), label in ways.items():
            try:
                model, strategy = self._optimize(ctx, onnx.ModelProto.FromString(source.SerializeToString()), fold,
                                                 recurse, slim)
                save_onnx(model, ctx.output)
                check_file(ctx.output)
            except (InvalidGraph, RuntimeError) as e:
                remove_onnx(ctx.output)            # an invalid graph never stays on disk
                failures.append(f"{label}: {str(e)[:200]}")
                ctx.log.warning("optimization (%s) gave an invalid graph: %s", label, e)
                continue
            notes = [f"the first ways gave invalid graphs ({'; '.join(failures)}): {label} instead"] if failures else []
            return ConvertOutcome(exporter=strategy, notes=notes)
        raise RuntimeError(f"every way of optimizing gave an invalid graph: {'; '.join(failures)}")

    def _optimize(self, ctx: ConvertContext, model, fold: bool, recurse: bool, slim: bool):
        """(the optimized model, the strategy that made it); the source's metadata_props are kept
        (PP-OCR's recognizer holds its character list there)."""
        import onnx_graphsurgeon as gs

        from navigator import deps

        p: OnnxOptimizeParams = ctx.params
        names_out = [o.name for o in model.graph.output]
        metadata = list(model.metadata_props)
        graph = gs.import_onnx(model)
        before = len(graph.nodes)
        if fold:
            graph.fold_constants(size_threshold=p.fold_size_threshold, recurse_subgraphs=recurse)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        model = gs.export_onnx(graph, do_type_check=True)
        ctx.log.info("graphsurgeon: %d -> %d nodes", before, len(graph.nodes))
        strategy = "graphsurgeon"
        if slim and deps.has("onnxslim"):
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
        del model.metadata_props[:]
        model.metadata_props.extend(metadata)
        return model, strategy if fold or not p.fold_constants else f"{strategy} (no folding)"

    def _convert_external(self, ctx: ConvertContext, model) -> ConvertOutcome:
        """A model with external data (a > 2 GB one): its weights are never loaded. Tensors up to
        the fold threshold (256 MiB of them at most) are read in so they can fold; the others
        keep their entries and their files are copied beside the output (streamed). onnxslim
        is skipped: it works on the whole model in memory."""
        import onnx
        import onnx_graphsurgeon as gs

        p: OnnxOptimizeParams = ctx.params
        names_out = [o.name for o in model.graph.output]
        inlined = inline_small_external(model, ctx.source.parent, p.fold_size_threshold or 0) if p.fold_constants \
            else 0
        graph = gs.import_onnx(model)   # external initializers become LazyValues: exported as they are
        before = len(graph.nodes)
        if p.fold_constants:
            graph.fold_constants(size_threshold=p.fold_size_threshold)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        model = gs.export_onnx(graph, do_type_check=True)
        ctx.log.info("graphsurgeon (external data kept, %d small tensors read in): %d -> %d nodes", inlined, before,
                     len(graph.nodes))
        missing = [n for n in names_out if n not in {o.name for o in model.graph.output}]
        if missing:
            raise RuntimeError(f"optimization lost outputs {missing}")
        copy_external_data(model, ctx.source.parent, ctx.output.parent)
        save_proto(model, ctx.output)
        onnx.checker.check_model(str(ctx.output))
        notes = ["external data kept as it is (weights never loaded): onnxslim skipped"] if p.slim else []
        return ConvertOutcome(exporter="graphsurgeon (external data kept)", notes=notes)


if __name__ == "__main__":
    raise SystemExit(main(OnnxToOnnxOptimized))
