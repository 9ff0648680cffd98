"""``formats/<key>/reproduce.sh`` (and ``reproduce.py`` where the edge writes one): how to
rebuild each artifact by hand, written even when this machine cannot run the edge."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from navigator.execution.jobs import RunnerTask, Task
from navigator.pipeline.context import RunContext
from navigator.workspace.atomic import write_text
from navigator.workspace.status import FormatStatus


def _source_lines(ctx: RunContext, key: str, fs: FormatStatus) -> list[str]:
    """How the first artifact comes back: a copy of the file or folder the user gave; for a PyTorch
    source, its record (formats/torch/source.json names the factory or file); for a live object,
    nothing on disk can rebuild it."""
    src = ctx.status.model.path
    rebuilt = ctx.source.rebuild_lines(key, fs.path, src)
    if rebuilt is not None:
        return rebuilt
    if src is None:
        return [f"# {key} is the source model, exported from a live object of the process that called "
                "navigator.convert: call it again from there to rebuild it", "exit 1"]
    copy = "cp -r" if Path(src).is_dir() else "cp"
    return [f"# {key} is the source model, copied from {shlex.quote(src)}",
            f"{copy} {shlex.quote(src)} {shlex.quote(fs.path)}"]


def write_reproduce(ctx: RunContext, item: Any, fs: FormatStatus, task: Task) -> None:
    ws = ctx.ws
    conv = task.convert
    lines = ["#!/usr/bin/env bash", f"# Rebuilds formats/{item.key} of this workspace.", "set -euo pipefail",
             'cd "$(dirname "$0")/../.."']
    if conv is not None:
        write_text(ws.params_file(item.key), json.dumps(conv.params, indent=1) + "\n")
        module = conv.converter.split(":")[0]
        lines.append(" ".join(shlex.quote(x) for x in [
            "python", "-P", "-m", module, "--workspace", ".", "--source", conv.source, "--output", conv.output,
            "--params", ws.inner(ws.params_file(item.key)), "--device", conv.device]))
        params = item.converter.params_from_dict(conv.params)
        lines.extend(item.converter.reproduce_notes(params, conv.source, conv.output, ctx.status))
        script = item.converter.reproduce_py(params, conv.source, conv.output, ctx.status)
        if script:
            write_text(ws.reproduce_py(item.key), script)
            lines.insert(4, f"# the same with plain framework calls: python {ws.inner(ws.reproduce_py(item.key))}")
    else:
        lines.extend(_source_lines(ctx, item.key, fs))
    # what the verdict depended on goes with the artifact: run it as it was verified
    lines.extend(runner_line(item.key, spec, fs) for spec in task.runners)
    write_text(ws.reproduce_sh(item.key), "\n".join(lines) + "\n")
    os.chmod(ws.reproduce_sh(item.key), 0o755)


def runner_line(key: str, spec: RunnerTask, fs: FormatStatus) -> str:
    """The line of reproduce.sh that says how ``spec`` ran the artifact: its options and the runtime
    options its profile's tuning kept (verified too)."""
    rs = fs.runners.get(spec.key)
    tuned = rs.profile.options if rs is not None else None
    options = spec.options | (tuned or {})
    return (f"{RUN_AS.format(runner=spec.key)} navigator.load('.').runner({key!r}, {spec.key!r}) "
            f"(options {json.dumps(options, sort_keys=True)}; the runtime's own report in status.yaml, "
            f"formats.{key}.runners.{spec.key}.verify.settings"
            + (f"; runtime options {json.dumps(tuned, sort_keys=True)} from its profile's tuning, "
               f"formats.{key}.runners.{spec.key}.profile.tuning" if tuned else "") + ")")


RUN_AS = "# run as {runner} verified it:"


def retune(ctx: RunContext, key: str, fs: FormatStatus, specs: list[RunnerTask]) -> None:
    """reproduce.sh of ``key`` once the race's tuning gave a runner runtime options: its runner lines
    say them (the rest of the script stays as written)."""
    path = ctx.ws.reproduce_sh(key)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    by_start = {RUN_AS.format(runner=spec.key): runner_line(key, spec, fs) for spec in specs}
    lines = [next((new for start, new in by_start.items() if line.startswith(start)), line) for line in lines]
    write_text(path, "\n".join(lines) + "\n")
    os.chmod(path, 0o755)
