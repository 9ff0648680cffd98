"""Reduced-precision PyTorch variants on CUDA: eager, ExportedProgram and AOTInductor
in fp16 and bf16 (keys ``torch-fp16``, ``torch_export-bf16``, ``aoti-fp16`` …).

Each keeps the model's I/O types: float inputs are cast to the precision inside,
float outputs back to float32, so the variant is a drop-in for the fp32 one and
is verified against the fp32 reference with the precision's tolerances.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from navigator.converters.base import Converter, ConvertContext, ConvertOutcome, main
from navigator.converters.registry import register
from navigator.converters.torch_export_to_aoti import TorchExportToAoti

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class NoParams:
    pass


class _Eager(Converter):
    """Record the eager module at a reduced precision (source.json with its dtype)."""

    source = "torch"
    requires = ("torch",)
    devices = ("cuda",)
    precision = ""

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        record = json.loads((ctx.source).read_text())
        record["dtype"] = DTYPES[self.precision]
        ctx.output.write_text(json.dumps(record, indent=1) + "\n")
        for extra in ("io.json",):
            (ctx.output.parent / extra).write_text((ctx.source.parent / extra).read_text())
        return ConvertOutcome(exporter=f"module.to({DTYPES[self.precision]})")


class _Export(Converter):
    """torch.export of the cast module on the GPU."""

    source = "torch"
    requires = ("torch",)
    devices = ("cuda",)
    needs_live = True
    precision = ""

    def convert(self, ctx: ConvertContext) -> ConvertOutcome:
        import torch

        from navigator.sources.torch_support import cast_module, dynamic_shapes

        live = ctx.live
        module = cast_module(live.module, DTYPES[self.precision]).to("cuda")
        example = tuple(t.to("cuda") for t in live.example)
        ep = torch.export.export(module, example, dynamic_shapes=dynamic_shapes(ctx.signature, live.profile))
        torch.export.save(ep, str(ctx.output))
        return ConvertOutcome(exporter=f"torch.export ({self.precision}, cuda)")


class _Aoti(TorchExportToAoti):
    """AOTInductor package of the reduced-precision ExportedProgram, compiled on the GPU."""

    devices = ("cuda",)


for _p in DTYPES:
    for _base, _name, _source, _target in (
            (_Eager, f"torch_to_torch_{_p}", "torch", f"torch-{_p}"),
            (_Export, f"torch_to_torch_export_{_p}", "torch", f"torch_export-{_p}"),
            (_Aoti, f"torch_export_{_p}_to_aoti_{_p}", f"torch_export-{_p}", f"aoti-{_p}")):
        _cls = type(_name, (_base,), {"name": _name, "source": _source, "target": _target, "precision": _p,
                                      "Params": NoParams if _base is not _Aoti else _base.Params,
                                      "__module__": __name__, "__qualname__": _name,
                                      "__doc__": f"{_base.__doc__.strip()} ({_p})"})
        globals()[_name] = register(_cls)


def _edge_for_output(argv: list[str]) -> type:
    """The edge whose target is the format folder named by --output (formats/<key>/...)."""
    from pathlib import Path

    output = argv[argv.index("--output") + 1] if "--output" in argv else ""
    key = Path(output).parent.name
    for obj in list(globals().values()):
        if isinstance(obj, type) and issubclass(obj, Converter) and obj.__dict__.get("target") == key:
            return obj
    raise SystemExit(f"error: --output {output!r} is not in a reduced-precision torch format folder")


if __name__ == "__main__":
    import sys

    raise SystemExit(main(_edge_for_output(sys.argv[1:])))
