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
from navigator.serving.outputs import backend_of, build_record, gpu_memory_mb, write_outputs
from navigator.serving import search as search_mod
from navigator.serving.measure import (DEFAULT_WINDOW_MS, LAST, MAX_WINDOWS, MIN_WINDOW_MS, SHARED_MEMORY, Load,
                                       Measurement, concurrency_range, rate_range, read_intervals)
from navigator.serving.search import Candidate, ConfigResult, Objective, Space, StopRule

log = logging.getLogger(__name__)

PERF_ANALYZER_MODES = ("auto", "on", "off")
WARMUP_S = 0.2
PA_START_S = 1.0          # perf_analyzer's start-up and connection, roughly
FINISH_RESERVE_S = 4.0     # seconds of the budget kept for stopping the server and writing the outputs


class NoConfiguration(NavigatorError):
    """No configuration met the constraints (or none could be measured). Exit 1."""

    exit_code = 1


@dataclass(frozen=True)
class ServingOptions:
    format: str | None = None                  # workspace format key; default the best
    concurrency: str | None = None             # None: 1:16 (when no open-loop mode is given)
    request_rate: str | None = None            # open loop at these rates (requests/s)
    request_intervals: str | None = None       # open loop at the gaps of this file (µs per line)
    shared_memory: str = "none"                # none | system
    batch_sizes: tuple[int, ...] = (1,)
    measurement_ms: int | None = None          # None: adaptive, DEFAULT_WINDOW_MS at most, MIN_WINDOW_MS at least
    budget_s: float = 300.0
    cpu_backends: bool = False
    python_backend: bool = False
    perf_analyzer: str = "auto"                # auto | on | off
    search: str = "brute"                      # brute | quick
    objective: str = "throughput"              # throughput | p99_latency
    max_p99_ms: float | None = None
    min_throughput: float | None = None
    instance_counts: tuple[int, ...] | None = None      # default 1 … min(4, cores)
    max_batch_sizes: tuple[int, ...] | None = None      # default powers of 2 up to the emitted max
    queue_delays_us: tuple[int | None, ...] | None = None   # default (0,); None = no dynamic batching
    preferred_batch_sizes: tuple[tuple[int, ...] | None, ...] | None = None   # sets searched; None in it: as emitted
    response_cache: tuple[bool, ...] | None = None      # searched off/on (deterministic models only)
    apply: str | None = None                   # None: no; "": WS/triton; else a repository
    tritonserver: str | None = None
    step: str = "auto"                         # an ensemble's step to search: auto | model | preprocess | …
    url: str | None = None                     # a server someone else runs: [grpc://|http://]HOST:PORT
    load_configs: bool = False                 # --url: may load each searched config there (model control)

    def check(self) -> None:
        if self.measurement_ms is not None and self.measurement_ms < 10:
            raise UserInputError(f"--measurement-ms {self.measurement_ms}: must be >= 10")
        if self.budget_s <= 0:
            raise UserInputError(f"--budget-s {self.budget_s:g}: must be > 0")
        if self.perf_analyzer not in PERF_ANALYZER_MODES:
            raise UserInputError(f"--perf-analyzer {self.perf_analyzer!r}: one of {', '.join(PERF_ANALYZER_MODES)}")
        if self.search not in search_mod.SEARCHES:
            raise UserInputError(f"--search {self.search!r}: one of {', '.join(search_mod.SEARCHES)}")
        if self.objective not in search_mod.OBJECTIVES:
            raise UserInputError(f"--objective {self.objective!r}: one of {', '.join(search_mod.OBJECTIVES)}")
        if self.max_p99_ms is not None and self.max_p99_ms <= 0:
            raise UserInputError(f"--max-p99-ms {self.max_p99_ms:g}: must be > 0")
        if self.min_throughput is not None and self.min_throughput < 0:
            raise UserInputError(f"--min-throughput {self.min_throughput:g}: must be >= 0")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise UserInputError("--batch-sizes: request batch sizes must be >= 1")
        if self.instance_counts is not None and (not self.instance_counts or min(self.instance_counts) < 1):
            raise UserInputError("--instance-counts: instance counts must be >= 1")
        if self.max_batch_sizes is not None and (not self.max_batch_sizes or min(self.max_batch_sizes) < 0):
            raise UserInputError("--max-batch-sizes: max batch sizes must be >= 0")
        if self.queue_delays_us is not None and (not self.queue_delays_us or
                                                 any(d is not None and d < 0 for d in self.queue_delays_us)):
            raise UserInputError("--queue-delays-us: delays must be >= 0 (or 'none' for no dynamic batching)")
        self.load()
        self._check_remote()
        if not self.step:
            raise UserInputError("--step: give auto, model, preprocess, postprocess or a step's model name")

    def load(self) -> Load:
        """The load mode the options ask for (checked)."""
        given = [f for f, v in (("--concurrency", self.concurrency), ("--request-rate", self.request_rate),
                                ("--request-intervals", self.request_intervals)) if v is not None]
        if len(given) > 1:
            raise UserInputError(f"{given[0]} and {given[1]}: give one load mode")
        if self.shared_memory not in SHARED_MEMORY:
            raise UserInputError(f"--shared-memory {self.shared_memory!r}: one of {', '.join(SHARED_MEMORY)}")
        if self.request_rate is not None:
            return Load("request_rate", tuple(rate_range(self.request_rate)), shared_memory=self.shared_memory)
        if self.request_intervals is not None:
            gaps = read_intervals(self.request_intervals)
            mean_rate = round(len(gaps) * 1e6 / sum(gaps), 3)
            return Load("request_intervals", (mean_rate,), intervals_us=gaps,
                        intervals_file=str(Path(self.request_intervals).expanduser().resolve()),
                        shared_memory=self.shared_memory)
        return Load("concurrency", tuple(concurrency_range(self.concurrency or "1:16")),
                    shared_memory=self.shared_memory)

    def _check_remote(self) -> None:
        if self.url is None:
            if self.load_configs:
                raise UserInputError("--load-configs: only with --url (the local server is navigator's own)")
            return
        from navigator.serving.remote import parse_url

        endpoint = parse_url(self.url)
        if self.shared_memory != "none" and not endpoint.same_host:
            raise UserInputError(f"--shared-memory {self.shared_memory}: the server at {endpoint.url} is on another "
                                 "host (system shared memory needs client and server on one machine)")
        for flag, given in (("--tritonserver", self.tritonserver), ("--cpu-backends", self.cpu_backends),
                            ("--python-backend", self.python_backend)):
            if given:
                raise UserInputError(f"{flag}: not with --url (the server there has its own backends)")
        searched = [flag for flag, given in (("--instance-counts", self.instance_counts),
                                             ("--max-batch-sizes", self.max_batch_sizes),
                                             ("--queue-delays-us", self.queue_delays_us),
                                             ("--preferred-batch-sizes", self.preferred_batch_sizes),
                                             ("--response-cache", self.response_cache)) if given]
        if searched and not self.load_configs:
            raise UserInputError(f"{searched[0]}: --url measures the model as that server serves it",
                                 hint="pass --load-configs to load each searched configuration there")


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
    min_point_s = _min_point_s(r)

    def has_time_point() -> bool:
        return time.monotonic() + min_point_s <= r.deadline

    def has_time_config() -> bool:
        return time.monotonic() + min_point_s + 1.0 <= r.deadline

    with _server(r) as server:
        r.server = server
        if r.opts.url:
            r.remote = server
            _check_served(r, reporter)
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
        need = _min_useful_budget(r, space)
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
    from navigator.triton.server import RESPONSE_CACHE_BYTES

    extra = ["--allow-gpu-metrics=true"] if shutil.which("nvidia-smi") else []   # navigator.triton.server: off
    if r.space is not None and True in r.space.caches:    # a searched cache needs the server's cache
        extra.append(f"--cache-config=local,size={RESPONSE_CACHE_BYTES}")
    return TritonServer(r.scratch, cpu_backends=r.opts.cpu_backends, models=[], log_path=r.out / "tritonserver.log",
                        tritonserver=r.opts.tritonserver, extra_args=extra)


def _check_served(r: ServingRun, reporter) -> None:
    """--url: the model there is the workspace's. Without --load-configs it is measured as served
    (one configuration, its own settings); with it, each configuration is loaded there."""
    from navigator.serving import remote, variants

    where = r.server.endpoint.url
    served = r.server.served_config(r.model)
    if served is None:
        if not r.opts.load_configs:
            raise UserInputError(f"model {r.model!r} is not loaded at {where}",
                                 hint="load it there, or pass --load-configs to load the workspace's config "
                                      "through the model-control API")
        reporter.info(f"{r.model} is not loaded at {where}: loading the workspace's config there")
        return
    diffs = remote.differences(r.base, served)
    if diffs and not r.opts.load_configs:
        raise UserInputError(f"the model {r.model!r} at {where} is not the workspace's {r.key} ({diffs[0]})",
                             hint="serve the workspace's model there, or pass --load-configs to load its config "
                                  "(the model file there must match)")
    if r.opts.load_configs:
        return
    r.base = r.served = served
    r.preferred = variants.preferred_sizes(served)
    groups = list(served.instance_group)
    count = groups[0].count if groups else 1
    delay = (served.dynamic_batching.max_queue_delay_microseconds
             if served.HasField("dynamic_batching") and served.max_batch_size else None)
    r.space = Space((max(1, count),), (served.max_batch_size,), (delay,))
    reporter.info(f"measuring {r.model} as served at {where} ({r.space.all()[0].name}); nothing there is changed")


def _evaluate(r: ServingRun, cand: Candidate, objective: Objective, rule: StopRule, has_time) -> ConfigResult:
    from navigator.serving import ensemble as serving_ens
    from navigator.serving import variants

    t0 = time.monotonic()
    if cand.cache and r.deterministic is None:
        r.deterministic = _determinism(r, cand) or ""
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
        hits, total = _cache_hits(r)
        if not hits:
            return ConfigResult(cand, status="failed", measurements=measurements, duration_s=time.monotonic() - t0,
                                reason="response cache: no hit in the statistics, so the server runs without a cache "
                                       "(tritonserver --cache-config); measured without one")
        notes.append(f"response cache: {hits} of {total} requests answered from it (the load cycles through at most "
                     f"{len(r.data.rows)} distinct inputs; a stream that repeats less gains less)")
    return ConfigResult(cand, status="ok", reason="; ".join(notes) or None, measurements=measurements,
                        duration_s=time.monotonic() - t0)


def _client(r: ServingRun):
    """A synchronous client of the measured server, in its protocol."""
    if getattr(r.server, "protocol", "grpc") == "http":
        import tritonclient.http as tc

        return tc.InferenceServerClient(_address(r), network_timeout=60.0), tc
    import tritonclient.grpc as tc

    return tc.InferenceServerClient(r.server.grpc_url), tc


def _determinism(r: ServingRun, cand: Candidate) -> str | None:
    """Before a response cache is measured: the model, served with the cache off, answers two
    inputs twice each with the same bytes (else a cached answer could differ from a computed one).
    None when it does, else why not."""
    import dataclasses

    import numpy as np

    from navigator.serving import variants
    from navigator.triton import config as cfg_mod

    off = dataclasses.replace(cand, cache=False)
    variants.write(r.scratch / r.step / "config.pbtxt", variants.variant(r.base, off, preferred=r.preferred))
    _load(r, r.model)
    client, tc = _client(r)
    try:
        for k in range(min(2, len(r.data.rows))):
            arrays = r.data.batch(k, 1)
            inputs = []
            for name in r.data.names:
                arr = arrays[name]
                inp = tc.InferInput(name, list(arr.shape), cfg_mod.triton_dtype(str(arr.dtype))[len("TYPE_"):])
                inp.set_data_from_numpy(arr)
                inputs.append(inp)
            first, second = (client.infer(r.model, inputs) for _ in range(2))
            for name in r.data.outputs:
                a, b = first.as_numpy(name), second.as_numpy(name)
                if a.shape != b.shape or a.tobytes() != b.tobytes():
                    diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) \
                        if a.shape == b.shape and a.dtype.kind in "fiu" else None
                    return (f"not searched: {r.model} is not deterministic (output {name} differs between two "
                            f"runs of one input" + (f" by up to {diff:.3g}" if diff is not None else "") + ")")
    except Exception as e:      # the server's error: the cache cannot be judged, so it is not searched
        return f"not searched: the determinism check failed ({' '.join(str(e).split())[:200]})"
    finally:
        client.close()
    return None


def _cache_hits(r: ServingRun) -> tuple[int, int]:
    """(response-cache hits, requests) in the model's statistics since it was last loaded."""
    client, _ = _client(r)
    try:
        if getattr(r.server, "protocol", "grpc") == "http":
            data = client.get_inference_statistics(r.step)
        else:
            data = client.get_inference_statistics(r.step, as_json=True)
    except Exception:
        return 0, 0
    finally:
        client.close()
    hits = total = 0
    for m in data.get("model_stats", []):
        stats = m.get("inference_stats", {})
        hits += int((stats.get("cache_hit") or {}).get("count", 0))
        total += int((stats.get("success") or {}).get("count", 0))
    return hits, total


def _point(r: ServingRun, cand: Candidate, level, batch_size: int) -> Measurement:
    """One point of the sweep at ``level``: a concurrency, or requests/s (open loop)."""
    from navigator.serving import handoff, loadgen
    from navigator.serving import perf_analyzer as pa

    load = r.load
    shapes = r.data.shape_flags()
    window_ms = _window_ms(r)
    r.window_s = window_ms / 1000.0
    windows = _window_cap(r)
    r.points_left = max(1, r.points_left - 1)
    concurrency = 0 if load.open_loop else int(level)
    rate = float(level) if load.mode == "request_rate" else None
    intervals = (float(level), load.intervals_file) if load.mode == "request_intervals" else None
    out_bytes = _output_bytes(r, batch_size) if load.shared_memory != "none" else None
    tail = f"r{level:g}" if load.open_loop else f"c{concurrency}"
    r.commands.setdefault(cand.name, []).append(    # the hand-off is for a real server: full-length windows
        handoff.command_for(model=r.model, batch_size=batch_size, shapes=shapes, protocol=_protocol(r),
                            load=pa.load_flags(concurrency=concurrency, request_rate=rate,
                                               intervals_file=load.intervals_file if intervals else None,
                                               shared_memory=load.shared_memory, output_bytes=out_bytes),
                            window_ms=r.opts.measurement_ms or DEFAULT_WINDOW_MS,
                            csv_name=f"{cand.name}_b{batch_size}_{tail}.csv"))
    if r.tool == "perf_analyzer":
        m, _ = pa.measure(r.env.perf_analyzer, r.env.process_env(), model=r.model, url=_address(r),
                          protocol=_protocol(r), input_data=r.out / "perf_input.json", shapes=shapes,
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


def _output_bytes(r: ServingRun, batch_size: int) -> int | None:
    """Bytes of one response's outputs from the config's dims (perf_analyzer's shared-memory
    output region); None when a dim is dynamic or an output holds strings (its default then)."""
    import numpy as np
    from tritonclient.grpc import model_config_pb2 as mc

    from navigator.triton import config as cfg_mod

    total = 0
    for out in r.served.output:
        dims = list(out.dims)
        if any(d < 0 for d in dims) or out.data_type == mc.TYPE_STRING:
            return None
        item = np.dtype(cfg_mod.numpy_dtype(mc.DataType.Name(out.data_type))).itemsize
        total += int(np.prod(dims or [1])) * item * (batch_size if r.served.max_batch_size else 1)
    return total or None


def _protocol(r: ServingRun) -> str:
    return getattr(r.server, "protocol", "grpc")


def _address(r: ServingRun) -> str:
    return r.server.url if r.opts.url else r.server.grpc_url


def _min_point_s(r: ServingRun, window_s: float | None = None) -> float:
    """The shortest a point can take: 3 windows; with perf_analyzer 3 more (its re-run when
    it gives up on stability) and its start-up."""
    window_s = r.window_s if window_s is None else window_s
    if r.tool == "perf_analyzer":
        return 2 * LAST * window_s + PA_START_S
    return LAST * window_s + WARMUP_S + 0.3


def _min_useful_budget(r: ServingRun, space: Space) -> float:
    """What measuring every instance count and delay once (each sweep's first max batch size, as
    the brute search's first round does) takes at the shortest windows, plus the finish."""
    shortest = (r.opts.measurement_ms or MIN_WINDOW_MS) / 1000.0
    per_config = len(r.levels) * len(r.opts.batch_sizes) * _min_point_s(r, shortest)
    first_round = len(space.instances) * len(space.delays_us) if r.opts.search == "brute" else 1
    return first_round * per_config + FINISH_RESERVE_S


def _window_ms(r: ServingRun) -> int:
    """This point's window: --measurement-ms when given; else the point's fair share of its
    configuration's share of the budget over 3 windows (6 with perf_analyzer's re-run), between
    MIN_WINDOW_MS and DEFAULT_WINDOW_MS, so a short budget still sees every configuration."""
    if r.opts.measurement_ms is not None:
        return r.opts.measurement_ms
    share = (r.config_deadline - time.monotonic()) / max(1, r.points_left)
    if r.tool == "perf_analyzer":
        per = (share - PA_START_S) / (2 * LAST)
    else:
        per = (share - WARMUP_S - 0.3) / LAST
    return int(min(DEFAULT_WINDOW_MS, max(MIN_WINDOW_MS, per * 1000.0)))


def _window_cap(r: ServingRun) -> int:
    """Windows this point may take: Perf Analyzer's 10, fewer (3 at least) when the
    configuration's fair share of the remaining budget (remaining / configurations not
    yet measured) spread over its remaining points is shorter, so one noisy configuration
    cannot eat the search; a point cut this way that was not stable says ``stable: false``."""
    now = time.monotonic()
    share = (r.config_deadline - now) / max(1, r.points_left) - WARMUP_S
    room = (r.deadline - now - _min_point_s(r)) / r.window_s + LAST   # what still fits in the whole budget
    return max(LAST, min(MAX_WINDOWS, int(share / r.window_s), int(room)))


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
