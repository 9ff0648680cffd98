"""What ``navigator profile WS --triton`` was asked: :class:`ServingOptions`, checked as a whole
(one bad option is one line, before anything is measured), and the load mode it names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from navigator.errors import UserInputError
from navigator.serving import search as search_mod
from navigator.serving.measure import SHARED_MEMORY, Load, concurrency_range, rate_range, read_intervals

PERF_ANALYZER_MODES = ("auto", "on", "off")


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
