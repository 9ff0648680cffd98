"""Core value types shared by every stage: records that round-trip through
status.yaml, tensor specs and model signatures.

``Record`` gives a dataclass ``to_dict``/``from_dict``; ``from_dict`` ignores
unknown keys (a newer writer may add fields) and rebuilds nested records
named in ``_nested``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        return value.item()
    return value


def _has_default_factory(cls, name: str) -> bool:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default_factory is not dataclasses.MISSING
    return False


class Record:
    """Mixin for dataclasses stored in status.yaml."""

    # field name -> (record class, "one" | "list" | "dict")
    _nested: ClassVar[dict[str, tuple[type, str]]] = {}

    def to_dict(self) -> dict:
        """Every field, encoded; fields marked ``metadata={"transient": True}`` (live objects of
        this process) are left out."""
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if not f.metadata.get("transient")}

    @classmethod
    def from_dict(cls, data: dict | None):
        if data is None:
            return None
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs = {}
        for key, value in data.items():
            if key not in known:
                continue  # unknown keys are ignored on purpose
            if value is None and _has_default_factory(cls, key):
                continue  # `formats: null` reads as an empty mapping, not None
            nested = cls._nested.get(key)
            if nested is not None and value is not None:
                sub, kind = nested
                if kind == "one":
                    value = sub.from_dict(value)
                elif kind == "list":
                    value = [sub.from_dict(v) for v in value]
                elif kind == "dict":
                    value = {k: sub.from_dict(v) for k, v in value.items()}
            kwargs[key] = value
        return cls(**kwargs)


@dataclass
class TensorSpec(Record):
    """One model input or output: ``shape`` uses -1 for a dynamic dim."""

    name: str
    dtype: str
    shape: list[int]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def dynamic_axes(self) -> list[int]:
        return [i for i, d in enumerate(self.shape) if d < 0]

    def is_dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)


@dataclass
class ModelSignature(Record):
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)

    _nested: ClassVar = {"inputs": (TensorSpec, "list"), "outputs": (TensorSpec, "list")}

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def input(self, name: str) -> TensorSpec:
        for t in self.inputs:
            if t.name == name:
                return t
        raise KeyError(name)

    def output(self, name: str) -> TensorSpec:
        for t in self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)


# A shape profile: {input name: {"min": [...], "opt": [...], "max": [...]}}
ShapeProfile = dict
