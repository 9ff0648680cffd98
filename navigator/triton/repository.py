"""The Triton model repository: plan every model from the workspace, check it, then
write it atomically next to whatever the repository already holds.

Layout (Triton's): ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/``
with the artifact (or ``model.py`` + the artifact for the Python backend),
``<repo>/<model>/warmup/<input>`` raw warm-up tensors, and for Python-backend
models ``README.md`` + ``pack_env.sh``.

Model names: the served model is ``<model>`` (``--model-name``, default the
workspace's model name) for ``--formats best`` or a single key; with
``--formats all`` or several keys every format is its own model
``<model>_<key>`` (``-`` becomes ``_``). With ``--preprocess``/``--postprocess``
the ensemble is ``<model>`` and its steps are ``<model>_preprocess``,
``<model>_<key>`` and ``<model>_postprocess``.

Versions: ``--model-version N`` or the next free number (one number for every
model written together). Other models and versions are never touched; an
existing version N is replaced only with ``--force``. config.pbtxt is shared by
all versions of a model, so a new version whose interface (backend, batching,
tensors) differs from the existing config is refused unless ``--force``.

Atomicity: every model is first written in full into a temporary folder beside
the repository, checked (each config.pbtxt parsed back as ModelConfig), then
moved in with renames: a new model appears whole; for an existing model the
version folder is renamed in and config.pbtxt replaced last. A failure undoes
the renames already made.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError
from navigator.triton import config as cfg_mod
from navigator.triton import tokenizer as tokenizer_mod
from navigator.triton.options import TritonOptions
from navigator.triton.planning import Emission, build_config, plan_ensemble, plan_format, select_formats, triton_name

log = logging.getLogger(__name__)



@dataclass
class EmittedModel:
    name: str
    version: int
    role: str                  # model | preprocess | postprocess | ensemble
    key: str | None
    backend: str               # backend or platform as config.pbtxt says
    python: bool
    path: Path


@dataclass
class EmitResult:
    repo: Path
    version: int
    models: list[EmittedModel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def served(self) -> list[str]:
        """The models clients call (the ensemble when there is one)."""
        top = [m.name for m in self.models if m.role == "ensemble"]
        return top or [m.name for m in self.models if m.role == "model"]

    def lines(self) -> list[str]:
        out = [f"Triton repository {self.repo} (version {self.version})"]
        for m in self.models:
            what = f"format {m.key}" if m.key else m.role
            via = "python backend" if m.python else m.backend
            out.append(f"  {m.name}/{m.version}: {what} via {via}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out


# --------------------------------------------------------------------------- entry
def emit(workspace, options: TritonOptions | None = None, *, status=None, lock: bool = True) -> EmitResult:
    """Write the Triton repository for a workspace (see the module docstring). ``status``:
    the workspace's record when the caller has it; ``lock=False`` when the caller already
    holds the workspace lock (``navigator convert --triton-repo``)."""
    from navigator.workspace.layout import Workspace
    from navigator.workspace.lock import WorkspaceLock

    ws = Workspace(Path(workspace)) if status is not None else Workspace.find(workspace)
    if not lock:
        return _emit(ws, options or TritonOptions(), status)
    with WorkspaceLock(ws.lock_path):      # no convert may rewrite the artifacts while they are copied
        ws.check_no_links()
        return _emit(ws, options or TritonOptions(), status)


def _emit(ws, opts: TritonOptions, status) -> EmitResult:
    from navigator.workspace import status as status_mod

    st = status if status is not None else status_mod.load(ws.status_path)
    repo = Path(opts.repo).expanduser() if opts.repo else ws.triton_dir
    repo = repo.resolve()
    if repo.exists() and not repo.is_dir():
        raise UserInputError(f"--repo {repo}: exists and is not a folder")
    if repo == ws.root or any(r == repo or r in repo.parents for r in ws.record_dirs):
        raise UserInputError(f"--repo {repo}: inside the workspace's own records; use {ws.triton_dir} or a "
                             "folder outside the workspace")
    deploy = _deploy_folder(ws, opts, repo)   # checked before anything is written
    notes: list[str] = []
    keys = select_formats(st, opts.formats, notes)
    base = triton_name(opts.model_name or st.model.name)
    use = opts.tokenizer   # by default only where it applies, around one format, with no --preprocess of the user's
    if use is None:
        use = len(keys) == 1 and not opts.preprocess and tokenizer_mod.why_not(st) is None
    if not use:
        return _emit_models(ws, st, opts, repo, keys, base, notes, None, deploy)
    if len(keys) != 1:
        raise UserInputError("--tokenizer wraps one format in an ensemble; choose one with --formats best or "
                             "--formats KEY")
    # a Hugging Face text model's tokenizer in front: its step file lives in the workspace while it is emitted
    with tempfile.TemporaryDirectory(prefix=".navigator-tokenizer-", dir=ws.root) as tmp:
        tok = tokenizer_mod.steps(st, opts, Path(tmp), notes)
        opts = dataclasses.replace(opts, preprocess=str(tok.step),
                                   postprocess=opts.postprocess or (str(tok.step) if tok.labels else None))
        return _emit_models(ws, st, opts, repo, keys, base, notes, tok, deploy)


def _emit_models(ws, st, opts: TritonOptions, repo: Path, keys: list[str], base: str, notes: list[str],
                 tok, deploy: Path | None) -> EmitResult:
    ensemble = bool(opts.preprocess or opts.postprocess)
    if ensemble and len(keys) != 1:
        raise UserInputError("--preprocess/--postprocess wrap one format in an ensemble; choose one with "
                             "--formats best or --formats KEY")
    several = opts.formats == ("all",) or len(keys) > 1 or ensemble
    emissions = []
    for key in keys:
        name = f"{base}_{key.replace('-', '_')}" if several else base
        emissions.append(plan_format(ws, st, key, name, opts, notes, top=not ensemble))
    if ensemble:   # steps first, the ensemble last: it goes live once everything it runs is in place
        around = plan_ensemble(ws, st, emissions[0], base, opts, notes)
        if tok is not None:   # the tokenizer step loads tokenizer.json from its own version folder
            next(e for e in around if e.plan.role == "preprocess").version_files["tokenizer.json"] = tok.tokenizer
        emissions = [e for e in around if e.plan.role != "ensemble"] + emissions + \
            [e for e in around if e.plan.role == "ensemble"]
    names = [e.plan.name for e in emissions]
    if len(set(names)) != len(names):
        raise UserInputError(f"two Triton models would share a name ({', '.join(names)}); choose another "
                             "--model-name")
    for e in emissions:
        build_config(e)
    if ensemble:
        from navigator.triton import ensemble as ens_mod

        top = next(e for e in emissions if e.plan.role == "ensemble")
        ens_mod.raise_if_invalid(top.config, {e.plan.name: e.config for e in emissions if e is not top})
    repo.mkdir(parents=True, exist_ok=True)
    with model_locks(repo, names):      # the version is chosen and written under the models' locks
        version = _choose_version(repo, names, opts)
        _check_existing(repo, emissions, version, opts, notes)
        _commit(repo, emissions, version, opts.force)
        _verify_written(repo, emissions)
    result = EmitResult(repo=repo, version=version, notes=notes)
    for e in emissions:
        p = e.plan
        result.models.append(EmittedModel(name=p.name, version=version, role=p.role, key=p.key,
                                          backend=p.platform or p.backend, python=p.python, path=repo / p.name))
    log.info("triton repository %s: %s (version %d)", repo, ", ".join(names), version)
    if deploy is not None:
        _deploy_kit(ws, deploy, result, emissions)
    return result


def _deploy_folder(ws, opts: TritonOptions, repo: Path) -> Path | None:
    """Where the deploy kit goes (None: --deploy none)."""
    if opts.deploy is not None and opts.deploy.lower() == "none":
        return None
    folder = Path(opts.deploy).expanduser().resolve() if opts.deploy else ws.root / "deploy"
    if folder == repo or repo in folder.parents:
        raise UserInputError(f"--deploy {folder}: inside the repository, Triton would take it for a model and fail "
                             "to start; give a folder outside it")
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UserInputError(f"--deploy {folder}: not a folder (a link or a file); give another")
    return folder


def _deploy_kit(ws, folder: Path, result: EmitResult, emissions: list) -> None:
    """run.sh and client.py in ``folder``, beside the repository (navigator.triton.deploy)."""
    from navigator.triton import deploy as deploy_mod

    served = result.served[0]
    plan = next(e.plan for e in emissions if e.plan.name == served)
    io = {t.name: t.source or t.name for t in [*plan.inputs, *plan.outputs]}
    stem = "000.npz"
    reference = ws.reference_dir / stem if plan.role == "model" else None   # an ensemble's outputs are its own
    written = deploy_mod.write(folder, result.repo, served, result.models, ws.inputs_dir / stem, reference, io)
    result.notes.append(f"deploy kit: {folder} ({', '.join(p.name for p in written)}): bash run.sh serves the "
                        "repository in Triton's container; python client.py calls it")


# --------------------------------------------------------------------------- versions
def existing_versions(model_dir: Path) -> list[int]:
    """Numeric version folders Triton would load (no leading zeros)."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p.name == "0" or not p.name.startswith("0")))


def _choose_version(repo: Path, names: list[str], opts: TritonOptions) -> int:
    if opts.model_version is not None:
        return opts.model_version
    found = [v for n in names for v in existing_versions(repo / n)]
    return max(found, default=0) + 1


def _check_existing(repo: Path, emissions: list[Emission], version: int, opts: TritonOptions,
                    notes: list[str]) -> None:
    for e in emissions:
        model_dir = repo / e.plan.name
        for path in [model_dir] + ([p for p in model_dir.rglob("*")] if model_dir.is_dir() else []):
            if path.is_symlink():   # a write there would land wherever the link points
                raise UserInputError(f"{path} is a symbolic link; navigator triton never writes through links "
                                     "inside a model folder", hint="remove the link or pass another --repo")
        if model_dir.exists() and not model_dir.is_dir():
            raise UserInputError(f"{model_dir} exists and is not a folder; Triton model {e.plan.name} cannot go there")
        vdir = model_dir / str(version)
        if vdir.exists() and not opts.force:
            free = max(existing_versions(model_dir), default=0) + 1
            raise UserInputError(f"{vdir} exists: Triton model {e.plan.name} already has version {version}; leave "
                                 f"--model-version out for the next free one ({free}), or --force to replace it")
        config_path = model_dir / "config.pbtxt"
        others = [v for v in existing_versions(model_dir) if v != version]
        if config_path.is_file() and others:
            old = cfg_mod.read(config_path)
            diffs = cfg_mod.io_differences(old, e.config)
            if diffs and not opts.force:
                raise UserInputError(f"Triton model {e.plan.name} in {repo} has version(s) "
                                     f"{', '.join(map(str, others))} with another interface ({diffs[0]}); "
                                     "config.pbtxt is shared by all versions, so this one would break them: choose "
                                     "another --model-name, or --force to replace the config")
            if diffs:
                notes.append(f"{e.plan.name}: --force replaced config.pbtxt with another interface ({diffs[0]}); "
                             f"version(s) {', '.join(map(str, others))} may no longer load with it")


# --------------------------------------------------------------------------- writing
def _write_entry(root: Path, rel: str, value, executable: bool) -> None:
    dest = root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, Path):
        if value.is_dir():
            shutil.copytree(value, dest)
        else:
            shutil.copyfile(value, dest)
    elif isinstance(value, bytes):
        dest.write_bytes(value)
    else:
        dest.write_text(value, encoding="utf-8")
    mode = 0o755 if executable else 0o644
    if not dest.is_dir():
        os.chmod(dest, mode)


def _stage(stage: Path, e: Emission, version: int) -> Path:
    model = stage / e.plan.name
    vdir = model / str(version)
    vdir.mkdir(parents=True)
    for rel, value in e.version_files.items():
        _write_entry(vdir, rel, value, False)
    for rel, value in e.model_files.items():
        _write_entry(model, rel, value, rel in e.executable)
    (model / "config.pbtxt").write_text(e.text, encoding="utf-8")
    # the staged text must read back exactly as the message (what Triton will parse)
    if cfg_mod.parse((model / "config.pbtxt").read_text(encoding="utf-8")) != e.config:
        raise RuntimeError(f"staged config.pbtxt of {e.plan.name} does not read back as written")
    return model


def _stage_prefix(repo: Path) -> str:
    return f".{repo.name}.navigator-"


def _stage_root(repo: Path) -> Path:
    """A temporary folder on the repository's filesystem, outside it when possible (Triton's
    repository poller would otherwise see it), so renames into the repository are atomic. Its
    name holds this process's pid: a later run removes the folders of runs that died."""
    repo.mkdir(parents=True, exist_ok=True)
    parent = repo.parent
    try:
        same_fs = os.stat(parent).st_dev == os.stat(repo).st_dev and os.access(parent, os.W_OK)
    except OSError:
        same_fs = False
    folder = parent if same_fs else repo
    _remove_stale_stages(repo, folder)
    return Path(tempfile.mkdtemp(prefix=f"{_stage_prefix(repo)}{os.getpid()}-", dir=folder))


def _remove_stale_stages(repo: Path, folder: Path) -> None:
    """Staging folders left by a ``navigator triton`` that was killed (its pid no longer runs), and
    the model lock files of such runs (a lock nobody holds)."""
    from navigator.execution.processes import left_by_dead_runs
    from navigator.workspace.lock import remove_if_free

    for stale in left_by_dead_runs(folder, _stage_prefix(repo)):
        if stale.is_dir():
            log.warning("removing %s, left by a navigator triton run that did not finish", stale)
            shutil.rmtree(stale, ignore_errors=True)
    for lock in repo.glob(".navigator-*.lock"):
        remove_if_free(lock)


def model_locks(repo: Path, names: list[str]):
    """One flock per model name, in name order: two runs writing the same model of a repository never
    interleave; different models may be written at once. The lock files
    (``<repo>/.navigator-<model>.lock``; Triton reads only folders there) are removed on release, so
    nothing but models is left in the repository."""
    from contextlib import ExitStack

    from navigator.workspace.lock import WorkspaceLock

    stack = ExitStack()
    try:
        for name in sorted(set(names)):
            stack.enter_context(WorkspaceLock(repo / f".navigator-{name}.lock",
                                              what=f"model {name} of {repo}", remove=True))
    except BaseException:
        stack.close()
        raise
    return stack


def _commit(repo: Path, emissions: list[Emission], version: int, force: bool) -> None:
    stage = _stage_root(repo)
    done: list[tuple[str, Path, Path]] = []      # (action, from, to) for the undo
    try:
        staged = [(e, _stage(stage, e, version)) for e in emissions]
        for e, model in staged:
            target = repo / e.plan.name
            if not target.exists():
                os.rename(model, target)
                done.append(("rename", model, target))
                continue
            vdir = target / str(version)
            if vdir.exists():                       # --force (checked before)
                old = stage / f"{e.plan.name}.replaced-{version}"
                os.rename(vdir, old)
                done.append(("rename", vdir, old))
            for rel in e.model_files:               # model-level files (warm-up, labels, docs)
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    keep = stage / f"{e.plan.name}.previous" / rel
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(dest, keep)
                    done.append(("restore", keep, dest))
                else:
                    done.append(("remove", dest, dest))
                os.replace(model / rel, dest)
            os.rename(model / str(version), vdir)
            done.append(("rename", model / str(version), vdir))
            config = target / "config.pbtxt"
            if config.exists():
                keep = stage / f"{e.plan.name}.previous" / "config.pbtxt"
                keep.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(config, keep)
                done.append(("restore", keep, config))
            else:
                done.append(("remove", config, config))
            os.replace(model / "config.pbtxt", config)   # last: the new config goes live at once
    except BaseException:
        for action, a, b in reversed(done):
            try:
                if action == "rename":
                    os.rename(b, a)
                elif action == "restore":
                    os.replace(a, b)
                elif action == "remove" and b.exists():
                    b.unlink()
            except OSError as undo_error:   # keep undoing the rest
                log.error("could not undo %s %s -> %s: %s", action, a, b, undo_error)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _verify_written(repo: Path, emissions: list[Emission]) -> None:
    """Every config.pbtxt now in the repository parses as ModelConfig and is the one planned."""
    for e in emissions:
        path = repo / e.plan.name / "config.pbtxt"
        if cfg_mod.read(path) != e.config:
            raise RuntimeError(f"{path} changed while it was written")
