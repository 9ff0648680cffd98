"""A full disk under the workspace ends the run with one error line (exit 2) and the
last status.yaml that could be written intact."""

from __future__ import annotations

from navigator.errors import UserInputError
from navigator.workspace.layout import Workspace

_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "[Errno 28]", "[Errno 122]")


class WorkspaceFull(UserInputError):
    """The workspace's filesystem is full. Exit 2, as for an unwritable --workdir: the
    environment must change before any step can succeed. Not exit 1, which is a
    verdict on the model (a target failed) that --allow-failures turns into 0 and CI
    gates read as a regression; not exit 3, which is a Navigator bug."""

    def __init__(self, ws: Workspace, detail: str):
        super().__init__(f"no space left on the filesystem of the workspace {ws.root} ({detail}); status.yaml "
                         "keeps the last state it could write",
                         hint="free space or pass another --workdir, then run again: finished steps are reused")


def says_disk_full(text: str | None) -> bool:
    return bool(text) and any(t in text for t in _DISK_FULL_TEXT)


def check_disk_full(ctx, tasks) -> None:
    """A step that failed because the disk is full stops the run: every later step
    would fail the same way, each with its own line."""
    for task in tasks:
        fs = ctx.status.formats.get(task.key)
        if fs is None:
            continue
        steps = [("convert", fs.convert)] + [(f"{stage} on {rk}", getattr(rs, stage)) for rk, rs in
                                              fs.runners.items() for stage in ("verify", "profile")]
        for what, step in steps:
            if step.status == "failed" and says_disk_full(step.reason):
                raise WorkspaceFull(ctx.ws, f"{task.key} {what}: {step.reason.split(' | ')[0][:200]}")
