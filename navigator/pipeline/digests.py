"""The digest of a format's artifact, by which a resumed run knows it unchanged (written by
the events that report a conversion, compared by :mod:`.resume`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from navigator.workspace.layout import Workspace
    from navigator.workspace.status import FormatStatus


def artifact_sha256(ws: Workspace, fs: FormatStatus) -> str | None:
    """One digest of a format's artifact: the file (its companions and ``<name>.data`` external
    data beside it) or every file of the folder, names and bytes. A resumed run reuses a
    conversion, and what was verified on it, only while this is unchanged: an artifact replaced
    by hand is converted and verified again."""
    import hashlib

    from navigator import formats

    if not fs.path:
        return None
    path = ws.abs(fs.path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    elif path.is_file():
        try:
            companions = formats.get(fs.format).companions
        except Exception:   # a format no longer registered: its artifact alone
            companions = ()
        extra = [path.parent / c for c in companions] + sorted(path.parent.glob(path.name + ".*"))
        files = [path] + [p for p in dict.fromkeys(extra) if p.is_file()]
    else:
        return None
    h = hashlib.sha256(b"navigator-artifact-v1\n")
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        with open(f, "rb") as handle:
            while block := handle.read(1 << 20):
                h.update(block)
    return h.hexdigest()
