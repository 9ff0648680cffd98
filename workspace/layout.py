"""The ``<workdir>/<model>.nav.workspace/`` folder and where things live in it."""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from navigator.errors import UserInputError

SUFFIX = ".nav.workspace"
DEFAULT_WORKDIR = "navigator_workdir"
_NAME_OK = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME_LENGTH = 100


def sanitize_model_name(name: str) -> str:
    """A model name safe as one path component: ASCII letters, digits, ``._-``.

    Unicode is folded to ASCII where it can be, other characters become ``_``,
    path separators and leading dots are removed, so ``../x`` gives ``x`` and
    nothing is ever written outside the workdir. A name longer than
    ``MAX_NAME_LENGTH`` is cut and ends with ``-`` and 8 hex digits of its hash.
    """
    text = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode()
    text = re.sub(r"_+", "_", _NAME_OK.sub("_", text)).strip("._-")
    if not text:
        raise UserInputError(f"model name {name!r} has no usable characters",
                             hint="pass --model-name with letters or digits")
    if len(text) > MAX_NAME_LENGTH:
        # Cut, and keep two long names that share a prefix apart with a hash of the full name.
        digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:8]
        text = f"{text[:MAX_NAME_LENGTH - 9].rstrip('._-')}-{digest}"
    return text


@dataclass(frozen=True)
class Workspace:
    """Paths inside one workspace. Creating the object writes nothing."""

    root: Path

    def __post_init__(self) -> None:
        # Always absolute and resolved: ``abs`` and ``rel`` compare against it.
        object.__setattr__(self, "root", Path(self.root).resolve())

    @classmethod
    def for_model(cls, workdir: str | os.PathLike, model_name: str) -> "Workspace":
        workdir = Path(workdir).resolve()
        root = (workdir / f"{sanitize_model_name(model_name)}{SUFFIX}").resolve()
        if root.parent != workdir:  # only through a symlink named like the workspace
            raise UserInputError(f"model name {model_name!r} would write outside {workdir}")
        return cls(root)

    @classmethod
    def find(cls, path: str | os.PathLike) -> "Workspace":
        """A workspace path, or a workdir that holds exactly one workspace."""
        p = Path(path)
        if not p.exists():
            raise UserInputError(f"{p}: no such workspace or workdir")
        if (p / "status.yaml").is_file():
            return cls(p.resolve())
        if p.is_dir():
            found = sorted(c for c in p.iterdir() if c.name.endswith(SUFFIX) and (c / "status.yaml").is_file())
            if len(found) == 1:
                return cls(found[0].resolve())
            if len(found) > 1:
                names = ", ".join(c.name for c in found)
                raise UserInputError(f"{p} holds {len(found)} workspaces ({names}); name one of them")
        raise UserInputError(f"{p}: not a Navigator workspace (no status.yaml) nor a workdir holding one")

    @property
    def name(self) -> str:
        return self.root.name[: -len(SUFFIX)] if self.root.name.endswith(SUFFIX) else self.root.name

    @property
    def status_path(self) -> Path:
        return self.root / "status.yaml"

    @property
    def lock_path(self) -> Path:
        return self.root / "navigator.lock"

    @property
    def log_path(self) -> Path:
        return self.root / "navigator.log"

    @property
    def inputs_dir(self) -> Path:
        return self.root / "samples" / "inputs"

    @property
    def reference_dir(self) -> Path:
        return self.root / "samples" / "reference"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def triton_dir(self) -> Path:
        return self.root / "triton"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    def format_dir(self, key: str) -> Path:
        return self.root / "formats" / key

    def outputs_dir(self, key: str, runner_key: str) -> Path:
        return self.format_dir(key) / "outputs" / runner_key

    def sample_file(self, kind: str, index: int) -> Path:
        return self.root / "samples" / kind / f"{index:03d}.npz"

    def rel(self, path: str | os.PathLike) -> str:
        """``path`` relative to the workspace root, as status.yaml stores paths."""
        return os.path.relpath(Path(path).resolve(), self.root)

    def abs(self, rel: str) -> Path:
        """Resolve a workspace-relative path; refuses to leave the workspace."""
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise UserInputError(f"path {rel!r} in status.yaml points outside the workspace")
        return p
