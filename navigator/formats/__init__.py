"""Formats: artifact keys and one declarative :class:`Format` record per format.

    >>> from navigator import formats
    >>> formats.get("openvino").artifact
    'model.xml'
    >>> formats.parse_key("onnx-optimized-fp16").precision
    'fp16'

Importing this package imports no framework; plugins load on first lookup of an
unknown name.
"""

from __future__ import annotations

from typing import Any

from navigator.formats.descriptor import PYTHON, Format, RunnerSpec, Serving
from navigator.formats.keys import PRECISIONS, Key, is_key, parse_key, preference_rank
from navigator.formats.registry import registry


def get(name: str) -> Format:
    """The record of format ``name`` (UserInputError listing the known ones)."""
    return registry.get(name)


def find(name: str) -> Format | None:
    """The record of format ``name``, or None when no installed record has that name (a plugin's)."""
    return get(name) if registry.has(name) else None


def all_formats() -> list[Format]:
    return registry.all()


def by_suffix(suffix: str) -> str | None:
    """The format a model file with ``suffix`` is a source of (Format.source_suffixes), or None."""
    suffix = suffix.lower()
    return next((f.name for f in registry.all() if suffix in f.source_suffixes), None)


def file_name(fmt: str) -> str:
    """The artifact's file name inside ``formats/<key>/``."""
    return registry.get(fmt).artifact


def serving_refusal(key: str, fs: Any) -> str | None:
    """Why a server would not run format ``key`` (its status record ``fs``) as it was verified: a
    runner that checks how the server runs it (RunnerSpec.serving_check: OpenVINO's default
    precision) did not verify it. None when it did, was skipped, or there is none."""
    for rkey, rs in fs.runners.items():
        if registry.serving_check(fs.format, rkey) and rs.verify.status not in ("ok", "skipped"):
            return (f"{key}: Triton would run it as {rkey} does, and that was {rs.verify.status} "
                    f"({(rs.verify.reason or '')[:200]}); serve another format (--formats onnx) or verify with "
                    "real samples")
    return None


__all__ = ["Format", "RunnerSpec", "Serving", "PYTHON", "Key", "PRECISIONS", "parse_key", "is_key",
           "preference_rank", "get", "find", "all_formats", "file_name", "registry", "serving_refusal"]
