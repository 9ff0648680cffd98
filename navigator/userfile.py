"""Importing a user's Python file (a model factory, a Triton pre/post-processing step)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from navigator.errors import UserInputError


def import_file(path: str | Path, *, what: str, prefix: str = "navigator_user", keep: bool = True) -> ModuleType:
    """Import ``path`` as a module named after its resolved path; errors in it are the
    user's (one line naming ``what``). Its folder goes on sys.path so it can import its
    neighbours; ``keep`` leaves it in sys.modules (pickling and torch need that)."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{what} {path}: no such file")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserInputError(f"{what} {path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise UserInputError(f"{what} {path}: importing it failed ({type(e).__name__}: {e})") from None
    if not keep:
        sys.modules.pop(name, None)
    return module
