"""Navigator: the fastest verified deployable formats of a trained model.

``import navigator`` is cheap: the API, torch, onnxruntime and friends load on
first use.

    >>> import navigator
    >>> result = navigator.convert("model.onnx")          # doctest: +SKIP
    >>> result.best.key, result.best.throughput           # doctest: +SKIP
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from navigator._version import __version__

# A library installs no handlers: the CLI and the API entry decide where records go.
logging.getLogger("navigator").addHandler(logging.NullHandler())

if TYPE_CHECKING:  # pragma: no cover
    from navigator.api import Result, convert
    from navigator.config import NavigatorConfig
    from navigator.many import convert_many

__all__ = ["__version__", "convert", "convert_many", "load", "Result", "NavigatorConfig", "errors"]

_LAZY = {
    "convert": ("navigator.api", "convert"),
    "convert_many": ("navigator.many", "convert_many"),
    "load": ("navigator.api", "load"),
    "Result": ("navigator.api", "Result"),
    "NavigatorConfig": ("navigator.config", "NavigatorConfig"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name == "errors":
        import navigator.errors as errors

        return errors
    raise AttributeError(f"module 'navigator' has no attribute {name!r}")
