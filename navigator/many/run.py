"""``navigator.convert_many(manifest)``: many models, each into its own workspace, in parallel
on Ray when it is installed (on this machine, or a cluster with ``ray_address``), else one at a
time; then one summary for the zoo."""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.many import placement
from navigator.many.manifest import load_manifest
from navigator.many.outcome import ManyResult

NO_RAY = ("Ray is not installed: the {n} models run one at a time. `pip install 'navigator[ray]'` runs them in "
          "parallel, on this machine or on a cluster (--ray-address)")


def ray_installed() -> bool:
    """Ray can be imported (found without importing it: importing reads Ray's settings, which the
    local instance sets first; a module blocked in sys.modules counts as missing)."""
    import importlib.util
    import sys

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def convert_many(manifest: Any, *, workdir: str | os.PathLike | None = None, ray_address: str | None = None,
                 max_parallel: int | None = None, progress: bool | None = None, reporter=None,
                 keep_ray_logs: bool = False) -> ManyResult:
    """Convert every model of ``manifest`` (a YAML path or a mapping: ``defaults:``, ``models:``,
    optional ``resources:`` and ``retries:``; see docs/how-to/convert-many.md) into ``workdir``
    (default ./navigator_workdir), each workspace exactly as ``navigator convert`` writes it.

    A bad manifest raises UserInputError before any work. A model that fails (a target, bad
    input found while running it, a lost node past its retries) does not stop the others:
    see ``result.models`` and ``result.exit_code``. Writes ``<workdir>/summary.md``."""
    from navigator import console
    from navigator._version import __version__
    from navigator.many import summary

    if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int)
                                     or max_parallel < 1):
        raise UserInputError(f"--max-parallel: expected an integer >= 1, got {max_parallel!r}")
    m = load_manifest(manifest, workdir=workdir)
    if reporter is None:   # as navigator.convert: progress on a terminal (progress=None), or when asked
        reporter = console.Reporter("auto")
        if progress is False or (progress is None and reporter.mode != "rich"):
            reporter = console.Reporter("quiet")
    use_ray = ray_installed()
    if ray_address and not use_ray:
        raise UserInputError("--ray-address needs Ray, which is not installed", hint="pip install 'navigator[ray]'")
    start = time.monotonic()
    run = {"id": time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2), "workdir": m.workdir,
           "navigator_version": __version__}
    try:
        m.workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"--workdir: cannot create {m.workdir}: {e.strerror or e}") from None
    from navigator.workspace.lock import WorkspaceLock

    # one convert-many per workdir: two would share summary.md and each other's models half-way
    with WorkspaceLock(m.workdir / ".convert-many.lock", what=f"workdir {m.workdir}", remove=True):
        if use_ray:
            outcomes = _on_ray(m, run, reporter, ray_address, max_parallel, keep_ray_logs)
        else:
            reporter.warn(NO_RAY.format(n=len(m.models)))
            _begin(m, run)
            from navigator.many.schedule import run_in_order

            outcomes = run_in_order(m, run, reporter)
        result = ManyResult(manifest=m, models=outcomes, parallel=use_ray, wall_s=time.monotonic() - start,
                            interrupted=bool(run.get("interrupted")))
        result.summary_path = summary.write(result)
    summary.show(result, reporter)
    reporter.info(f"summary: {result.summary_path}")
    return result


def _begin(m, run: dict) -> None:
    """placement.yaml of every model: this run's header, before anything of it runs."""
    from navigator.workspace.layout import Workspace

    header = {"id": run["id"], "manifest": m.path or m.source, "driver": socket.gethostname(),
              "started": placement.now()}
    for entry in m.models:
        placement.begin_run(Workspace.for_model(m.workdir, entry.name), header)


def _on_ray(m, run: dict, reporter, address: str | None, max_parallel: int | None, keep_logs: bool):
    from navigator.many import cluster
    from navigator.many.schedule import phases_of, run_on_ray

    with cluster.RaySession(address, keep_logs=keep_logs) as session:
        if session.interrupted:   # Ctrl-C / SIGTERM while Ray started: nothing ran, the summary says so
            reporter.info("interrupted while Ray started: no model ran")
            run["interrupted"] = True
            from navigator.many.outcome import ModelOutcome

            return [ModelOutcome(entry=e) for e in m.models]
        nodes = session.nodes()
        cluster.check_feasible(m, nodes, phases_of)
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        cpus = sum(n["resources"].get("CPU", 0.0) for n in nodes)
        reporter.info(f"{len(m.models)} models on {where}: {len(nodes)} node(s), {cpus:g} CPUs")
        token = m.workdir / f".convert-many-{run['id']}.token"
        token.write_text(run["id"], encoding="utf-8")
        run["token"] = {"path": str(token), "value": run["id"]}
        run["stop"] = str(m.workdir / f".convert-many-{run['id']}.stop")   # written on Ctrl-C (schedule._stop)
        try:
            _begin(m, run)
            return run_on_ray(m, run, reporter, max_parallel=max_parallel)
        finally:
            token.unlink(missing_ok=True)
            Path(run["stop"]).unlink(missing_ok=True)
            note = cluster.temp_dir_note(session)
            if note:
                reporter.info(note)
