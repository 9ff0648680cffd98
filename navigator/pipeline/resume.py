"""Resuming: a re-run reuses every step whose inputs are unchanged. Each conversion,
verification and profile records an ``inputs_sha256`` over what its result depends on
(its parent's hash, converter and parameters, package versions, verify rules, samples,
reference, profile settings); a step is reused when its hash matches the last run's."""

from __future__ import annotations

import hashlib
import json
import logging

from navigator import deps
from navigator.config import NavigatorConfig
from navigator.errors import UserInputError
from navigator.execution.jobs import Task
from navigator.pipeline.context import Prepared, RunContext
from navigator.pipeline.digests import artifact_sha256
from navigator.pipeline.tasks import DEFERRED, converted_task, params_dict
from navigator.workspace import status as status_mod
from navigator.workspace.status import Status

log = logging.getLogger(__name__)


def step_hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def previous_record(ws) -> Status | None:
    """The workspace's last status.yaml, or None (none, or unreadable)."""
    if not ws.status_path.is_file():
        return None
    try:
        return status_mod.load(ws.status_path)
    except UserInputError as e:
        log.info("the last status.yaml is unreadable: %s", e.one_line())
        return None


def check_same_model(prep: Prepared, old: Status | None, config: NavigatorConfig) -> None:
    """A workspace of a *different* model is never replaced without --force: two factories of one
    file, or two files of one name, would otherwise share a default workspace name."""
    if old is None or config.force:
        return
    new_id, old_id = prep.source.identity(), old.model.path
    if new_id and old_id and new_id != old_id:
        raise UserInputError(f"{prep.ws.root} is the workspace of another model ({old_id}); this run converts "
                             f"{new_id}", hint="pass --model-name NAME for a workspace of its own, or --force to "
                                               "replace it")


def resumable(prep: Prepared, config: NavigatorConfig) -> Status | None:
    """The earlier record of this workspace when a re-run may reuse its steps: not
    --force, and the same model digest (``Source.sha256``: a file's bytes; a SavedModel
    directory's whole tree; a ``file.py:factory``'s file, its sibling .py files and its
    reference outputs), samples, signature and shape profiles. Live objects (an
    nn.Module passed to the API) have no digest and always start afresh."""
    source = prep.source
    old = previous_record(prep.ws)
    if config.force or old is None:
        return None
    sha = source.sha256()
    same = (sha is not None and old.model.sha256 == sha and old.samples.sha256 == prep.samples_info.sha256
            and old.signature.to_dict() == source.signature.to_dict() and old.batch_dim == prep.batch_dim
            and old.shape_profiles == prep.profiles)
    return old if same else None


def convert_hash(ctx: RunContext, item, params: dict | None = None) -> str:
    """What ``item``'s conversion depends on: its parent's hash, the edge, its parameters (``params``,
    else the run's for that edge), the packages it needs and Navigator's version."""
    from navigator._version import __version__

    if item.converter is None:
        return ctx.status.model.sha256 or step_hash("live", ctx.source.key)
    conv = item.converter
    parent = ctx.status.formats[item.parent]
    if params is None:
        params = params_dict(conv.params_from_config(ctx.config))
    return step_hash(parent.convert.inputs_sha256, conv.name, params, {m: deps.version(m) for m in conv.requires},
                     __version__)


def _outputs_unchanged(ctx: RunContext, key: str, runner_key: str, recorded: str | None) -> bool:
    """The outputs a verification stored are the ones it judged (and the reference they were judged
    against is the one recorded): edited files are verified again, never trusted."""
    from navigator.workspace import npz

    files = sorted(ctx.ws.outputs_dir(key, runner_key).glob("*.npz"))
    # not yet recorded by this run (its reference task may still be running): the files on disk decide,
    # so a reference edited by hand is never the one a reused verdict stands on
    reference = ctx.status.samples.reference_sha256 or npz.files_sha256(ctx.ws.reference_files())
    same_reference = reference == ctx.resume_from.samples.reference_sha256
    return bool(recorded) and bool(files) and npz.files_sha256(files) == recorded and same_reference


def _profile_hashes(verify_hash: str, profile) -> tuple[str, str | None]:
    """The profile step's hash -- what its figures depend on: its spec without ``loaded``, which says
    how the moment's load shaped the screening, not what was measured -- and the one a workspace
    of the version that hashed ``loaded: null`` recorded (None when there is no profile)."""
    if profile is None:
        return step_hash(verify_hash, None), None
    spec = profile.to_dict()
    spec.pop("loaded", None)
    return step_hash(verify_hash, spec), step_hash(verify_hash, {**spec, "loaded": None})


def reuse(ctx: RunContext, item, task: Task) -> tuple[Task | None, list[str]]:
    """Take from the earlier record what is unchanged; returns the task left to run (None when
    nothing is) and the runners verified before but not measured, for the caller to queue for
    the race. Hashes of every step are noted for the new record."""
    fs = ctx.status.formats[item.key]
    old = ctx.resume_from.formats.get(item.key) if ctx.resume_from else None
    if old is not None and task.convert is not None and old.convert.status == "ok" \
            and old.convert.inputs_sha256 == fs.convert.inputs_sha256 and ctx.ws.abs(fs.path).exists() \
            and old.convert.artifact_sha256 is not None and old.convert.artifact_sha256 == artifact_sha256(ctx.ws, fs):
        fs.convert = old.convert
        fs.io_names = dict(old.io_names)
        if "static shapes" in (old.convert.exporter or ""):
            ctx.book.static_keys.add(item.key)
        task = converted_task(ctx, item, task)
        ctx.reporter.step_end(item.key, "convert", None, {"status": "ok", "reason": "reused, inputs unchanged"})
    kept, raced = [], []
    for spec in task.runners:
        verify_hash = step_hash(fs.convert.inputs_sha256, spec.key, task.verify.to_dict(), task.io_names,
                                ctx.status.samples.sha256, ctx.status.samples.reference)
        profile_hash, hashed_loaded = _profile_hashes(verify_hash, task.profile)
        ctx.book.step_hashes[(item.key, spec.key, "verify")] = verify_hash
        ctx.book.step_hashes[(item.key, spec.key, "profile")] = profile_hash
        # a verify_func (a Python callable) cannot be compared with the last run's: verify again
        reusable = old is not None and task.convert is None and ctx.verify_func is None
        before = old.runners.get(spec.key) if reusable else None
        verified = (before is not None and before.verify.status == "ok" and before.verify.inputs_sha256 == verify_hash
                    and _outputs_unchanged(ctx, item.key, spec.key, before.verify.outputs_sha256))
        profiled = task.profile is None or (before is not None and before.profile.status == "ok"
                                            and before.profile.inputs_sha256 in (profile_hash, hashed_loaded))
        if verified and (profiled or task.profile.race):
            fs.runners[spec.key].verify = before.verify
            if profiled and task.profile is not None:
                fs.runners[spec.key].profile = before.profile
            elif ctx.defer_profiles:   # convert-many's build: a later run measures it
                fs.runners[spec.key].profile = status_mod.ProfileStep(status="skipped", reason=DEFERRED)
            elif not profiled:   # verified, not measured (a run stopped before its race, a deferred profile)
                raced.append(spec.key)
            ctx.reporter.step_end(item.key, "verify", spec.key, {"status": "ok", "reason": "reused"})
            continue
        kept.append(spec)
    task = Task.from_dict(task.to_dict())
    task.runners = kept
    return (task if task.convert is not None or kept else None), raced
