"""Artifact keys: ``<format>[-<variant>][-<precision>]`` (``onnx-optimized-fp16``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from navigator.errors import UserInputError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")

_KEY = re.compile(r"^(?P<format>[a-z][a-z0-9_]*)(?:-(?P<variant>[a-z][a-z0-9_]*?))??"
                  r"(?:-(?P<precision>fp32|tf32|fp16|bf16|int8|fp8))?$")


@dataclass(frozen=True)
class Key:
    format: str
    variant: str | None = None
    precision: str = "fp32"

    def __str__(self) -> str:
        parts = [self.format]
        if self.variant:
            parts.append(self.variant)
        if self.precision != "fp32":
            parts.append(self.precision)
        return "-".join(parts)


def parse_key(text: str) -> Key:
    """``onnx-optimized-fp16`` -> Key("onnx", "optimized", "fp16"); the format must be registered."""
    from navigator.formats.registry import registry

    m = _KEY.match(text or "")
    if not m or not registry.has(m.group("format")):
        raise UserInputError(f"{text!r} is not a format key (<format>[-<variant>][-<precision>], formats: "
                             f"{', '.join(registry.names())})")
    return Key(m.group("format"), m.group("variant"), m.group("precision") or "fp32")


def is_key(text: str) -> bool:
    try:
        parse_key(text)
        return True
    except UserInputError:
        return False


def preference_rank(key: str) -> tuple[int, int, str]:
    """Rank of a key for ``best`` by preference, a total order: its format's preference, then a
    variant before the plain key (it was made from it to run faster), then the key's name, so two
    formats of equal preference (a plugin's beside a built-in) rank the same in every run."""
    from navigator.formats.registry import registry

    k = parse_key(key)
    return registry.get(k.format).preference, (0 if k.variant else 1), key
