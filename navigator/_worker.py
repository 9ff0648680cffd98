"""The worker process: ``python -m navigator._worker JOB.json``.

One worker runs the tasks of one job in order: a format's convert -> verify
-> profile (and, in the first job, the reference outputs). It reports each
stage as a JSON line in the job's events file; the parent reads them while
the worker runs, enforces the per-stage timeout and turns a crash or a hang
into ``failed`` with the log tail. Nothing here writes status.yaml: the
parent is its only writer.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

log = logging.getLogger("navigator.worker")

# A worker that cannot write its events because the workspace's filesystem is full exits with this.
EXIT_DISK_FULL = 28
DISK_FULL_ERRNOS = (28, 122)   # ENOSPC, EDQUOT


class Events:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1, encoding="utf-8")

    def emit(self, **event) -> None:
        event["t"] = time.time()
        self._f.write(json.dumps(event, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())


class StageLog:
    """Send the records of one stage to ``formats/<key>/<stage>.log`` (and the worker log)."""

    def __init__(self, path: Path):
        self.path = path
        self.handler: logging.Handler | None = None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()


def _error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return " ".join(text.split())[:500]


def _run_stage(events: Events, task_index: int, key: str, stage: str, runner: str | None, fn, log_path: Path):
    events.emit(task=task_index, key=key, stage=stage, runner=runner, event="start")
    start = time.perf_counter()
    with StageLog(log_path):
        try:
            result = fn()
        except Exception as e:
            from navigator.errors import NavigatorError
            from navigator.runners.base import RunnerUnavailable

            status = "skipped" if isinstance(e, RunnerUnavailable) else "failed"
            if isinstance(e, NavigatorError):
                log.error("%s", e.one_line())
            else:
                log.error("%s failed:\n%s", stage, traceback.format_exc())
            result = {"status": status, "reason": _error_text(e)}
    result.setdefault("status", "ok")
    result["duration_s"] = round(time.perf_counter() - start, 4)
    events.emit(task=task_index, key=key, stage=stage, runner=runner, event="end", result=result)
    return result


def _rename(tensors: dict, mapping: dict) -> dict:
    return {mapping.get(k, k): v for k, v in tensors.items()}


def run_reference(ws, task: dict) -> dict:
    from navigator import runners
    from navigator.workspace import npz

    spec = runners.RunnerSpec(**task["runner"])
    runner = runners.create(spec, ws.abs(task["artifact"]), **task.get("options", {}))
    io_names = task.get("io_names") or {}
    inverse = {v: k for k, v in io_names.items()}
    count = 0
    with runner:
        for path in sorted(ws.inputs_dir.glob("*.npz")):
            outputs = _rename(runner.infer(_rename(npz.load(path), io_names)), inverse)
            npz.save(ws.reference_dir / path.name, outputs)
            count += 1
    log.info("reference: %d batches with %s", count, spec.key)
    return {"count": count}


def run_convert(ws, task: dict) -> dict:
    import importlib

    from navigator.converters.base import ConvertOutcome, context_from_workspace

    conv = task["convert"]
    module, _, qualname = conv["converter"].partition(":")
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    ctx = context_from_workspace(ws.root, conv["source"], conv["output"], cls.params_from_dict(conv.get("params")),
                                 conv.get("device", "cpu"), needs_live=cls.needs_live)
    ctx.output.parent.mkdir(parents=True, exist_ok=True)
    log.info("convert %s -> %s with %s (%s)", conv["source"], conv["output"], cls.name, conv.get("params"))
    outcome = cls().convert(ctx) or ConvertOutcome()
    if not ctx.output.exists():
        raise RuntimeError(f"converter {cls.name} finished without writing {conv['output']}")
    result = {"exporter": outcome.exporter, "notes": outcome.notes, "static_shapes": outcome.static_shapes}
    if outcome.io_names:
        result["io_names"] = outcome.io_names
    for note in outcome.notes:
        log.warning("%s", note)
    return result


def run_verify(ws, task: dict, spec_dict: dict, io_names: dict) -> tuple[dict, object]:
    from navigator import runners
    from navigator.profiling import batch_of
    from navigator.validators.numeric import Accumulator, compare_outputs
    from navigator.validators.tolerances import OutputRule
    from navigator.workspace import npz

    verify = task["verify"]
    spec = runners.RunnerSpec(**{k: spec_dict[k] for k in ("runner", "device", "provider")})
    options = dict(spec_dict.get("options") or {})
    options.setdefault("inputs", [io_names.get(n, n) for n in task.get("input_names", [])])
    options.setdefault("outputs", [io_names.get(n, n) for n in task.get("output_names", [])])
    runner = runners.create(spec, ws.abs(task["artifact"]), **options)
    start = time.perf_counter()
    runner.activate()
    load_s = time.perf_counter() - start
    inverse = {v: k for k, v in io_names.items()}
    accs = {name: Accumulator(name, OutputRule(**rule)) for name, rule in verify["rules"].items()}
    out_dir = ws.outputs_dir(task["key"], spec.key)
    batch_dim = verify.get("batch_dim")
    sizes_used: set[int] = set()
    inputs = sorted(ws.inputs_dir.glob("*.npz"))
    for path in inputs:
        sample = npz.load(path)
        reference = npz.load(ws.reference_dir / path.name)
        outputs = _rename(runner.infer(_rename(sample, io_names)), inverse)
        npz.save(out_dir / path.name, outputs)
        where = f" (sample {path.stem}"
        if batch_dim is not None:
            full = next(iter(sample.values())).shape[batch_dim]
            sizes_used.add(full)
            where += f", batch {full}"
        compare_outputs(outputs, reference, accs, allow_nan=verify["allow_nan"], error_stat=verify["error_stat"],
                        where=where + ")")
        if batch_dim is None:
            continue
        for size in verify["batch_sizes"]:
            if size == full:
                continue
            feeds = batch_of(sample, batch_dim, size)
            ref = batch_of(reference, batch_dim, size)
            outs = _rename(runner.infer(_rename(feeds, io_names)), inverse)
            npz.save(out_dir / f"{path.stem}-bs{size}.npz", outs)
            compare_outputs(outs, ref, accs, allow_nan=verify["allow_nan"], error_stat=verify["error_stat"],
                            where=f" (sample {path.stem}, batch {size})")
            sizes_used.add(size)
    checks = {name: acc.result().to_dict() for name, acc in accs.items()}
    failed = [f"{name}: {c['reason']}" for name, c in checks.items() if not c["passed"]]
    for name, c in checks.items():
        log.info("%s: %s", name, c)
    result = {"status": "failed" if failed else "ok", "reason": "; ".join(failed)[:1000] or None,
              "batch_sizes": sorted(sizes_used), "outputs": checks, "load_s": round(load_s, 4)}
    return result, runner


def run_profile(ws, task: dict, runner, io_names: dict) -> dict:
    from navigator.profiling import ProfileSettings, sweep
    from navigator.workspace import npz

    prof = task["profile"]
    settings = ProfileSettings(**prof["settings"])
    sample = _rename(npz.load(sorted(ws.inputs_dir.glob("*.npz"))[0]), io_names)
    if settings.batch_sizes == [0] and prof.get("batch_dim") is not None:   # static shapes: the sample's batch
        own = next(iter(sample.values())).shape[prof["batch_dim"]]
        settings.batch_sizes, settings.max_batch_size = [own], max(own, settings.max_batch_size)
    infer, io = runner.profiling_infer()
    outcome = sweep(infer, sample, prof.get("batch_dim"), settings)
    for r in outcome.results:
        r["io"] = io
    for r in outcome.results:
        log.info("batch %d: %.1f/s, p50 %.3f ms, p99 %.3f ms", r["batch_size"], r["throughput"],
                 r["latency_ms"]["p50"], r["latency_ms"]["p99"])
    return {"stable": outcome.stable, "results": outcome.results, "reason": outcome.reason}


def _static(task: dict) -> dict:
    """An artifact exported with static shapes runs at the samples' shapes only."""
    task = json.loads(json.dumps(task))
    task["verify"]["batch_sizes"] = []
    if task.get("profile"):
        task["profile"]["settings"]["batch_sizes"] = [0]   # 0: the sample's own batch size
    return task


def run_job(job: dict) -> int:
    from navigator.workspace.layout import Workspace

    ws = Workspace(Path(job["workspace"]))
    events = Events(job["events"])
    for i, task in enumerate(job["tasks"]):
        key = task.get("key", "reference")
        fmt_dir = ws.format_dir(key)
        if task["kind"] == "reference":
            result = _run_stage(events, i, key, "reference", None, lambda: run_reference(ws, task),
                                ws.root / "samples" / "reference.log")
            if result["status"] != "ok":
                return 1
            continue
        io_names = dict(task.get("io_names") or {})
        if task.get("convert"):
            result = _run_stage(events, i, key, "convert", None, lambda: run_convert(ws, task),
                                fmt_dir / "convert.log")
            if result["status"] != "ok":
                continue
            io_names.update(result.get("io_names") or {})
            if result.get("static_shapes"):
                task = _static(task)
        for spec in task["runners"]:
            holder = {}

            def verify():
                result, holder["runner"] = run_verify(ws, task, spec, io_names)
                return result

            result = _run_stage(events, i, key, "verify", spec["key"], verify, fmt_dir / "verify.log")
            runner = holder.get("runner")
            if task.get("profile") and runner is not None and result["status"] == "ok":
                _run_stage(events, i, key, "profile", spec["key"], lambda: run_profile(ws, task, runner, io_names),
                           fmt_dir / "profile.log")
            if runner is not None:
                runner.deactivate()
    return 0


def _die_with_parent(parent_pid: int | None) -> None:
    """Linux: be killed when the run that started us dies (even by SIGKILL), so no
    orphan keeps writing into a workspace that a resumed run now owns."""
    if not parent_pid or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:   # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m navigator._worker JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    _die_with_parent(job.get("parent_pid"))
    for p in reversed(job.get("sys_path", [])):
        if p not in sys.path:
            sys.path.insert(0, p)
    logging.basicConfig(level=getattr(logging, job.get("log_level", "INFO")), stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run_job(job)
    except OSError as e:   # the events file could not be written: tell the parent by the exit code
        if e.errno in DISK_FULL_ERRNOS:
            print(f"navigator worker: {e}", file=sys.stderr)
            return EXIT_DISK_FULL
        raise


if __name__ == "__main__":
    raise SystemExit(main())
