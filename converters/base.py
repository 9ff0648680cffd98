"""The converter contract: one class per edge of the conversion graph.

A converter declares ``source`` and ``target`` keys, the modules it
``requires`` (checked with find_spec, never imported), the ``devices`` it
runs on and a frozen ``Params`` dataclass; ``convert(ctx)`` writes
``ctx.output``. Every converter module also runs as
``python -m navigator.converters.<edge> --workspace WS --source REL --output REL [--params P.json]``,
which is what ``formats/<key>/reproduce.sh`` calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from navigator.errors import NavigatorError, UserInputError


@dataclass(frozen=True)
class ConverterParams:
    """No parameters."""


@dataclass
class ConvertContext:
    """What a converter gets: absolute paths, params, and the workspace facts."""

    workspace: Path
    source: Path
    output: Path
    params: Any
    device: str = "cpu"
    signature: Any = None                 # navigator.types.ModelSignature
    shape_profiles: list = field(default_factory=list)
    batch_dim: int | None = None
    samples_dir: Path | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("navigator.convert"))
    live: Any = None                      # navigator.sources.torch_support.LiveModel for edges that need the module


@dataclass
class ConvertOutcome:
    """What a converter reports beyond the file: the strategy that worked and
    the names of the tensors inside the artifact (our name -> theirs)."""

    exporter: str | None = None
    io_names: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    static_shapes: bool = False    # the artifact accepts only the samples' shapes


class Converter:
    """Base class of every edge. Subclasses set the class attributes."""

    name: ClassVar[str] = ""
    source: ClassVar[str] = ""
    target: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    Params: ClassVar[type] = ConverterParams
    # True when the edge needs the live source object (a torch.nn.Module): it runs
    # in the calling process for a live object, in a worker for file.py:factory.
    needs_live: ClassVar[bool] = False
    # For an edge that needs the live object: a format of the same parent whose artifact a
    # registered edge turns into this target without the object, in a worker. When a run with
    # parallel formats (--jobs > 1) converts that format first (torch_to_onnx: "torch_export"), this
    # target is made from it in a worker, beside the object's other work in the calling process;
    # should that fail, from the live object as usual (navigator.pipeline.execute.worker_route).
    via: ClassVar[str | None] = None
    # True for an edge calibrated on the stored samples (int8): its Params has ``calibration_samples``;
    # the run calibrates it on one part of the samples and verifies it on the others
    # (navigator.pipeline.tasks.calibration_split)
    calibrates: ClassVar[bool] = False
    # what the edge needs of the fork server's preload beyond its source format's (Format.preload):
    # torch.onnx.export's modules for an export to ONNX
    preload: ClassVar[str | None] = None

    def convert(self, ctx: ConvertContext) -> ConvertOutcome | None:
        raise NotImplementedError

    @classmethod
    def via_allowed(cls, params: Any) -> bool:
        """Whether this run's parameters let the target be made from :attr:`via` (a parameter may
        ask for a capture only the live object gives)."""
        return True

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        """Why this edge cannot run here beyond missing packages (no GPU, an old
        library version), or None. Checked without importing heavy modules."""
        return None

    @classmethod
    def reproduce_notes(cls, params: Any, source: str, output: str, status: Any) -> list[str]:
        """Extra lines for reproduce.sh (e.g. the equivalent trtexec command, as a
        comment or a command); paths are relative to the workspace root."""
        return []

    @classmethod
    def reproduce_py(cls, params: Any, source: str, output: str, status: Any) -> str | None:
        """The body of ``reproduce.py`` (plain framework calls a user can edit), or None."""
        return None

    @classmethod
    def params_from_config(cls, config) -> Any:
        """This edge's parameters for a run: the defaults, then the run's options
        that concern it (subclasses map CLI options such as ``--trt-plugins``),
        then ``converter_params: {<name>: {...}}`` from the config, which wins."""
        base = dataclasses.asdict(cls.Params()) if dataclasses.is_dataclass(cls.Params) else {}
        base.update(cls.options_from_config(config))
        base.update((getattr(config, "converter_params", None) or {}).get(cls.name, {}))
        return cls.params_from_dict(base)

    @classmethod
    def options_from_config(cls, config) -> dict:
        """Parameters taken from the run's top-level options; none by default."""
        return {}

    @classmethod
    def params_from_dict(cls, data: dict | None):
        """The ``Params`` of this edge from a mapping: unknown names and values of another type than
        the field's are one error line, before any work (a YAML typo must not reach a converter)."""
        data = dict(data or {})
        fields = {f.name: f for f in dataclasses.fields(cls.Params)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise UserInputError(f"converter {cls.name}: unknown parameter(s) {', '.join(unknown)}; "
                                 f"valid: {', '.join(sorted(fields)) or 'none'}")
        for name, value in data.items():
            _check_param(cls.name, name, value, fields[name].type)
        try:
            return cls.Params(**data)
        except (TypeError, ValueError) as e:
            raise UserInputError(f"converter {cls.name}: {e}") from None

    @classmethod
    def import_path(cls) -> str:
        return f"{cls.__module__}:{cls.__qualname__}"


_PARAM_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "tuple": (list, tuple),
                "list": (list, tuple), "dict": (dict,)}
PARAM_MAX_CHARS = 1 << 16    # a parameter's value, as JSON: they are flags and short lists


def _check_param(converter: str, name: str, value: Any, annotation: Any) -> None:
    """``value`` fits the field's annotation (``bool``, ``int | None``, ``tuple`` …; a type
    written otherwise is not checked here)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    options = [t.strip() for t in text.split("|")]
    if value is None:
        if "None" in options:
            return
        raise UserInputError(f"converter {converter}: parameter {name} may not be null")
    kinds = [k for t in options if t != "None" for k in _PARAM_TYPES.get(t.split("[")[0], (None,))]
    if None in kinds:
        return
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, tuple(kinds)):
        raise UserInputError(f"converter {converter}: parameter {name} must be {' or '.join(options)}, got "
                             f"{type(value).__name__} ({str(value)[:60]!r})")
    if len(json.dumps(value, default=str)) > PARAM_MAX_CHARS:
        raise UserInputError(f"converter {converter}: parameter {name} is larger than {PARAM_MAX_CHARS} characters")


def context_from_workspace(workspace: str | os.PathLike, source: str, output: str, params: Any,
                           device: str = "cpu", *, needs_live: bool = False, live: Any = None) -> ConvertContext:
    """A context for a converter run from files (workers and reproduce.sh). ``live``: the
    module of a live source, handed over by a job run in the calling process."""
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    ws = Workspace(Path(workspace).resolve())
    st = status_mod.load(ws.status_path)
    ctx = ConvertContext(workspace=ws.root, source=ws.abs(source), output=ws.abs(output), params=params,
                         device=device, signature=st.signature, shape_profiles=st.shape_profiles,
                         batch_dim=st.batch_dim, samples_dir=ws.inputs_dir)
    if needs_live:
        from navigator.sources.torch_support import live_from_workspace

        ctx.live = live_from_workspace(ws.root, st.signature, st.shape_profiles, live)
    return ctx


def main(converter_cls: type[Converter], argv: list[str] | None = None) -> int:
    """``python -m navigator.converters.<edge>``: run one edge from files."""
    parser = argparse.ArgumentParser(prog=f"python -m {converter_cls.__module__}",
                                     description=f"{converter_cls.source} -> {converter_cls.target}: "
                                                 f"{(converter_cls.__doc__ or '').strip().splitlines()[0]}")
    parser.add_argument("--workspace", required=True, help="the .nav.workspace folder")
    parser.add_argument("--source", required=True, help="source artifact, relative to the workspace")
    parser.add_argument("--output", required=True, help="output artifact, relative to the workspace")
    parser.add_argument("--params", help="JSON file with the converter's parameters")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        params = {}
        if args.params:
            params = json.loads(Path(args.params).read_text())
        ctx = context_from_workspace(args.workspace, args.source, args.output,
                                     converter_cls.params_from_dict(params), args.device,
                                     needs_live=converter_cls.needs_live)
        ctx.output.parent.mkdir(parents=True, exist_ok=True)
        outcome = converter_cls().convert(ctx) or ConvertOutcome()
        print(json.dumps({"output": str(ctx.output), "exporter": outcome.exporter, "io_names": outcome.io_names}))
        return 0
    except NavigatorError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
