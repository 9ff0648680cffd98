"""``"package.module:Qual.Name"``: how records name code that is imported only when used
(a runner class, a converter, a format's artifact check or debug side)."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(spec: str) -> Any:
    """The object ``spec`` names: the module is imported, then each dotted part of the name
    looked up. Raises ImportError or AttributeError as the import or lookup does, and
    ValueError for a spec without ``module:name``."""
    module, sep, qualname = spec.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"{spec!r} is not of the form 'module:name'")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
