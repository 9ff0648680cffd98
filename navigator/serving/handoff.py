"""The hand-off: files that let a user repeat the search on the real serving machine.

- ``model_analyzer.yaml``: a Model Analyzer ``profile`` config (its documented YAML
  keys): ``model_repository``, ``profile_models.<model>`` with
  ``model_config_parameters`` (the searched max batch sizes, queue delays and
  instance counts: a manual sweep), ``parameters`` (concurrency, batch sizes),
  ``perf_analyzer_flags`` (``input-data``, ``shape``, ``measurement-interval``),
  ``objectives`` and ``constraints``.
- ``perf_analyzer.sh``: the exact ``perf_analyzer`` command lines of every measured
  point, grouped by configuration (each names the config.pbtxt to load first,
  saved under ``configs/``), with ``--input-data perf_input.json`` and ``--shape``.
"""

from __future__ import annotations

import os
from pathlib import Path

from navigator.serving import perf_analyzer as pa
from navigator.serving.measure import Load
from navigator.serving.search import Objective, Space


def model_analyzer_config(*, repo: Path, model: str, space: Space, load: Load, batch_sizes: list[int],
                          objective: Objective, search: str, input_data: str, shapes: list[str], kind: str,
                          preferred: list[int], measurement_ms: int, ensemble: bool = False) -> dict:
    params: dict = {}
    if space.max_batch_sizes != (0,):
        params["max_batch_size"] = list(space.max_batch_sizes)
    delays = [d for d in space.delays_us if d is not None]
    if delays and space.max_batch_sizes != (0,):
        db: dict = {"max_queue_delay_microseconds": delays}
        sets = [list(preferred) if p is None else list(p) for p in space.preferred]
        if any(sets):
            db["preferred_batch_size"] = sets     # a list of lists: each set tried as is
        params["dynamic_batching"] = db
    if space.caches != (None,):
        params["response_cache"] = {"enable": [bool(c) for c in space.caches]}
    params["instance_group"] = [{"kind": kind, "count": list(space.instances)}]
    flags: dict = {"input-data": input_data, "measurement-interval": int(measurement_ms)}
    if shapes:
        flags["shape"] = list(shapes)
    if load.shared_memory != "none":
        flags["shared-memory"] = load.shared_memory
    if load.mode == "request_intervals":      # Model Analyzer sweeps rates, not interval files: PA's flag as is
        flags["request-intervals"] = load.intervals_file
        parameters: dict = {"batch_sizes": list(batch_sizes)}
    elif load.mode == "request_rate":
        parameters = {"request_rate": [round(x, 6) for x in load.levels], "batch_sizes": list(batch_sizes)}
    else:
        parameters = {"concurrency": list(load.levels), "batch_sizes": list(batch_sizes)}
    entry: dict = {"model_config_parameters": params, "parameters": parameters,
                   "perf_analyzer_flags": flags,
                   "objectives": ["perf_throughput" if objective.kind == "throughput" else "perf_latency_p99"]}
    if kind == "KIND_CPU":
        entry["cpu_only"] = True
    constraints: dict = {}
    if objective.max_p99_ms is not None:
        constraints["perf_latency_p99"] = {"max": objective.max_p99_ms}
    if objective.min_throughput is not None:
        constraints["perf_throughput"] = {"min": objective.min_throughput}
    if constraints:
        entry["constraints"] = constraints
    if ensemble:   # Model Analyzer searches an ensemble's composing models itself (quick search only)
        entry.pop("model_config_parameters")
        entry.pop("cpu_only", None)
        return {"model_repository": str(repo), "run_config_search_mode": "quick", "profile_models": {model: entry}}
    return {"model_repository": str(repo), "run_config_search_mode": search, "run_config_search_disable": True,
            "profile_models": {model: entry}}


def write_model_analyzer_yaml(path: Path, config: dict, provenance: list[str], notes: list[str]) -> None:
    import yaml

    from navigator.workspace.atomic import write_text

    head = ["# Model Analyzer config written by `navigator profile --triton` from the search it ran here.",
            *[f"# {line}" for line in provenance],
            "# Run on the serving machine:  model-analyzer profile -f model_analyzer.yaml",
            "# (model_repository: point it at the repository there; input-data is relative to where you run it)",
            *[f"# note: {n}" for n in notes], ""]
    write_text(path, "\n".join(head) + yaml.safe_dump(config, sort_keys=False, default_flow_style=None))


def write_perf_analyzer_sh(path: Path, *, model: str, groups: list[tuple[str, str, list[list[str]]]],
                           provenance: list[str], config_model: str | None = None, url: str | None = None) -> None:
    """``groups``: (configuration name, config file relative to the script, commands);
    ``config_model``: the model whose config the groups vary (an ensemble's step), when it is
    not ``model`` itself; ``url``: the server measured (--url), the script's default."""
    from navigator.serving.remote import parse_url

    address = parse_url(url).address if url else "localhost:8001"
    config_model = config_model or model
    ens_line = ([f"#   (and keep the ensemble {model}'s max_batch_size at most that config's)"]
                if config_model != model else [])
    from navigator.workspace.atomic import write_text

    lines = ["#!/usr/bin/env bash",
             "# The perf_analyzer command lines of `navigator profile --triton`, one per measured point.",
             *[f"# {line}" for line in provenance],
             "# Before each group, serve that configuration: copy its config.pbtxt over",
             f"#   <repository>/{config_model}/config.pbtxt and load the model (explicit model control:",
             f"#   curl -X POST $TRITON_HTTP_URL/v2/repository/models/{model}/load).", *ens_line,
             f"# TRITON_URL (default {address}; TRITON_GRPC_URL still read) and PERF_ANALYZER (default "
             "perf_analyzer) override.",
             "set -euo pipefail",
             'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
             f'URL="${{TRITON_URL:-${{TRITON_GRPC_URL:-{address}}}}}"',
             'PA="${PERF_ANALYZER:-perf_analyzer}"',
             'cd "$HERE"', ""]
    for name, config_rel, commands in groups:
        lines.append(f"# --- configuration {name}: {config_rel}")
        for cmd in commands:
            lines.append(pa.shell_line(cmd).replace("'$PA'", '"$PA"').replace("'$URL'", '"$URL"'))
        lines.append("")
    write_text(path, "\n".join(lines))
    os.chmod(path, 0o755)


def command_for(*, model: str, load: list[str], batch_size: int, shapes: list[str], window_ms: int,
                csv_name: str, protocol: str = "grpc") -> list[str]:
    """A hand-off line: binary and URL as shell variables, paths relative to the script;
    ``load``: :func:`navigator.serving.perf_analyzer.load_flags`."""
    return pa.command("$PA", model=model, url="$URL", input_data="perf_input.json", shapes=shapes, load=load,
                      batch_size=batch_size, window_ms=window_ms, csv_path=csv_name, verbose=False,
                      protocol=protocol)
