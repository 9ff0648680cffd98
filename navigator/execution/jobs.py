"""The records the parent and its workers exchange: a :class:`Job` of :class:`Task`
steps goes to the worker as JSON; the worker answers with :class:`Event` lines in
the job's events file. Both sides read and write these types only, never raw
dictionaries, so a field renamed on one side is renamed on the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from navigator.types import Record


def timeout_reason(limit: float, stage: str | None = None, *, where: str = "") -> str:
    """The one wording of a stage stopped by --timeout, wherever it ran (a worker, a thread of the
    calling process, a race window); ``where`` says what happened to it."""
    text = f"timed out after {limit:g} s" + (f" in {stage}" if stage else "") + " (--timeout)"
    return text + (f"{where}" if where.startswith(";") or not where else f" {where}")


@dataclass
class ConvertSpec(Record):
    """Which edge makes the artifact: a converter class by import path, workspace-relative paths."""

    converter: str                       # "module:QualName"
    source: str
    output: str
    params: dict = field(default_factory=dict)
    device: str = "cpu"


@dataclass
class VerifySpec(Record):
    """How the outputs are compared: one rule per output (mode, atol, rtol, threshold)."""

    rules: dict[str, dict] = field(default_factory=dict)
    allow_nan: bool = False
    error_stat: str = "elemwise"
    batch_sizes: list[int] = field(default_factory=list)   # besides each sample's own batch size
    batch_dim: int | None = None
    corners: list[str] = field(default_factory=list)       # samples at a profile corner: their own size only
    static: bool = False                                   # static shapes: only samples shaped like the first
    kinds: dict[str, str] = field(default_factory=dict)    # output kinds the user declared (--output-kinds)
    held_out: list[str] = field(default_factory=list)      # verify on these samples only (int8: not calibrated on)
    calibrated_on: list[str] = field(default_factory=list)  # the samples the format was calibrated on
    samples_given: bool = False                            # the user's samples, not generated ones
    # a stateful model: {pairs: [{input, output}], reset_at}; the samples are the steps of one sequence
    sequence: dict | None = None


@dataclass
class ProfileSpec(Record):
    batch_dim: int | None = None
    settings: dict = field(default_factory=dict)            # navigator.execution.profiling.ProfileSettings
    race: bool = False   # measured in the race job (navigator.execution.race_job), not in the format's worker
    screen: bool = False  # the run's only (format, runner): screened in its own worker, nothing to race
    # cores other processes kept busy before this screening, when that loaded the machine (None: quiet);
    # navigator.execution.profiling.screen_settings
    loaded: float | None = None


@dataclass
class RunnerTask(Record):
    runner: str
    device: str
    provider: str | None = None
    options: dict = field(default_factory=dict)
    rules: dict | None = None    # its own verify rules, when it runs at another precision than the format's

    @property
    def key(self) -> str:
        return f"{self.runner}-{self.provider or self.device}"

    def spec(self):
        from navigator.formats import RunnerSpec

        return RunnerSpec(self.runner, self.device, self.provider)

    @classmethod
    def of(cls, spec, **options) -> "RunnerTask":
        return cls(runner=spec.runner, device=spec.device, provider=spec.provider, options=dict(options))


@dataclass
class PrepareSpec(Record):
    """A source prepared in a worker (``file.py:factory``: user code never runs in the calling
    process): open it, take or generate its samples, compute the reference, into ``out``."""

    model: str                           # the factory spec
    config: dict = field(default_factory=dict)   # NavigatorConfig.to_dict() of the run
    out: str = ""                        # folder for the samples, reference and prepared.json
    samples: str | None = None           # folder of user batches staged by the parent, if any


@dataclass
class Task(Record):
    """One unit of a job: a format's convert -> verify -> profile (``kind: format``), or the
    reference outputs computed with one runner (``kind: reference``)."""

    kind: str                            # format | reference | prepare
    key: str
    artifact: str                        # workspace-relative
    io_names: dict[str, str] = field(default_factory=dict)   # our name -> name inside the artifact
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    convert: ConvertSpec | None = None
    runners: list[RunnerTask] = field(default_factory=list)
    verify: VerifySpec | None = None
    profile: ProfileSpec | None = None
    reference_runner: RunnerTask | None = None                # kind reference
    variation_runner: RunnerTask | None = None                # kind reference: the source as runners run it
    optional: list[str] = field(default_factory=list)         # kind reference: samples it may leave out
    prepare: PrepareSpec | None = None                        # kind prepare

    _nested: ClassVar = {"convert": (ConvertSpec, "one"), "runners": (RunnerTask, "list"),
                         "verify": (VerifySpec, "one"), "profile": (ProfileSpec, "one"),
                         "reference_runner": (RunnerTask, "one"), "variation_runner": (RunnerTask, "one"),
                         "prepare": (PrepareSpec, "one")}

    def static(self) -> "Task":
        """This task for an artifact exported with static shapes: the samples' shapes only."""
        task = Task.from_dict(json.loads(json.dumps(self.to_dict())))
        if task.verify is not None:
            task.verify.batch_sizes = []
            task.verify.static = True
        if task.profile is not None:
            task.profile.settings["batch_sizes"] = [0]   # 0: the sample's own batch size
        return task

    def without_convert(self) -> "Task":
        task = Task.from_dict(self.to_dict())
        task.convert = None
        return task


@dataclass
class RacePeer(Record):
    """A (format, runner) that only the calling process can run (a live module's: no worker has
    the object), screened there, entered in the race job: the race worker asks the calling
    process for each of its windows (an ``event: window``) and reads the answer, a
    :class:`PeerWindow`, from ``Workspace.race_reply`` once woken through ``Workspace.race_wake``."""

    key: str
    runner: str
    profile: dict                        # its screening record: a ProfileStep's stable/results/reason/phase
    settings: dict                       # its task's ProfileSettings fields (budget_s, window_s, ...)
    duration_s: float = 0.0              # its screening's

    @property
    def name(self) -> str:
        return f"{self.key} on {self.runner}"


@dataclass
class PeerWindow(Record):
    """The calling process's answer to an ``event: window``: one window's latencies (s), or why
    it could not measure one."""

    latencies: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class Job(Record):
    workspace: str
    events: str                          # the events file (JSON lines)
    tasks: list[Task] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    parent_pid: int | None = None
    race: bool = False                   # the race job: screen and race the tasks' runners (race_job)
    # The race job: (format, runner) pairs of the calling process (a live module's, screened there)
    # that join the race; their windows are measured by the calling process when asked (race_job)
    race_peers: list[RacePeer] = field(default_factory=list)
    # The race job: format keys best cannot pick (a server would not run them as verified:
    # navigator.formats.serving_refusal); raced, never tuned
    not_best: list[str] = field(default_factory=list)
    # The race job: cores other processes kept busy over the run so far, when that loaded the machine
    # (None: quiet); its first screening is adapted to it (profiling.screen_settings)
    busy: float | None = None

    _nested: ClassVar = {"tasks": (Task, "list"), "race_peers": (RacePeer, "list")}

    # In-process jobs only (never serialized): the live source object, handed to the
    # runners and converters that need it (navigator.sources.torch_support.LiveModule).
    live: Any = field(default=None, repr=False, compare=False, metadata={"transient": True})
    # In-process jobs only: when a list, the job verifies but leaves its profiles here, each
    # (task index, task, runner spec, active runner, io names), for the calling thread to measure
    # once the job's thread ended (navigator.pipeline.dispatch.run_job_in_process).
    measure_later: Any = field(default=None, repr=False, compare=False, metadata={"transient": True})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=str)

    @classmethod
    def from_json(cls, text: str) -> "Job":
        return cls.from_dict(json.loads(text))


@dataclass
class ConvertResult(Record):
    status: str = "ok"
    reason: str | None = None
    duration_s: float | None = None
    exporter: str | None = None
    notes: list[str] = field(default_factory=list)
    static_shapes: bool = False
    io_names: dict[str, str] = field(default_factory=dict)
    precision_share: float | None = None   # of the weight bytes in the key's precision (reduced precisions)


@dataclass
class Event(Record):
    """One line of the events file: a stage started, or ended with its ``result`` (the
    stage's record as a mapping: ConvertResult, a VerifyStep, a ProfileStep)."""

    task: int
    key: str
    stage: str                           # reference | convert | verify | profile | race
    event: str                           # start | end | window (the race asks for a peer's window)
    runner: str | None = None
    result: dict = field(default_factory=dict)
    t: float = 0.0

    @property
    def status(self) -> str:
        return self.result.get("status", "ok")

    @property
    def ended(self) -> bool:
        return self.event == "end"
