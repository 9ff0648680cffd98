"""status.yaml's ``serving:`` section (optional since schema version 2): the last serving profile or
configuration search of ``navigator profile --triton``, as :mod:`navigator.workspace.status` records it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from navigator.types import Record


@dataclass
class ServingPoint(Record):
    """One measurement of a served configuration (``navigator profile --triton``):
    throughput in inferences/s, latencies in ms (avg, p50, p90, p95, p99); its load is a
    concurrency (closed loop) or an offered request rate (v4: open loop, concurrency null)."""

    concurrency: int | None
    batch_size: int = 1
    throughput: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    windows: int | None = None
    stable: bool | None = None         # false: cut after 10 windows or by the budget
    request_rate: float | None = None  # v4: open loop, requests/s offered
    window_ms: int | None = None       # each window's length (adaptive windows shorten it)

    @property
    def level(self) -> str:
        """The load as tables print it: ``4`` or ``20/s``."""
        return f"{self.request_rate:g}/s" if self.request_rate is not None else str(self.concurrency)


@dataclass
class ServingConfig(Record):
    """One config.pbtxt variant the serving search measured."""

    name: str
    instances: int = 1
    max_batch_size: int = 0
    dynamic_batching: bool = False
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: list[int] = field(default_factory=list)
    response_cache: bool | None = None  # v4: searched on/off (null: as the emitted config has it)
    status: str = "ok"                 # ok | failed (did not load / serve) | skipped (budget)
    reason: str | None = None
    meets_constraints: bool | None = None
    best: ServingPoint | None = None   # its best measurement under the objective
    results: list[ServingPoint] = field(default_factory=list)

    _nested: ClassVar = {"best": (ServingPoint, "one"), "results": (ServingPoint, "list")}


@dataclass
class ServingStep(Record):
    """One step of a profiled ensemble, as it ran in the probe that picked the step to search
    (Triton's statistics over the probe: busy share, queueing and batches)."""

    name: str
    role: str = "step"                 # preprocess | model | postprocess | step (a hand-written one)
    instances: int = 1
    max_batch_size: int = 0
    utilization: float | None = None   # compute time / (probe time x instances): 1.0 = always busy
    queue_ms: float | None = None      # average queueing per request
    compute_ms: float | None = None    # average compute per execution (one batch)
    batch_size: float | None = None    # average requests per execution


@dataclass
class ServingEnsemble(Record):
    """``serving.ensemble``: the ensemble was measured end to end, one step's configuration
    searched (and applied); the others ran as the repository configures them."""

    name: str
    searched: str                      # the step model whose configuration was searched
    role: str = "model"
    reason: str | None = None          # --step, or the probe's bottleneck
    steps: list[ServingStep] = field(default_factory=list)

    _nested: ClassVar = {"steps": (ServingStep, "list")}


@dataclass
class ServingStatus(Record):
    """``serving:`` (optional): the last serving profile / configuration search."""

    status: str = "skipped"            # ok: a configuration was chosen; failed: none met the constraints / error
    reason: str | None = None
    date: str = ""
    duration_s: float | None = None
    budget_s: float | None = None
    machine: dict[str, Any] = field(default_factory=dict)   # cpu, cores, gpu, platform
    model: str = ""                    # the Triton model name
    key: str = ""                      # the workspace format served
    backend: str = ""                  # backend / platform of its config.pbtxt
    stand_in: bool = False             # served by a CPU stand-in of NVIDIA's backend (not representative)
    tool: str = "navigator"            # perf_analyzer | navigator (our load generator)
    search: str = "brute"              # brute | quick
    objective: dict[str, Any] = field(default_factory=dict)  # kind, max_p99_ms, min_throughput
    measurement_ms: int | None = None
    concurrency: list[int] = field(default_factory=list)   # closed-loop levels (empty in an open-loop run)
    batch_sizes: list[int] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)      # v4: mode, levels, shared_memory, intervals_file
    server: dict[str, Any] = field(default_factory=dict)    # v4: remote, url, version, loaded_configs, restored
    configurations: list[ServingConfig] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)        # "name: reason" not measured (budget, sweep stop)
    ranked: list[str] = field(default_factory=list)         # configuration names, best first
    chosen: str | None = None
    applied: str | None = None         # config.pbtxt that --apply wrote (the searched step's)
    files: dict[str, str] = field(default_factory=dict)     # what -> workspace-relative path
    setup_s: float | None = None       # scratch repository, server start, model loads: outside the budget
    ensemble: ServingEnsemble | None = None   # set when an ensemble was profiled

    _nested: ClassVar = {"configurations": (ServingConfig, "list"), "ensemble": (ServingEnsemble, "one")}
