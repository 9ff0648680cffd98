"""A Triton-ready model repository from a workspace (``navigator triton WS``).

    from navigator.triton import TritonOptions, emit
    result = emit("navigator_workdir/m.nav.workspace", TritonOptions(formats=("all",)))
    result.models     # [EmittedModel(name, version, role, key, backend, python, path)]

Parts: :mod:`~navigator.triton.options` (the options and their one adapter),
:mod:`~navigator.triton.backends` (what serves each format),
:mod:`~navigator.triton.config` (config.pbtxt as a ModelConfig message),
:mod:`~navigator.triton.python_backend` (generated model.py, environment recipe),
:mod:`~navigator.triton.ensemble` (pre/post-processing steps),
:mod:`~navigator.triton.ensemble_rules` (Triton's ensemble rules) and :mod:`~navigator.triton.repository` (layout,
versions, atomic writes; its docstring gives the naming rules). Importing this package imports neither
tritonclient nor protobuf.
"""

from __future__ import annotations

from navigator.triton.options import TritonOptions, from_mapping

__all__ = ["TritonOptions", "emit", "from_mapping"]


def emit(workspace, options: TritonOptions | dict | None = None, *, status=None, lock: bool = True):
    """Write the repository for ``workspace`` (a workspace or a workdir holding one);
    ``options`` is a TritonOptions or a mapping of the CLI's options in snake_case.
    Returns :class:`navigator.triton.repository.EmitResult`."""
    from navigator.triton import repository

    if isinstance(options, dict):
        options = from_mapping(options, source="triton options")
    return repository.emit(workspace, options, status=status, lock=lock)


def after_convert(workspace, status, repo, reporter) -> None:
    """``navigator convert --triton-repo DIR``: the best format into ``repo``, from the
    record the run just saved; a run with no verified format only warns."""
    if status.best is None:
        reporter.warn(f"--triton-repo {repo}: nothing was verified, so no Triton model was written")
        return
    for line in emit(workspace, TritonOptions(repo=str(repo)), status=status, lock=False).lines():
        reporter.info(line)
