"""What Triton serves a format with: the format record's native backend
(:mod:`navigator.formats`), its opt-in native backend (``--aoti-native``), or
the Python backend through a generated ``model.py`` when the record names a
``python_loader`` (:mod:`navigator.triton.python_backend`), e.g. torch_export,
and any format with ``--python-backend``.
"""

from __future__ import annotations

import re

from navigator.errors import UserInputError
from navigator.formats import PYTHON, Serving

__all__ = ["PYTHON", "Serving", "serving_for", "servable", "python_loadable", "pytorch_names"]

_INDEXED = re.compile(r"^.+__\d+$")


def python_loadable() -> list[str]:
    """Formats the generated model.py can load."""
    from navigator import formats

    return [f.name for f in formats.all_formats() if f.python_loader]


def servable(fmt: str) -> bool:
    from navigator import formats

    return formats.registry.has(fmt) and formats.get(fmt).servable


def serving_for(fmt: str, *, python_backend: bool, aoti_native: bool) -> Serving:
    """How Triton serves ``fmt``; raises UserInputError when it cannot."""
    from navigator import formats

    record = formats.get(fmt)
    if record.not_servable:
        raise UserInputError(f"format {fmt} cannot be served by Triton: {record.not_servable}")
    if python_backend:
        if not record.python_loader:
            raise UserInputError(f"--python-backend: the generated model.py cannot load format {fmt} "
                                 f"(it loads {', '.join(python_loadable())}); serve it natively")
        return PYTHON
    if aoti_native and record.native_opt_in is not None:
        return record.native_opt_in
    if record.serving is not None:
        return record.serving
    if record.python_loader:
        return PYTHON
    raise UserInputError(f"format {fmt} has no Triton backend known to navigator")


def pytorch_names(our_names: list[str], artifact_names: list[str], prefix: str) -> tuple[list[str], bool]:
    """Triton names for the PyTorch backend, which binds tensors by ``<name>__<index>``.

    The artifact's names (the workspace's ``io_names``) are kept when they already
    follow the convention (the TorchScript export records ``INPUT__0``…); otherwise
    ``<PREFIX>__<i>`` is generated from the signature order. Returns (names, generated)."""
    if artifact_names and all(_INDEXED.match(n) for n in artifact_names) \
            and sorted(int(n.rsplit("__", 1)[1]) for n in artifact_names) == list(range(len(artifact_names))) \
            and all(n.count("__") == 1 for n in artifact_names):
        return list(artifact_names), False
    return [f"{prefix}__{i}" for i in range(len(our_names))], True


def fixed_batch(backend: str, platform: str = "") -> bool:
    """True when every format a config's backend / platform serves fixes its largest batch in
    the artifact (a TensorRT plan, an AOTInductor package): raising max_batch_size past the
    profile it was built for fails to load. False for a backend that also serves flexible
    artifacts (pytorch_libtorch serves TorchScript as well as Torch-TensorRT)."""
    from navigator import formats

    served = [record.fixed_batch for record in formats.all_formats()
              for serving in (record.serving, record.native_opt_in)
              if serving is not None and serving.backend == backend
              and (not platform or not serving.platform or platform == serving.platform)]
    return bool(served) and all(served)
