"""A source: what the user hands in, and how it becomes the first artifact.

Each source knows its format, a default model name, how to read its signature,
how to bring itself into the workspace (export) and how to compute the reference
outputs; :mod:`navigator.sources.onnx`, ``.torch`` and ``.tensorflow`` hold the
kinds, :func:`navigator.sources.open_source` recognises them. Digests
(``Source.sha256``) decide whether a re-run may resume.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.types import ModelSignature


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_tree(root: Path) -> str:
    """One digest of a directory tree (a SavedModel): every file's path relative to
    ``root``, size and content sha256, in sorted order, read in 1 MiB blocks. Symlinked
    files count by their content; symlinked folders are not entered (os.walk)."""
    h = hashlib.sha256(b"navigator-tree-v1\n")
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            h.update(f"{rel}\0{path.stat().st_size}\0{sha256_file(path)}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def sha256_factory(spec: str, reference_digest: str | None) -> str:
    """The digest a ``file.py:factory`` source resumes by: the factory's name, its
    file, every other ``*.py`` file of the same folder (where its model classes
    usually live: a change there is a change of the model) and the digest of the
    reference outputs it computed on the samples (weights it loads from elsewhere,
    a package's code: whatever changes the numbers changes the digest). Code
    outside that folder that does not change the outputs on the samples goes
    unseen: --force redoes everything."""
    file, _, attr = spec.rpartition(":")
    path = Path(file).resolve()
    h = hashlib.sha256(b"navigator-factory-v1\n")
    h.update(f"{attr}\0{sha256_file(path)}\n".encode())
    for sibling in sorted(path.parent.glob("*.py")):
        if sibling != path and sibling.is_file():
            h.update(f"{sibling.name}\0{sha256_file(sibling)}\n".encode("utf-8", "surrogateescape"))
    h.update(f"reference\0{reference_digest}\n".encode())
    return h.hexdigest()


@dataclass
class Source:
    format: str                    # source format: onnx, torch, savedmodel, ...
    key: str                       # key of the first artifact
    name: str                      # default model name
    path: Path | None = None
    obj: Any = None                # live object (nn.Module, Keras model)
    signature: ModelSignature | None = None
    index_bounds: dict[str, Any] = field(default_factory=dict)
    value_ranges: dict[str, Any] = field(default_factory=dict)   # default [low, high) of generated inputs (flags win)
    isolated: bool = True          # False when exported in the calling process
    reference_runner: Any = None           # RunnerTask computing the reference (None: computed in this process)
    # RunnerTask running the source the way its runners run it: the reference against it is the source's
    # own legitimate variation, the floor of the fp32 tolerances (navigator.validators.tolerances)
    variation_runner: Any = None
    notes: list[str] = field(default_factory=list)   # what opening the source decided for the user (shown as warnings)
    digest: str | None = field(default=None, repr=False, compare=False)   # sha256(), computed once

    def sha256(self) -> str | None:
        """What resuming compares (status.yaml's model.sha256): the bytes of the
        model; None for a source that has none (a live object): it starts afresh."""
        if self.digest is None:
            self.digest = self._digest()
        return self.digest

    def _digest(self) -> str | None:
        return sha256_file(self.path) if self.path and self.path.is_file() else None

    def identity(self) -> str | None:
        """What status.yaml's ``model.path`` names: the file or folder the user gave (resolved),
        ``file.py:factory`` for a factory; None for a live object (nothing on disk names it)."""
        return str(self.path.resolve()) if self.path and self.obj is None else None

    def generate(self, signature: ModelSignature, **options: Any) -> list[dict[str, Any]]:
        """Generated sample batches (:func:`navigator.sources.samples.generate`'s options); a source
        that knows what its inputs look like (a Hugging Face model's padding masks) overrides it."""
        from navigator.sources import samples

        return samples.generate(signature, **options)

    def derive_profile(self, signature: ModelSignature, batches: list[dict[str, Any]], *, batch_dim: int | None,
                       max_batch_size: int) -> tuple[dict[str, Any], list[str]]:
        """The shape profile without --min/--max-shapes (:func:`navigator.sources.samples.derive_profile`);
        a source that knows the sizes its model takes overrides it."""
        from navigator.sources import samples

        return samples.derive_profile(signature, batches, batch_dim=batch_dim, max_batch_size=max_batch_size)

    def live_callable(self) -> Any:
        """What in-process jobs call for a live object of this process (RunContext.live); None: nothing."""
        return None

    def rebuild_lines(self, key: str, artifact: str, given: str | None) -> list[str] | None:
        """reproduce.sh's lines that bring the source's artifact back, when not a copy of what the
        user gave (``given``); None: the copy."""
        return None

    def export(self, ws: Any, out_path: Path) -> dict[str, Any]:
        raise NotImplementedError
