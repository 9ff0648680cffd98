"""``navigator profile WS --triton``: serve the workspace's model with a real Triton
server, measure configurations over a concurrency sweep, search, report, hand off.

1. The format (``--format``, default the workspace's best) is emitted into a private
   scratch repository, ``WS/serving/repo/`` (the user's repository is not touched); when
   the user's repository holds the model as an ensemble, the ensemble and its steps are
   copied there instead (:mod:`navigator.serving.ensemble`) and measured end to end.
2. A local ``tritonserver`` (:mod:`navigator.triton.server`, explicit model control)
   serves it. Each configuration of the search is a config.pbtxt variant (of an
   ensemble's searched step, ``--step``; ``auto``: the busiest in a probe) written into
   the scratch repository and (re)loaded through the repository API.
3. Each configuration is measured over the concurrency sweep by the real
   ``perf_analyzer`` when it is there (``--perf-analyzer auto|on|off``) or by our
   load generator; both write the same record.
4. ``--search brute|quick`` within ``--budget-s``, which bounds the measuring: the
   scratch repository, the server's start and every load are setup (``setup_s``); the
   ranking follows ``--objective`` under ``--max-p99-ms`` / ``--min-throughput``.
5. Everything goes to ``WS/serving/`` (tables, chosen config, plots, hand-off) and
   ``status.yaml``'s ``serving:``; ``WS/report/summary.md`` is rewritten;
   ``--apply [REPO]`` writes the chosen settings into the user's repository (checked
   before measuring, written before ``serving/`` is replaced).

Exit 0 when a configuration was chosen; 1 (one ``error:`` line) when none met the
constraints or none could be measured; 2 for bad input.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import NavigatorError, UserInputError
from navigator.serving import budget, probe, remote
from navigator.serving import search as search_mod
from navigator.serving.budget import FINISH_RESERVE_S
from navigator.serving.measure import DEFAULT_WINDOW_MS, MIN_WINDOW_MS, Load, Measurement
from navigator.serving.options import ServingOptions
from navigator.serving.outputs import backend_of, build_record, gpu_memory_mb, write_outputs
from navigator.serving.search import Candidate, ConfigResult, Objective, Space, StopRule

log = logging.getLogger(__name__)


class NoConfiguration(NavigatorError):
    """No configuration met the constraints (or none could be measured). Exit 1."""

    exit_code = 1


@dataclass
class ServingRun:
    """State shared by the steps of one run."""

    ws: object
    st: object
    opts: ServingOptions
    out: Path
    scratch: Path
    model: str = ""
    key: str = ""
    base: object = None
    data: object = None
    preferred: list[int] = field(default_factory=list)
    levels: list = field(default_factory=list)     # the load's levels: concurrency, or requests/s
    load: Load = field(default_factory=Load)
    tool: str = "navigator"
    env: object = None
    server: object = None
    deadline: float = 0.0
    window_s: float = 2.0
    commands: dict[str, list[list[str]]] = field(default_factory=dict)
    gpu_mem: dict[str, float] = field(default_factory=dict)
    configs_left: int = 1          # configurations of the space not yet measured (this one included)
    config_deadline: float = 0.0   # this configuration's fair share of the budget ends here
    points_left: int = 1           # measurement points of this configuration not yet taken
    step: str = ""                 # the model whose config.pbtxt is varied (r.model, or an ensemble's step)
    served: object = None          # config of the model step (backend, stand-in, instance kind)
    target: object = None          # serving.ensemble.EnsembleTarget when an ensemble is profiled
    ens_base: object = None        # the ensemble's config as the repository has it
    ensemble: object = None        # the ServingEnsemble record
    setup_s: float = 0.0           # scratch repository, server start, loads: outside the budget
    space: object = None
    remote: object = None          # the RemoteServer of --url (kept after the run for the record)
    deterministic: str | None = None   # None: not checked; "": deterministic; else why the cache is not searched


# --------------------------------------------------------------------------- entry
def run(workspace, opts: ServingOptions, reporter=None) -> int:
    """The whole run; returns 0, or raises (UserInputError exit 2, NoConfiguration exit 1)."""
    from navigator.console import Reporter
    from navigator.workspace import status as status_mod
    from navigator.workspace.layout import Workspace
    from navigator.workspace.lock import WorkspaceLock

    opts.check()
    reporter = reporter or Reporter("auto")
    t0 = time.monotonic()
    ws = Workspace.find(workspace)
    apply_repo = None
    with WorkspaceLock(ws.lock_path):
        ws.check_no_links()
        st = status_mod.load(ws.status_path)
        final = ws.serving_dir
        out = ws.serving_partial_dir     # becomes serving/ when the run ends with a result
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        try:
            r = ServingRun(ws=ws, st=st, opts=opts, out=out, scratch=out / "repo",
                           window_s=(opts.measurement_ms or MIN_WINDOW_MS) / 1000.0,
                           load=opts.load())
            r.levels = list(r.load.levels)
            _emit(r, reporter)
            if r.step:                   # known before the server starts: bad options fail before measuring
                r.space = _space(r)
            elif r.target is not None:   # --step auto: the probe picks; check the options on the model step
                _space(r, step=r.target.step_for("model"))
            apply_repo = _apply_target(r) if opts.apply is not None else None
            r.setup_s = time.monotonic() - t0
            objective = Objective(opts.objective, opts.max_p99_ms, opts.min_throughput)
            outcome = _search(r, objective, reporter)
            record = build_record(r, r.space, objective, outcome, time.monotonic() - t0)
            write_outputs(r, r.space, objective, outcome, record, reporter)
            if apply_repo is not None and record.chosen:   # before serving/ is replaced: a failure keeps it
                path, note = _apply(r, apply_repo, outcome, record)
                record.applied = str(path)
                reporter.info(f"applied {record.chosen} to {record.applied}" + (f"; {note}" if note else ""))
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)   # a failed run leaves the previous serving/ as it was
            raise
        if final.exists():
            shutil.rmtree(final)
        os.rename(out, final)
        st.serving = record
        status_mod.save(st, ws.status_path)
        from navigator.serving import report

        summary = report.write(ws, st)
        reporter.info(f"report: {summary}")
    log.info("serving profile of %s: %s, chosen %s, %d configuration(s) measured in %.1f s (budget %g s)",
             record.model, record.status, record.chosen, len(record.ranked), time.monotonic() - t0, opts.budget_s)
    reporter.info(f"serving profile done in {time.monotonic() - t0:.1f} s (budget {opts.budget_s:g} s)")
    if record.status != "ok":
        raise NoConfiguration(record.reason or "no configuration chosen",
                              hint=f"the measured table is {final / 'ranked.csv'}")
    return 0


# --------------------------------------------------------------------------- steps
def _emit(r: ServingRun, reporter) -> None:
    """The scratch repository: the user's ensemble copied when the repository holds one
    (``--apply REPO`` or WS/triton), else the format emitted from the workspace."""
    from navigator.serving import ensemble as serving_ens
    from navigator.serving import inputs, variants
    from navigator.triton import emit
    from navigator.triton.options import TritonOptions
    from navigator.triton.planning import triton_name

    st, opts = r.st, r.opts
    user_repo = (Path(opts.apply).expanduser() if opts.apply else r.ws.triton_dir).resolve()
    name = triton_name(st.model.name)
    target = serving_ens.find(user_repo, name, st.formats)
    if target is not None and opts.url:
        raise UserInputError(f"--url: {user_repo} holds {name} as an ensemble; a remote server's ensemble cannot "
                             "be profiled yet", hint="profile it with the local server (no --url)")
    if target is not None:
        serving_ens.prepare(r, target, _check_backend)
        return
    if opts.step != "auto":
        raise UserInputError(f"--step {opts.step}: {user_repo} holds no ensemble {name} to search a step of")
    if opts.format:
        key = opts.format
    elif st.best is not None:
        key = st.best.key
    else:
        raise UserInputError("this workspace has no best format (nothing was verified); name one with --format KEY")
    result = emit(r.ws.root, TritonOptions(repo=str(r.scratch), formats=(key,), python_backend=opts.python_backend,
                                           model_version=1, force=True), status=st, lock=False)
    r.key = key
    r.model = r.step = result.served[0]
    r.base = r.served = variants.load_config(r.scratch / r.model / "config.pbtxt")
    if not opts.url:
        _check_backend(r, key, r.served)
    r.preferred = variants.preferred_sizes(r.base)
    r.data = inputs.from_workspace(r.ws, st, r.base)
    _check_load(r)
    (r.out / "perf_input.json").write_text(json.dumps(r.data.perf_analyzer_json()), encoding="utf-8")


def _check_load(r: ServingRun) -> None:
    """A stateful model's sequences go step by step at a concurrency, over the network."""
    if r.data.sequence_length and (r.load.open_loop or r.load.shared_memory != "none"):
        flag = "--shared-memory" if not r.load.open_loop else \
            "--request-rate" if r.load.mode == "request_rate" else "--request-intervals"
        raise UserInputError(f"{flag}: {r.model} is stateful; its sequences are measured at a concurrency, "
                             "over the network")


def _check_backend(r: ServingRun, what: str, cfg) -> None:
    """The local server can serve ``cfg``'s backend (or the user said how to stand in)."""
    backend = backend_of(cfg)
    if backend != "python" and not r.opts.cpu_backends and r.opts.tritonserver is None:
        raise UserInputError(
            f"{what} is served by the {backend} backend, which the local Triton {_triton_version()} server lacks "
            "(it has the Python backend only)",
            hint="pass --cpu-backends to serve it through a CPU stand-in of that backend (figures not "
                 "representative of NVIDIA's), --python-backend to serve it through a generated model.py, or "
                 "--tritonserver BINARY for a full server")


def _apply_target(r: ServingRun) -> Path:
    """``--apply [REPO]``: everything it needs, checked before the search, so a bad target
    costs no measuring."""
    from navigator.serving import ensemble as serving_ens
    from navigator.serving import variants

    repo = (Path(r.opts.apply).expanduser() if r.opts.apply else r.ws.triton_dir).resolve()
    if r.target is not None:
        serving_ens.check_apply(repo, r.target)
        return repo
    path = repo / r.model / "config.pbtxt"
    if not path.is_file():
        raise UserInputError(f"--apply {repo}: no {r.model}/config.pbtxt there",
                             hint=f"write the repository first: navigator triton {r.ws.root} --repo {repo}")
    variants.check_apply(path, r.space, measured=r.base)
    return repo


def _apply(r: ServingRun, repo: Path, outcome, record) -> tuple[Path, str | None]:
    from navigator.serving import ensemble as serving_ens
    from navigator.serving import variants

    cand = next(c.candidate for c in outcome.results if c.candidate.name == record.chosen)
    if r.target is not None:
        return serving_ens.apply(repo, r.model, r.step, cand, preferred=r.preferred)
    return variants.apply(repo, r.model, cand, preferred=r.preferred), None


def _triton_version() -> str:
    from navigator.triton import server

    return server.TRITON_VERSION


def _space(r: ServingRun, step: str | None = None) -> Space:
    """The configurations of the searched step (``step`` overrides it, for checking only)."""
    from navigator.serving import variants

    base = r.base if step is None else variants.load_config(r.scratch / step / "config.pbtxt")
    role = r.target.roles[step or r.step] if r.target is not None else "model"
    return variants.space(base, role, r.opts, key=r.key)


def _choose_tool(r: ServingRun, reporter) -> None:
    mode = r.opts.perf_analyzer
    r.tool = "navigator"
    if mode == "off":
        return
    pa = r.env.perf_analyzer if r.env is not None else None
    usable, why = False, "not in the server environment"
    if pa is not None:
        try:
            p = subprocess.run([str(pa), "--version"], capture_output=True, text=True, env=r.env.process_env(),
                               timeout=30)
            usable = p.returncode == 0
            why = "" if usable else " ".join((p.stderr or p.stdout).split())[:200]
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
    if usable:
        r.tool = "perf_analyzer"
    elif mode == "on":
        raise UserInputError(f"--perf-analyzer on: perf_analyzer cannot run here ({why})",
                             hint="use --perf-analyzer auto or off for navigator's own load generator")
    else:
        reporter.info(f"perf_analyzer not usable ({why}); measuring with navigator's load generator")
    if r.tool == "navigator" and r.opts.url:
        from navigator.serving.remote import parse_url

        if parse_url(r.opts.url).protocol != "grpc":
            raise UserInputError(f"--url {r.opts.url}: navigator's load generator speaks gRPC"
                                 + ("" if mode == "off" else f" and perf_analyzer cannot run here ({why})"),
                                 hint="give the server's gRPC port (grpc://HOST:8001)")


def _load(r: ServingRun, name: str) -> None:
    """Load (or reload) ``name``; its load time is setup, not budget: the deadlines move."""
    t0 = time.monotonic()
    try:
        r.server.load(name)
    finally:
        dt = time.monotonic() - t0
        r.deadline += dt
        r.config_deadline += dt
        r.setup_s += dt


def _search(r: ServingRun, objective: Objective, reporter) -> search_mod.SearchOutcome:
    """Start the server, pick an ensemble's step (``--step auto``: a probe), search.
    ``--budget-s`` bounds the measuring: the server's start and every load move the
    deadline by what they took (``setup_s``)."""
    from navigator.serving import ensemble as serving_ens
    from navigator.triton.server import prepare

    t0 = time.monotonic()
    r.env = prepare(quiet=True)
    _choose_tool(r, reporter)
    rule = StopRule()
    min_point_s = budget.min_point_s(r)

    def has_time_point() -> bool:
        return time.monotonic() + min_point_s <= r.deadline

    def has_time_config() -> bool:
        return time.monotonic() + min_point_s + 1.0 <= r.deadline

    with _server(r) as server:
        r.server = server
        if r.opts.url:
            r.remote = server
            remote.check_served(r, reporter)
        r.setup_s += time.monotonic() - t0
        # measurements end early enough for the finish (server stop, tables, plots, report) to fit
        reserve = min(FINISH_RESERVE_S, 0.1 * r.opts.budget_s)
        r.deadline = time.monotonic() + r.opts.budget_s - reserve
        if r.target is not None and not r.step:
            serving_ens.pick_step(r, reporter, lambda name: _load(r, name))
        if r.space is None:
            r.space = _space(r)
        space = r.space
        reporter.info(f"serving profile of {r.model} ({r.key}, {backend_of(r.served)}"
                      + (f"; searching its step {r.step}" if r.target is not None else "")
                      + f"): {r.opts.search} search over {space.size()} configuration(s), {r.load.describe()}, "
                        f"{objective.describe()}, budget {r.opts.budget_s:g} s")
        r.configs_left = space.size()
        need = budget.min_useful_budget(r, space)
        if need > r.opts.budget_s:
            reporter.warn(f"--budget-s {r.opts.budget_s:g} is short: measuring every instance count and queue delay "
                          f"once takes about {need:.0f} s here; the search measures what fits and records the rest "
                          "as skipped")

        def evaluate(cand: Candidate) -> ConfigResult:
            now = time.monotonic()
            r.config_deadline = now + max(0.0, r.deadline - now) / max(1, r.configs_left)
            r.configs_left -= 1
            res = _evaluate(r, cand, objective, rule, has_time_point)
            _say(reporter, res, objective)
            return res

        if r.opts.search == "brute":
            outcome = search_mod.brute(space, evaluate, has_time_config, rule=rule)
        else:
            outcome = search_mod.hill_climb(space, evaluate, has_time_config, objective)
        r.server = None
    return outcome


def _server(r: ServingRun):
    """The server measured: navigator's own local one, or the one at --url."""
    from navigator.serving.remote import RemoteServer, parse_url
    from navigator.triton.server import TritonServer

    if r.opts.url:
        return RemoteServer(parse_url(r.opts.url), r.scratch, may_load=r.opts.load_configs)
    from navigator.triton.server import CACHE_FLAG

    extra = ["--allow-gpu-metrics=true"] if shutil.which("nvidia-smi") else []   # navigator.triton.server: off
    if r.space is not None and True in r.space.caches:    # a searched cache needs the server's cache
        extra.append(CACHE_FLAG)
    return TritonServer(r.scratch, cpu_backends=r.opts.cpu_backends, models=[], log_path=r.out / "tritonserver.log",
                        tritonserver=r.opts.tritonserver, extra_args=extra)


def _evaluate(r: ServingRun, cand: Candidate, objective: Objective, rule: StopRule, has_time) -> ConfigResult:
    from navigator.serving import ensemble as serving_ens
    from navigator.serving import variants

    t0 = time.monotonic()
    if cand.cache and r.deterministic is None:
        r.deterministic = probe.determinism(r, cand, lambda name: _load(r, name)) or ""
    if cand.cache and r.deterministic:
        return ConfigResult(cand, status="skipped", reason=f"response cache: {r.deterministic}", duration_s=0.0)
    try:
        cfg = variants.variant(r.base, cand, preferred=r.preferred)
    except UserInputError as e:
        return ConfigResult(cand, status="failed", reason=e.one_line(), duration_s=0.0)
    text = variants.write(r.scratch / r.step / "config.pbtxt", cfg)
    limit = cand.max_batch_size
    if r.target is not None:     # the ensemble's max_batch_size at most the step's (Triton's rule)
        ens = serving_ens.ensemble_variant(r.ens_base, r.target.steps, r.step, cfg.max_batch_size)
        variants.write(r.scratch / r.model / "config.pbtxt", ens)
        limit = ens.max_batch_size
    (r.out / "configs").mkdir(exist_ok=True)
    (r.out / "configs" / f"{cand.name}.config.pbtxt").write_text(text, encoding="utf-8")
    try:
        _load(r, r.model)        # an ensemble's load reloads the step whose config changed
    except UserInputError as e:
        return ConfigResult(cand, status="failed", reason=e.one_line(), duration_s=time.monotonic() - t0)
    sizes = [b for b in r.opts.batch_sizes if (b <= limit if limit else b == 1)]
    if not sizes:
        return ConfigResult(cand, status="failed", duration_s=time.monotonic() - t0,
                            reason=f"no request batch size of {list(r.opts.batch_sizes)} fits max_batch_size "
                                   f"{limit}")
    measurements: list[Measurement] = []
    notes = []
    r.points_left = len(sizes) * len(r.levels)
    try:
        for b in sizes:
            ms, why = search_mod.sweep_levels(r.levels, lambda c, b=b: _point(r, cand, c, b), has_time,
                                              objective, rule=rule, word=r.load.word())
            measurements.extend(ms)
            if why:
                notes.append(f"batch {b}: {why}" if len(sizes) > 1 else why)
    except UserInputError as e:
        return ConfigResult(cand, status="failed", reason=e.one_line(), measurements=measurements,
                            duration_s=time.monotonic() - t0)
    mem = gpu_memory_mb(r.server.metrics_url) if not r.opts.url else None
    if mem is not None:
        r.gpu_mem[cand.name] = mem
    if cand.cache:
        hits, total = probe.cache_hits(r)
        if not hits:
            return ConfigResult(cand, status="failed", measurements=measurements, duration_s=time.monotonic() - t0,
                                reason="response cache: no hit in the statistics, so the server runs without a cache "
                                       "(tritonserver --cache-config); measured without one")
        notes.append(f"response cache: {hits} of {total} requests answered from it (the load cycles through at most "
                     f"{len(r.data.rows)} distinct inputs; a stream that repeats less gains less)")
    return ConfigResult(cand, status="ok", reason="; ".join(notes) or None, measurements=measurements,
                        duration_s=time.monotonic() - t0)


def _point(r: ServingRun, cand: Candidate, level, batch_size: int) -> Measurement:
    """One point of the sweep at ``level``: a concurrency, or requests/s (open loop)."""
    from navigator.serving import handoff, loadgen
    from navigator.serving import perf_analyzer as pa

    load = r.load
    shapes = r.data.shape_flags()
    window_ms = budget.window_ms(r)
    r.window_s = window_ms / 1000.0
    windows = budget.window_cap(r)
    r.points_left = max(1, r.points_left - 1)
    concurrency = 0 if load.open_loop else int(level)
    rate = float(level) if load.mode == "request_rate" else None
    intervals = (float(level), load.intervals_file) if load.mode == "request_intervals" else None
    out_bytes = probe.output_bytes(r, batch_size) if load.shared_memory != "none" else None
    tail = f"r{level:g}" if load.open_loop else f"c{concurrency}"
    r.commands.setdefault(cand.name, []).append(    # the hand-off is for a real server: full-length windows
        handoff.command_for(model=r.model, batch_size=batch_size, shapes=shapes, protocol=probe.protocol(r),
                            load=pa.load_flags(concurrency=concurrency, request_rate=rate,
                                               intervals_file=load.intervals_file if intervals else None,
                                               shared_memory=load.shared_memory, output_bytes=out_bytes),
                            window_ms=r.opts.measurement_ms or DEFAULT_WINDOW_MS,
                            csv_name=f"{cand.name}_b{batch_size}_{tail}.csv"))
    if r.tool == "perf_analyzer":
        m, _ = pa.measure(r.env.perf_analyzer, r.env.process_env(), model=r.model, url=probe.address(r),
                          protocol=probe.protocol(r), input_data=r.out / "perf_input.json", shapes=shapes,
                          concurrency=concurrency, batch_size=batch_size, window_ms=window_ms,
                          workdir=r.out / "perf_analyzer", tag=cand.name, max_windows=windows, request_rate=rate,
                          intervals=intervals, shared_memory=load.shared_memory, output_bytes=out_bytes)
    else:
        m = loadgen.measure(r.server.grpc_url, r.model, r.data, concurrency=max(1, concurrency),
                            batch_size=batch_size, window_ms=window_ms, deadline=r.deadline, max_windows=windows,
                            rate=rate, intervals_us=load.intervals_us if intervals else (),
                            shared_memory=load.shared_memory)
    m.window_ms = window_ms
    return m


def _say(reporter, res: ConfigResult, objective: Objective) -> None:
    dur = f" ({res.duration_s:.1f} s)" if res.duration_s is not None else ""
    if res.status != "ok":
        reporter.info(f"[{res.status}] {res.candidate.name}{dur}: {res.reason}")
        return
    best, ok = objective.best(res.measurements)
    if best is None:
        reporter.info(f"[failed] {res.candidate.name}{dur}: no measurement")
        return
    flag = "" if ok else " (does not meet the constraints)"
    at = f"{best.request_rate:g} requests/s" if best.request_rate is not None else f"concurrency {best.concurrency}"
    reporter.info(f"[ok] {res.candidate.name}{dur}: {best.throughput:.1f} infer/s at {at}, p99 "
                  f"{best.p99_ms:.3f} ms{flag}")
