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
_BATCH_FILE = re.compile(r"(.+)-bs(\d+)")
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


def check_utf8(path: Path, option: str) -> Path:
    """``path`` itself, when it is valid UTF-8: onnx and onnxruntime open files by UTF-8 names only,
    so a workspace under any other name could never be verified (found before anything is written)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise UserInputError(f"{option} {shown}: the path is not valid UTF-8, and onnx/onnxruntime open files by "
                             "UTF-8 names only; choose a folder with a UTF-8 name") from None
    return path


@dataclass(frozen=True)
class Workspace:
    """Paths inside one workspace. Creating the object writes nothing."""

    root: Path

    def __post_init__(self) -> None:
        # Always absolute and resolved: ``abs`` and ``rel`` compare against it.
        object.__setattr__(self, "root", Path(self.root).resolve())

    @classmethod
    def for_model(cls, workdir: str | os.PathLike, model_name: str) -> "Workspace":
        workdir = check_utf8(Path(workdir).resolve(), "--workdir")
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

    @classmethod
    def find_all(cls, path: str | os.PathLike) -> list["Workspace"]:
        """Every workspace ``path`` names: itself when it is one, else each workspace with a
        status.yaml in that workdir, by name (none: the error :meth:`find` gives)."""
        p = Path(path)
        if p.is_dir() and not (p / "status.yaml").is_file():
            found = sorted(c for c in p.iterdir() if c.name.endswith(SUFFIX) and (c / "status.yaml").is_file())
            if found:
                return [cls(c.resolve()) for c in found]
        return [cls.find(p)]

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
    def reset_dir(self) -> Path:
        """A stateful model's reference replayed with its state reset halfway (the state's control)."""
        return self.root / "samples" / "reset"

    def reset_file(self, sample: str) -> Path:
        return self.reset_dir / f"{sample}.npz"

    @property
    def variation_dir(self) -> Path:
        """The source's outputs run the way the runners run it (the fp32 floor's measure)."""
        return self.root / "samples" / "variation"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def triton_dir(self) -> Path:
        return self.root / "triton"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    @property
    def serving_dir(self) -> Path:
        """``serving/``: the last serving profile (``navigator profile --triton``)."""
        return self.root / "serving"

    @property
    def serving_partial_dir(self) -> Path:
        """Where a serving profile writes until it ends with a result (then renamed to serving/)."""
        return self.root / ".serving.partial"

    @property
    def placement_path(self) -> Path:
        """``placement.yaml``: where each step ran and every attempt (``navigator convert-many``)."""
        return self.root / "placement.yaml"

    @property
    def gate_report(self) -> Path:
        return self.report_dir / "gate.json"

    def debug_report(self, key: str) -> Path:
        return self.report_dir / f"debug-{key}.json"

    @property
    def record_dirs(self) -> list[Path]:
        """The folders that hold the run's own records (no user output may be written inside)."""
        return [self.formats_dir, self.samples_dir, self.jobs_dir]

    @property
    def formats_dir(self) -> Path:
        return self.root / "formats"

    @property
    def samples_dir(self) -> Path:
        return self.root / "samples"

    @property
    def reference_log(self) -> Path:
        """The reference stage's log (the worker computing it writes it)."""
        return self.samples_dir / "reference.log"

    @property
    def reference_worker_log(self) -> Path:
        """stdout/stderr of a worker run only for the reference (--reference KEY)."""
        return self.samples_dir / "reference-worker.log"

    # subfolders a fresh run clears (keep=True: a resumed run keeps all but jobs/)
    def scratch_dirs(self, *, keep: bool) -> list[Path]:
        return [self.jobs_dir] if keep else [self.formats_dir, self.samples_dir, self.jobs_dir, self.report_dir]

    @property
    def race_log(self) -> Path:
        """stdout/stderr of the race worker, which profiles every format (navigator.execution.race_job)."""
        return self.jobs_dir / "race.log"

    @property
    def race_wake(self) -> Path:
        """A FIFO through which the calling process wakes the race worker once it has written a
        window the worker asked for to :attr:`race_reply` (navigator.execution.race_job)."""
        return self.jobs_dir / "race.wake"

    @property
    def race_ask(self) -> Path:
        """A FIFO through which the race worker wakes the calling process when it asks for a
        window (the parent otherwise reads the worker's events every 50 ms)."""
        return self.jobs_dir / "race.ask"

    @property
    def race_reply(self) -> Path:
        return self.jobs_dir / "race.reply.json"

    def stale_partial_files(self) -> list[Path]:
        """Files that a writer killed mid-write left behind anywhere in the workspace: the hidden temp
        files of atomic writes (``.<name>.<random>.tmp``, navigator.workspace.atomic) and copies in
        progress (``<name>.part``); regular files only, links and special files are not ours. Garbage
        whenever no run holds the workspace lock (a worker stopped by Ctrl-C or SIGKILL gets no
        chance to remove them)."""
        import re
        import stat

        pattern = re.compile(r"^(\..+\.[A-Za-z0-9_]{6,}\.tmp|.+\.part)$")
        found = []
        if not self.root.is_dir():
            return found
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                path = Path(folder) / name
                try:
                    if pattern.match(name) and stat.S_ISREG(os.lstat(path).st_mode):
                        found.append(path)
                except OSError:
                    continue
        return sorted(found)

    def job_file(self, name: str) -> Path:
        return self.jobs_dir / f"{name}.json"

    def events_file(self, name: str) -> Path:
        return self.jobs_dir / f"{name}.events.jsonl"

    def format_dir(self, key: str) -> Path:
        return self.root / "formats" / key

    def stage_log(self, key: str, stage: str) -> Path:
        """``formats/<key>/<stage>.log`` (convert, verify, profile)."""
        return self.format_dir(key) / f"{stage}.log"

    def worker_log(self, key: str) -> Path:
        """stdout/stderr of the worker(s) of format ``key``."""
        return self.format_dir(key) / "worker.log"

    def reproduce_sh(self, key: str) -> Path:
        return self.format_dir(key) / "reproduce.sh"

    def reproduce_py(self, key: str) -> Path:
        return self.format_dir(key) / "reproduce.py"

    def params_file(self, key: str) -> Path:
        return self.format_dir(key) / "params.json"

    def outputs_dir(self, key: str, runner_key: str) -> Path:
        return self.format_dir(key) / "outputs" / runner_key

    def output_file(self, key: str, runner_key: str, sample: str, batch_size: int | None = None) -> Path:
        """A runner's outputs for one stored sample (``000.npz``), or for that sample cut or tiled
        to another batch size (``000-bs1.npz``)."""
        name = sample if batch_size is None else f"{sample}-bs{batch_size}"
        return self.outputs_dir(key, runner_key) / f"{name}.npz"

    def batch_outputs(self, key: str, runner_key: str, sample: str) -> list[tuple[int, Path]]:
        """(batch size, file) of the other-batch-size outputs of one sample, smallest size first."""
        out = []
        for path in self.outputs_dir(key, runner_key).glob(f"{sample}-bs*.npz"):
            m = _BATCH_FILE.fullmatch(path.stem)
            if m and m.group(1) == sample:
                out.append((int(m.group(2)), path))
        return sorted(out)

    def sample_file(self, kind: str, index: int) -> Path:
        return self.root / "samples" / kind / f"{index:03d}.npz"

    def input_files(self) -> list[Path]:
        """The stored input batches, in order."""
        return sorted(self.inputs_dir.glob("*.npz"))

    def reference_files(self) -> list[Path]:
        return sorted(self.reference_dir.glob("*.npz"))

    def reference_file(self, sample: str) -> Path:
        return self.reference_dir / f"{sample}.npz"

    def variation_file(self, sample: str) -> Path:
        return self.variation_dir / f"{sample}.npz"

    def remove_stray_temp_files(self) -> list[Path]:
        """Remove :meth:`stale_partial_files`; called under the workspace lock, when a run starts and
        when one ends early. Returns what was removed."""
        removed = []
        for path in self.stale_partial_files():
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                continue
        return removed

    def check_no_links(self, *, below: str | os.PathLike | None = None) -> None:
        """Refuse a workspace (or the part of it ``below``) that holds a symbolic link: every file
        Navigator writes lies inside the workspace, and a link there (``samples/`` pointing at
        another folder, ``navigator.log`` at another file) would lead a write astray; or a FIFO,
        socket or device outside ``jobs/``, which a read would block on.
        UserInputError naming the first one found."""
        top = self.root if below is None else Path(below)
        for path in [self.root] + ([top] if top != self.root else []):
            if path.is_symlink():
                raise UserInputError(f"{path} is a symbolic link; Navigator never follows links inside a workspace",
                                     hint="remove the link (or pass another --workdir / --model-name)")
        self._check_kinds()
        if not top.is_dir():
            return
        for folder, dirs, files in os.walk(top):
            for name in dirs + files:
                path = Path(folder) / name
                if path.is_symlink():
                    raise UserInputError(f"{path} is a symbolic link; Navigator never follows links inside a "
                                         "workspace", hint="remove the link")
                # a FIFO, socket or device would block or never end a read (the race worker's own
                # FIFOs live in jobs/)
                if not (path.is_dir() or path.is_file()) and self.jobs_dir not in path.parents:
                    raise UserInputError(f"{path} is not a regular file; Navigator reads only regular files in a "
                                         "workspace", hint="remove it")

    # entries of a workspace and the kind each must be where it exists
    _KINDS = {"formats": "folder", "samples": "folder", "samples/inputs": "folder", "samples/reference": "folder",
              "jobs": "folder", "report": "folder", "triton": "folder", "navigator.lock": "file",
              "navigator.log": "file", "status.yaml": "file"}

    def _check_kinds(self) -> None:
        """An entry of the layout replaced by the other kind (``formats`` a file, ``navigator.log``
        a folder) is one error line before anything is written, not a crash half-way."""
        for rel, kind in self._KINDS.items():
            path = self.root / rel
            if not path.exists() or path.is_symlink():
                continue
            if (kind == "folder") != path.is_dir() or (kind == "file" and not path.is_file()):
                raise UserInputError(f"{path} should be a {kind} of the workspace but is not",
                                     hint="move it away (or pass another --workdir / --model-name)")

    def inner(self, path: str | os.PathLike) -> str:
        """A path this layout built (``stage_log`` …), relative to the root, as status.yaml stores it;
        no symlink is followed."""
        return Path(path).relative_to(self.root).as_posix()

    def rel(self, path: str | os.PathLike) -> str:
        """``path`` relative to the workspace root, as status.yaml stores paths."""
        return os.path.relpath(Path(path).resolve(), self.root)

    def abs(self, rel: str) -> Path:
        """Resolve a workspace-relative path; refuses to leave the workspace."""
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise UserInputError(f"path {rel!r} in status.yaml points outside the workspace")
        return p
