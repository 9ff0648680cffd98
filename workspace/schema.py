"""The JSON Schema of status.yaml v5 (``schema/status.v5.schema.json``) and a validator.

The schema is for users' CI jobs and for our tests; loading a status file checks
the types and values of what it holds against it (``types_only``: ``status.loads``
fills defaults for missing keys and ignores unknown ones). ``jsonschema`` is
imported only inside :func:`validate`.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from navigator.errors import DependencyMissing, UserInputError

SCHEMA_FILE = "status.v5.schema.json"   # the current version; the v1-v4 schemas stay for their files
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def schema_path() -> Path:
    """Where the schema file of the current status.yaml version is installed (package data)."""
    return Path(__file__).resolve().parent / "schema" / SCHEMA_FILE


@lru_cache(maxsize=1)
def _schema() -> dict:
    return json.loads(schema_path().read_text(encoding="utf-8"))


def json_path(parts) -> str:
    """``["formats", "onnx-fp16", "runners", 0]`` -> ``$.formats['onnx-fp16'].runners[0]``."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}"
        else:
            text += "[" + repr(str(part)) + "]"
    return text


@lru_cache(maxsize=1)
def _types_only() -> dict:
    """The schema without its ``required`` lists: the types and values of what is there."""
    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "required"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(_schema())


def validate(data: dict, *, source: str = "status.yaml", types_only: bool = False) -> None:
    """Check a loaded status mapping against the current schema (``types_only``: missing keys
    allowed, as the loader fills defaults for them).

    Raises ``UserInputError`` with one line naming the JSON path of the most
    relevant error (jsonschema's ``best_match``).
    """
    try:
        import jsonschema
        from jsonschema.exceptions import best_match
    except ImportError:  # pragma: no cover - a test dependency
        raise DependencyMissing("jsonschema", "validating status.yaml against its schema") from None

    validator = jsonschema.Draft202012Validator(_types_only() if types_only else _schema())
    error = best_match(validator.iter_errors(data))
    if error is None:
        return
    message = " ".join(error.message.split())
    if len(message) > 200:
        message = message[:197] + "..."
    raise UserInputError(f"{source}: {json_path(error.absolute_path)}: {message}")
