"""What a serving profile leaves behind: the ``serving:`` record of status.yaml, the
CSV/JSON tables, every variant config, the chosen one, the plots and the hand-off
files (Model Analyzer YAML, perf_analyzer.sh), and the console table."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import shutil
import subprocess
from typing import TYPE_CHECKING

from navigator.serving.measure import DEFAULT_WINDOW_MS, Measurement
from navigator.serving.search import ConfigResult, Objective, Space
from navigator.triton.server import STANDINS

if TYPE_CHECKING:  # pragma: no cover
    from navigator.serving.profile import ServingRun

def backend_of(cfg) -> str:
    return cfg.backend or cfg.platform or "?"


def gpu_memory_from_metrics(text: str) -> float | None:
    """MB of ``nv_gpu_memory_used_bytes`` summed over the GPUs of a Prometheus text page."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("nv_gpu_memory_used_bytes"):
            try:
                total += float(line.rsplit(None, 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return round(total / 1e6, 1) if seen else None


def gpu_memory_mb(metrics_url: str | None = None) -> float | None:
    """Used GPU memory (MB): the server's metrics endpoint (``nv_gpu_memory_used_bytes``),
    else nvidia-smi; None without a GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    if metrics_url:
        import urllib.request

        try:
            with urllib.request.urlopen(metrics_url, timeout=5) as resp:
                mb = gpu_memory_from_metrics(resp.read().decode("utf-8", "replace"))
            if mb is not None:
                return mb
        except OSError:
            pass
    try:
        p = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True,
                           text=True, timeout=10)
        return float(p.stdout.split()[0]) if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = None
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=10)
            gpu = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
        except (OSError, subprocess.TimeoutExpired):
            gpu = None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "platform": platform.platform()}


# --------------------------------------------------------------------------- records and files
def _point_record(m: Measurement):
    from navigator.workspace.status import ServingPoint

    return ServingPoint(concurrency=None if m.request_rate is not None else m.concurrency, batch_size=m.batch_size,
                        throughput=round(m.throughput, 3), latency_ms=dict(m.latency_ms), windows=m.windows,
                        stable=m.stable, request_rate=m.request_rate, window_ms=m.window_ms)


def _config_record(res: ConfigResult, objective: Objective, preferred: list[int]):
    from navigator.workspace.status import ServingConfig

    c = res.candidate
    best, ok = objective.best(res.measurements) if res.status == "ok" else (None, False)
    return ServingConfig(name=c.name, instances=c.instances, max_batch_size=c.max_batch_size,
                         dynamic_batching=c.delay_us is not None and c.max_batch_size > 0,
                         max_queue_delay_us=c.delay_us if c.max_batch_size else None,
                         preferred_batch_sizes=[p for p in (preferred if c.preferred is None else c.preferred)
                                                if c.delay_us is not None and 1 <= p <= c.max_batch_size],
                         response_cache=c.cache,
                         status=res.status, reason=res.reason,
                         meets_constraints=ok if res.status == "ok" else None,
                         best=_point_record(best) if best is not None else None,
                         results=[_point_record(m) for m in res.measurements])


def build_record(r: ServingRun, space: Space, objective: Objective, outcome, duration_s: float):
    from navigator.workspace.status import ServingStatus, now

    ranked = outcome.ranked(objective)
    chosen = outcome.chosen(objective)
    configs = [_config_record(x, objective, r.preferred) for x in outcome.results]
    configs += [_config_record(x, objective, r.preferred) for x in outcome.skipped]
    skipped = [f"{x.candidate.name}: {x.reason}" for x in outcome.skipped]
    status, reason = "ok", None
    if chosen is None:
        status = "failed"
        measured = [x for x in outcome.results if x.status == "ok" and x.measurements]
        if not measured:
            failed = [x for x in outcome.results if x.status == "failed"]
            reason = ("no configuration could be measured" +
                      (f": {failed[0].candidate.name}: {failed[0].reason}" if failed else
                       f" within --budget-s {r.opts.budget_s:g}"))
        else:
            best = ranked[0]
            m, _ = objective.best(best.measurements)
            reason = (f"no configuration meets {objective.constraints_text()}: the best, {best.candidate.name}, "
                      f"has p99 {m.p99_ms:.3f} ms at {m.throughput:.1f} infer/s ({r.load.word()} {m.level}"
                      + (f", {m.errors} failed requests" if m.errors else "") + ")")
    stand_in = bool(r.opts.cpu_backends and any(backend_of(r.served).startswith(b) for b in STANDINS))
    return ServingStatus(
        status=status, reason=reason, date=now(), duration_s=round(duration_s, 2), budget_s=r.opts.budget_s,
        machine=machine(), model=r.model, key=r.key, backend=backend_of(r.served), stand_in=stand_in, tool=r.tool,
        search=r.opts.search,
        objective={"kind": objective.kind, "max_p99_ms": objective.max_p99_ms,
                   "min_throughput": objective.min_throughput},
        measurement_ms=r.opts.measurement_ms, concurrency=[] if r.load.open_loop else list(r.levels),
        batch_sizes=list(r.opts.batch_sizes), load={**r.load.to_dict(), "levels": list(r.levels)},
        server=_server_record(r),
        configurations=configs, skipped=skipped, ranked=[x.candidate.name for x in ranked],
        chosen=chosen.candidate.name if chosen else None, setup_s=round(r.setup_s, 2), ensemble=r.ensemble)


def _server_record(r: ServingRun) -> dict:
    """Which server was measured: navigator's own, or one at --url (and what was done to it)."""
    if not r.opts.url:
        return {"remote": False}
    srv = r.remote
    return {"remote": True, "url": srv.endpoint.url, "version": srv.version, "loaded_configs": r.opts.load_configs,
            "restored": srv.restored}


_LAT = ("avg", "p50", "p90", "p95", "p99")


def _csv(rows: list[list], header: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def provenance(record) -> list[str]:
    m = record.machine or {}
    return [f"model {record.model} (format {record.key}), backend {record.backend}"
            + (" through a CPU STAND-IN (not NVIDIA's backend: figures not representative)" if record.stand_in else ""),
            f"machine: {m.get('cpu') or '?'}, {m.get('cores')} cores, GPU {m.get('gpu') or 'none'}; "
            f"{m.get('platform', '')}",
            f"tool {record.tool}, {record.search} search, measurement windows "
            + (f"{record.measurement_ms} ms, " if record.measurement_ms else "adaptive (250-2000 ms, per point), ")
            + f"date {record.date}"]


def write_outputs(r: ServingRun, space: Space, objective: Objective, outcome, record, reporter) -> None:
    from navigator.serving import handoff, plots, variants
    from navigator.workspace.atomic import write_text

    out = r.out
    files: dict[str, str] = {}
    point_rows, ranked_rows = [], []
    for c in record.configurations:
        for p in c.results:
            point_rows.append([c.name, c.instances, c.max_batch_size, c.max_queue_delay_us,
                               p.concurrency, p.request_rate, p.batch_size, p.throughput,
                               *[p.latency_ms.get(k) for k in _LAT], p.windows, p.stable])
    by_name = {c.name: c for c in record.configurations}
    for rank, name in enumerate(record.ranked, 1):
        c = by_name[name]
        b = c.best
        ranked_rows.append([rank, name, c.instances, c.max_batch_size, c.dynamic_batching, c.max_queue_delay_us,
                            c.meets_constraints, b.concurrency, b.request_rate, b.batch_size, b.throughput,
                            *[b.latency_ms.get(k) for k in _LAT], b.stable])
    head = ["configuration", "instances", "max_batch_size", "max_queue_delay_us", "concurrency", "request_rate",
            "batch_size",
            "throughput", *[f"{k}_ms" for k in _LAT], "windows", "stable"]
    write_text(out / "results.csv", _csv(point_rows, head))
    write_text(out / "ranked.csv", _csv(ranked_rows, ["rank", "configuration", "instances", "max_batch_size",
                                                      "dynamic_batching", "max_queue_delay_us", "meets_constraints",
                                                      "concurrency", "request_rate", "batch_size", "throughput",
                                                      *[f"{k}_ms" for k in _LAT], "stable"]))
    files.update(results_csv="serving/results.csv", ranked_csv="serving/ranked.csv")
    prov = provenance(record)
    if record.chosen:
        text = (out / "configs" / f"{record.chosen}.config.pbtxt").read_text(encoding="utf-8")
        head_lines = [f"# navigator profile --triton: chosen configuration {record.chosen} "
                      f"({objective.describe()})", *[f"# {x}" for x in prov]]
        write_text(out / "chosen.config.pbtxt", "\n".join(head_lines) + "\n" + text)
        write_text(r.scratch / r.step / "config.pbtxt", text)   # serving/repo serves the chosen one
        if r.target is not None:                                 # with the ensemble's batch size to match
            from navigator.serving.ensemble import ensemble_variant

            chosen = variants.load_config(r.scratch / r.step / "config.pbtxt")
            variants.write(r.scratch / r.model / "config.pbtxt",
                           ensemble_variant(r.ens_base, r.target.steps, r.step, chosen.max_batch_size))
        variants.load_config(out / "chosen.config.pbtxt")   # still a valid ModelConfig with the comments
        files["chosen_config"] = "serving/chosen.config.pbtxt"
    files["perf_input"] = "serving/perf_input.json"
    kind = r.served.instance_group[0].kind if r.served.instance_group else 0
    from tritonclient.grpc import model_config_pb2 as mc

    ma = handoff.model_analyzer_config(
        repo=r.ws.triton_dir, model=r.model, space=space, load=r.load, batch_sizes=list(r.opts.batch_sizes),
        objective=objective, search=r.opts.search, input_data="perf_input.json", shapes=r.data.shape_flags(),
        kind=mc.ModelInstanceGroup.Kind.Name(kind), preferred=r.preferred,
        measurement_ms=r.opts.measurement_ms or DEFAULT_WINDOW_MS,
        ensemble=r.target is not None)
    notes = []
    if r.target is not None:
        notes.append(f"{r.model} is an ensemble: Model Analyzer's quick search tunes its composing models itself; "
                     f"navigator searched {r.step} ({r.ensemble.reason})")
    if None in space.delays_us:
        notes.append("configurations without dynamic batching were also measured here; Model Analyzer sweeps "
                     "the delays listed only")
    handoff.write_model_analyzer_yaml(out / "model_analyzer.yaml", ma, prov, notes)
    order = ([record.chosen] if record.chosen else []) + [n for n in r.commands if n != record.chosen]
    groups = [(n + (" (chosen)" if n == record.chosen else ""), f"configs/{n}.config.pbtxt", r.commands[n])
              for n in order]
    handoff.write_perf_analyzer_sh(out / "perf_analyzer.sh", model=r.model, groups=groups, provenance=prov,
                                   config_model=r.step, url=r.opts.url)
    files.update(model_analyzer_yaml="serving/model_analyzer.yaml", perf_analyzer_sh="serving/perf_analyzer.sh")
    measured = [by_name[n].to_dict() for n in record.ranked]
    title = f"{r.model} ({record.backend}{', stand-in' if record.stand_in else ''}; {record.tool})"
    try:
        if measured:
            plots.throughput_v_latency(out / "throughput_v_latency.png", measured, chosen=record.chosen,
                                       max_p99_ms=objective.max_p99_ms, title=f"throughput vs p99 latency: {title}")
            files["throughput_v_latency"] = "serving/throughput_v_latency.png"
            focus = by_name[record.chosen or record.ranked[0]].to_dict()
            plots.latency_v_concurrency(out / "latency_v_concurrency.png", focus,
                                        title=f"latency percentiles of {focus['name']}: {title}",
                                        open_loop=r.load.open_loop)
            files["latency_v_concurrency"] = "serving/latency_v_concurrency.png"
            if r.gpu_mem:
                pts = [(n, by_name[n].best.latency_ms.get("p99", 0.0), r.gpu_mem[n]) for n in record.ranked
                       if n in r.gpu_mem]
                plots.gpu_mem_v_latency(out / "gpu_mem_v_latency.png", pts, title=f"GPU memory vs p99: {title}")
                files["gpu_mem_v_latency"] = "serving/gpu_mem_v_latency.png"
    except ImportError as e:
        reporter.warn(f"no plots: {e} (pip install matplotlib)")
    write_text(out / "results.json", json.dumps({**record.to_dict(), "files": files,
                                                 "gpu_memory_mb": r.gpu_mem or None}, indent=1) + "\n")
    files["results_json"] = "serving/results.json"
    if (out / "tritonserver.log").is_file():
        files["server_log"] = "serving/tritonserver.log"
    record.files = files
    for line in table_lines(record):
        reporter.info(line)


def table_lines(record, limit: int = 10) -> list[str]:
    """The ranked table as plain lines (console and report)."""
    by_name = {c.name: c for c in record.configurations}
    rows = [["rank", "configuration", "throughput/s", "p50 ms", "p99 ms", "load", "meets", "stable"]]
    for i, name in enumerate(record.ranked[:limit], 1):
        c = by_name[name]
        b = c.best
        rows.append([str(i), name + (" *" if name == record.chosen else ""), f"{b.throughput:.1f}",
                     f"{b.latency_ms.get('p50', 0):.3f}", f"{b.latency_ms.get('p99', 0):.3f}", b.level,
                     "yes" if c.meets_constraints else "no", "yes" if b.stable else "no"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    out.append(f"chosen: {record.chosen}" if record.chosen else f"chosen: none ({record.reason})")
    return out

