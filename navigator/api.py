"""The Python API: ``navigator.convert(model, samples, ...)`` at the end of training.

    result = navigator.convert("model.onnx", targets=["onnx", "onnx-optimized"])
    result.best            # Best(key, runner, batch_size, throughput, basis)
    with result.runner("onnx-optimized") as run:
        outputs = run({"ids": ids})

Errors are typed exceptions (``navigator.errors``); a failed target does not
raise unless ``raise_on_failure=True``: inspect ``result.ok`` / ``result.failures``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from navigator.config import NavigatorConfig, from_mapping
from navigator.errors import UserInputError, VerificationFailed


@dataclass
class Result:
    """What a run produced: the parsed status.yaml and where the workspace is."""

    workspace: Path
    status: Any                              # navigator.workspace.status.Status
    exit_code: int = 0
    failures: list[str] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    memory_tree: Any = field(default=None, repr=False)   # a torch output tree status.yaml cannot hold

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def best(self):
        return self.status.best

    @property
    def formats(self) -> dict:
        return self.status.formats

    def to_triton(self, repo: str | os.PathLike | None = None, **options):
        """Write a Triton model repository (default ``<workspace>/triton/``), as
        ``navigator triton WS``; ``options`` are its options in snake_case
        (``formats="all"``, ``max_batch_size=16``, ``kind="gpu"``, ``preprocess="pre.py"``).
        Returns ``navigator.triton.repository.EmitResult`` (``.repo``, ``.version``, ``.models``)."""
        from navigator.triton import emit, from_mapping

        if repo is not None:
            options["repo"] = os.fspath(repo)
        return emit(self.workspace, from_mapping(options, source="result.to_triton()"), status=self.status)

    def gate(self, policy, *, baseline: str | os.PathLike | None = None, junit: str | os.PathLike | None = None,
             markdown: str | os.PathLike | None = None, raise_on_failure: bool = False):
        """Check this workspace against a release policy (a YAML path or a mapping, as
        ``navigator gate``): returns a ``navigator.tools.gate.GateResult`` (``.passed``,
        ``.checks``), written to report/gate.json (and ``junit`` / ``markdown`` when
        given). A malformed policy raises UserInputError; a failed gate raises
        GateFailed only with ``raise_on_failure=True``."""
        from navigator.errors import GateFailed
        from navigator.tools.gate import evaluate

        result = evaluate(self.workspace, policy, baseline=baseline)
        result.write(self.workspace, junit=junit, markdown=markdown)
        if raise_on_failure and not result.passed:
            raise GateFailed("; ".join(f"{c.name}: {c.message}" for c in result.failures))
        return result

    def unflatten(self, outputs: dict):
        """Outputs by name (as runners return them) back in the source model's own
        structure (a PyTorch module's dict / tuple / namedtuple); unchanged otherwise."""
        from navigator.sources.torch import record_dir
        from navigator.workspace.layout import Workspace

        io_file = record_dir(Workspace(self.workspace)) / "io.json"
        if not io_file.is_file():
            return outputs
        from navigator.sources import torch_support

        return torch_support.unflatten(outputs, torch_support.read_io(io_file.parent), self.memory_tree)

    def runner(self, key: str | None = None, runner: str | None = None):
        """A loaded, active runner for format ``key`` (default: the best one). Use it
        as a callable on ``{input name: ndarray}``; close it with ``deactivate()``
        or a ``with`` block."""
        from navigator import runners

        key = key or (self.best.key if self.best else None)
        if key is None:
            raise UserInputError("no format was verified; name one with result.runner(key)")
        fs = self.status.formats.get(key)
        if fs is None:
            raise UserInputError(f"no format {key!r} in this workspace; have: {', '.join(self.status.formats)}")
        if fs.convert.status != "ok":
            raise UserInputError(f"format {key!r} was not converted ({fs.convert.reason})")
        chosen = runner or (self.best.runner if self.best and self.best.key == key else None) or next(
            (k for k, r in fs.runners.items() if r.verify.status == "ok"), next(iter(fs.runners), None))
        if chosen not in fs.runners:
            raise UserInputError(f"format {key!r} has no runner {chosen!r}; have: {', '.join(fs.runners)}")
        rs = fs.runners[chosen]
        spec = runners.RunnerSpec(rs.runner, rs.device, rs.provider)
        sig = self.status.signature
        names = {"inputs": [fs.io_names.get(n, n) for n in sig.input_names],
                 "outputs": [fs.io_names.get(n, n) for n in sig.output_names]}
        # the options it was verified with, and the runtime options its profile kept (verified too):
        # what is verified is what the caller gets
        options = runners.verify_options(fs.format, fs.precision, self.status.config.get("device") or rs.device)
        options |= rs.profile.options or {}
        runner_obj = runners.create(spec, self.workspace / fs.path, **names, **options).activate()
        return _Renamed(runner_obj, fs.io_names) if any(k != v for k, v in fs.io_names.items()) else runner_obj


class _Renamed:
    """A runner fed and answering with the workspace's names when the artifact's
    own names differ (TorchScript's INPUT__0 ...)."""

    def __init__(self, runner, io_names: dict):
        self.runner = runner
        self.to_artifact = dict(io_names)
        self.from_artifact = {v: k for k, v in io_names.items()}

    def infer(self, feeds: dict) -> dict:
        out = self.runner.infer({self.to_artifact.get(k, k): v for k, v in feeds.items()})
        return {self.from_artifact.get(k, k): v for k, v in out.items()}

    __call__ = infer

    def deactivate(self) -> None:
        self.runner.deactivate()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.deactivate()


def run_convert(model: Any, samples: Any, config: NavigatorConfig, reporter, *, verify_func: Callable | None = None):
    from navigator import pipeline

    return pipeline.run(model, samples, config, reporter, verify_func=verify_func)


def convert(model: Any, samples: Any = None, *, targets=None, workdir: str | os.PathLike | None = None,
            config: NavigatorConfig | dict | None = None, verify_func: Callable | None = None,
            raise_on_failure: bool = False, progress: bool | None = None,
            on_progress: Callable | None = None, **options) -> Result:
    """Convert ``model`` to verified, profiled formats.

    ``model``: a path (an .onnx file). ``samples``: an iterable of batches (dicts,
    tuples or single arrays; a DataLoader is capped by ``sample_count``), a folder of
    ``.npz`` batches (as ``--samples``) or None to generate them. ``options``: the CLI's options in snake_case
    (``max_batch_size=32``, ``atol={"logits": 1e-3}``, ``shapes="ids:8x16"``).
    ``verify_func(reference, output) -> bool`` is called per stored sample on top
    of the numeric checks. ``progress``: print step lines (default: only on a terminal);
    ``on_progress(event)``: called with a ``navigator.console.ProgressEvent`` as each step starts,
    every 15 s while it runs, and as it ends (the ``navigator.progress`` logger gets the same)."""
    from navigator.console import Reporter

    if isinstance(config, dict):
        config = from_mapping(config, source="config")
    config = config or NavigatorConfig()
    extra = dict(options)
    if isinstance(samples, (str, os.PathLike)):   # a folder of .npz batches, as --samples
        extra["samples"], samples = os.fspath(samples), None
    if targets is not None:
        extra["targets"] = targets
    if workdir is not None:
        extra["workdir"] = os.fspath(workdir)
    config = from_mapping(extra, base=config, source="navigator.convert()")
    reporter = Reporter("auto" if progress or progress is None else "quiet", on_progress=on_progress)
    if progress is None and reporter.mode != "rich":   # by default step lines only on a terminal
        reporter = Reporter("quiet", on_progress=on_progress)
    outcome = run_convert(model, samples, config, reporter, verify_func=verify_func)
    result = Result(workspace=outcome.workspace.root, status=outcome.status, exit_code=outcome.exit_code,
                    failures=outcome.failures, timings=outcome.timings, memory_tree=outcome.memory_tree)
    if raise_on_failure and outcome.exit_code:
        raise VerificationFailed("; ".join(outcome.failures))
    return result


def load(workspace: str | os.PathLike) -> Result:
    """The Result of an earlier run, from its workspace (or a workdir holding one)."""
    from navigator.pipeline import outcome_code
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace

    ws = Workspace.find(workspace)
    st = status_mod.load(ws.status_path)
    code, failures = outcome_code(st, list(st.formats))
    return Result(workspace=ws.root, status=st, exit_code=code, failures=failures)
