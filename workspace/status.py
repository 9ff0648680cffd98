"""status.yaml: the record of a workspace (schema version 4).

A public interface: users' CI jobs and ``navigator gate`` read it. The
layout is ARCHITECTURE.md's; ``schema/status.v5.schema.json`` states it as a
JSON Schema and tests/unit/workspace/test_status.py keeps a golden file.

Loading ignores unknown keys and upgrades older files through ``MIGRATIONS``,
an ordered map ``from_version -> function(dict) -> dict`` that raises the
version by one. A file from a newer Navigator is refused with a clear line.
"""

from __future__ import annotations

import copy
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from navigator.errors import UserInputError
from navigator.types import ModelSignature, Record
from navigator.workspace.atomic import write_text
from navigator.workspace.serving_status import (  # noqa: F401 (re-exported: the records of status.yaml)
    ServingConfig, ServingEnsemble, ServingPoint, ServingStatus, ServingStep)

SCHEMA_VERSION = 5
# inconclusive (v2): a verification whose check could not have failed on its data (negative controls)
STEP_STATUSES = ("ok", "failed", "skipped", "inconclusive")
RUN_STATES = ("running", "complete", "interrupted")


def _v1_to_v2(data: dict) -> dict:
    """v2 adds the ``inconclusive`` step status and optional fields (output scale, atol derivation,
    negative controls, profile corners); a v1 record reads as it was: no v1 file holds them."""
    data["schema_version"] = 2
    return data


def _v2_to_v3(data: dict) -> dict:
    """v3 adds optional fields (output kinds, the fp32 floor, slice groups, the samples a calibrated
    format was verified on, runner settings, the precision share) and the top1 / detections modes;
    a v2 record reads as it was: no v2 file holds them."""
    data["schema_version"] = 3
    return data


def _v3_to_v4(data: dict) -> dict:
    """v4 adds the serving profile's load (open-loop request rates, shared memory) and server
    (a remote one at --url); a v3 serving record was measured by navigator's own server over
    concurrency levels through the network, and says so once migrated."""
    data["schema_version"] = 4
    sv = data.get("serving")
    if isinstance(sv, dict):
        sv.setdefault("load", {"mode": "concurrency", "levels": list(sv.get("concurrency") or []),
                               "shared_memory": "none"})
        sv.setdefault("server", {"remote": False})
    return data


def _v4_to_v5(data: dict) -> dict:
    """v5 adds a profile's runtime options and what their tuning measured (optional); a v4 profile
    was measured at its runtime's defaults, which an absent ``options`` says."""
    data["schema_version"] = 5
    return data


# from_version -> migration to from_version + 1. Keep them small and ordered.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


@dataclass
class ConvertStep(Record):
    status: str = "skipped"
    reason: str | None = None
    duration_s: float | None = None
    exporter: str | None = None
    inputs_sha256: str | None = None
    artifact_sha256: str | None = None   # of the artifact's files: a resumed run reuses only these (v2)
    log: str | None = None
    # (v3, optional) a reduced-precision artifact: the share of its weight bytes in that precision
    precision_share: float | None = None


@dataclass
class OutputCheck(Record):
    """One output's verdict. ``min_atol``/``min_rtol``: the smallest atol that
    passes at the given rtol, and the smallest rtol that passes at the given atol."""

    mode: str = "tolerance"
    passed: bool = False
    max_abs: float | None = None
    max_rel: float | None = None
    atol: float | None = None
    rtol: float | None = None
    min_atol: float | None = None
    min_rtol: float | None = None
    threshold: float | None = None     # mismatch_fraction / cosine / quantized bound
    measured: float | None = None      # mismatch fraction / cosine similarity / worst relative L2 found
    reason: str | None = None
    scale: float | None = None         # robust magnitude of the reference output (p99 of |reference|)
    atol_rule: str | None = None       # how atol was chosen: "given", or "1e-05 x scale 3.2 (...)"
    conclusive: bool | None = None     # the check rejected a wrong answer (negative control) on this data
    control: str | None = None         # what the negative controls showed
    cure: str | None = None            # when inconclusive: what makes the check able to fail
    # (v3, optional) what the output is (navigator.validators.kinds): probabilities, scores, detections,
    # logits, embedding or tensor, and how that was found; the fp32 floor (FLOOR_FACTOR x the source's
    # own variation) atol was held above; per slice group, when slices differ in magnitude by orders
    kind: str | None = None
    kind_reason: str | None = None
    floor: float | None = None
    slices: list[dict] | None = None


@dataclass
class VerifyStep(Record):
    status: str = "skipped"
    reason: str | None = None
    duration_s: float | None = None
    batch_sizes: list[int] = field(default_factory=list)
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    load_s: float | None = None        # loading the runner (and compiling, for torch_compile)
    # (v3, optional) a format calibrated on stored samples (int8): the samples it was verified on and
    # those it was calibrated on, never the same unless only one was stored (then: inconclusive)
    samples: list[str] | None = None
    calibrated_on: list[str] | None = None
    # (v3, optional) the runtime settings the verdict was reached with, as the runtime reported them
    # (OpenVINO's inference precision, onnxruntime's graph optimisation level and providers ...)
    settings: dict | None = None
    inputs_sha256: str | None = None   # what the verdict depends on: a re-run with the same reuses it
    outputs_sha256: str | None = None  # of the outputs it stored: reused only while they are unchanged (v2)
    log: str | None = None

    _nested: ClassVar = {"outputs": (OutputCheck, "dict")}


@dataclass
class ProfileResult(Record):
    batch_size: int
    throughput: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    spread: float | None = None        # (max - min) / mean throughput of the last windows: measurement noise
    io: str | None = None              # "host": numpy in and out, copies timed; "device": tensors stay on the GPU
    # (v2, optional) True: this figure comes from the interleaved race (its profile's phase: race) and is
    # the profile's peak, whatever the screening measured at other batch sizes at another moment
    raced: bool | None = None


def peak_of(results, raced=lambda r: r.get("raced"), throughput=lambda r: r["throughput"]):
    """:meth:`ProfileStep.peak` for results of any shape (records; by default, event dicts)."""
    chosen = [r for r in results if raced(r)]
    return chosen[0] if chosen else max(results, key=throughput, default=None)


@dataclass
class ProfileStep(Record):
    status: str = "skipped"
    reason: str | None = None
    duration_s: float | None = None
    stable: bool | None = None
    results: list[ProfileResult] = field(default_factory=list)
    inputs_sha256: str | None = None   # what the measurement depends on: a re-run with the same reuses it
    log: str | None = None
    # racing (v2, optional): "screening" = short screening windows only (out of the race early);
    # "race" = the peak's figure comes from the interleaved race; None = a full sweep of its own
    phase: str | None = None
    # (v5, optional) the runtime options the raced figure was measured with, and verified with, when the
    # tuning kept some (navigator.execution.tuning): what runner(), reproduce.sh and Triton's config use
    options: dict[str, Any] | None = None
    # (v5, optional) what the tuning measured: defaults, candidates (options, throughput, spread, out),
    # rounds, verify, reason, duration_s
    tuning: dict[str, Any] | None = None

    _nested: ClassVar = {"results": (ProfileResult, "list")}

    def peak(self) -> ProfileResult | None:
        """The raced figure when there is one (the race measured the contenders side by side; a
        screening figure at another batch size was measured alone, earlier, in shorter windows),
        else the highest throughput."""
        return peak_of(self.results, lambda r: r.raced, lambda r: r.throughput)


@dataclass
class RunnerStatus(Record):
    runner: str
    device: str
    provider: str | None = None
    verify: VerifyStep = field(default_factory=VerifyStep)
    profile: ProfileStep = field(default_factory=ProfileStep)

    _nested: ClassVar = {"verify": (VerifyStep, "one"), "profile": (ProfileStep, "one")}


@dataclass
class FormatStatus(Record):
    format: str
    precision: str = "fp32"
    path: str | None = None
    parent: str | None = None
    isolated: bool = True
    io_names: dict[str, str] = field(default_factory=dict)
    convert: ConvertStep = field(default_factory=ConvertStep)
    runners: dict[str, RunnerStatus] = field(default_factory=dict)
    peak_rss_mb: float | None = None   # peak resident set (VmHWM, MiB) of the worker(s) that ran its steps

    _nested: ClassVar = {"convert": (ConvertStep, "one"), "runners": (RunnerStatus, "dict")}

    @property
    def verified(self) -> bool:
        """Converted, and at least one runner verified it with none failing."""
        if self.convert.status != "ok":
            return False
        statuses = [r.verify.status for r in self.runners.values()]
        return "ok" in statuses and "failed" not in statuses


@dataclass
class ModelInfo(Record):
    name: str
    source_format: str
    path: str | None = None
    sha256: str | None = None
    # a Hugging Face model (v2, optional): task, chosen_by, architecture, model_type, dtype (as saved),
    # weights, tokenizer, trust_remote_code
    huggingface: dict | None = None

    _OPTIONAL: ClassVar = ("huggingface",)   # left out of the file while None (other sources' files unchanged)

    def to_dict(self) -> dict:
        data = super().to_dict()
        return {k: v for k, v in data.items() if not (k in self._OPTIONAL and v is None)}


@dataclass
class SamplesInfo(Record):
    count: int = 0
    source: str = "generated"          # generated | iterable | folder
    value_ranges: dict[str, list[float]] = field(default_factory=dict)
    shapes: list[dict[str, list[int]]] = field(default_factory=list)
    corners: list[int] = field(default_factory=list)   # stored batches at a shape profile's min / max (v2)
    sha256: str | None = None
    reference: dict | None = None      # {key, runner[, options]}: where the reference outputs came from
    reference_sha256: str | None = None   # of the stored reference files: a resumed run reuses only these (v2)


@dataclass
class RunnerUp(Record):
    """The verified (format, runner) ranked next after ``best`` at its peak: the second-fastest, or
    a contender the race dropped (ranked below the pairs it kept; ``best.margin`` may then be below 1)."""

    key: str
    runner: str
    batch_size: int | None = None
    throughput: float | None = None
    spread: float | None = None


@dataclass
class Best(Record):
    key: str
    runner: str
    batch_size: int | None = None
    throughput: float | None = None
    basis: str = "profile"             # profile | preference
    # how far the pick can be trusted (v2, optional; navigator.execution.racing):
    spread: float | None = None        # the window spread of the best's figure
    stable: bool | None = None         # its profile settled and its spread is within the stability bound
    runner_up: RunnerUp | None = None
    margin: float | None = None        # throughput ratio best / runner-up
    separated: bool | None = None      # ahead by more than both figures' window spread
    note: str | None = None            # why the pick is not to be trusted, or None

    _nested: ClassVar = {"runner_up": (RunnerUp, "one")}

    @property
    def trusted(self) -> bool:
        """Measured, stable and (when there is a runner-up) separated from it."""
        return self.basis == "profile" and self.stable is not False and self.separated is not False

    def lead(self) -> str | None:
        """How the pick stands against its runner-up, in one clause; None without a measured one.
        A margin below 1 is a contender the race dropped: its figure froze when it left, while the
        pick's later windows read lower on a loaded machine."""
        ru = self.runner_up
        if ru is None or not self.margin:
            return None
        if self.margin < 1:
            return (f"the race dropped {ru.key} on {ru.runner} (its figure, {ru.throughput:.1f}/s, froze when it "
                    f"left; {self.key}'s later windows read {self.margin:.2f}x that)")
        return f"{self.margin:.2f}x ahead of {ru.key} on {ru.runner}" + (
            ", beyond the windows' spread" if self.separated else "")


@dataclass
class Status(Record):
    model: ModelInfo
    schema_version: int = SCHEMA_VERSION
    navigator_version: str = ""
    created: str = ""
    updated: str = ""
    state: str = "running"
    environment: dict[str, Any] = field(default_factory=dict)
    signature: ModelSignature = field(default_factory=ModelSignature)
    batch_dim: int | None = None
    shape_profiles: list[dict[str, dict[str, list[int]]]] = field(default_factory=list)
    samples: SamplesInfo = field(default_factory=SamplesInfo)
    config: dict[str, Any] = field(default_factory=dict)
    formats: dict[str, FormatStatus] = field(default_factory=dict)
    best: Best | None = None
    serving: ServingStatus | None = None   # optional: written by `navigator profile --triton`
    # (v3, optional) a stateful model: its state pairs ({input, output}) and how they were found, the
    # sequence it was verified over (steps, the step its state was reset at for the control), or the
    # reason it keeps hidden state
    stateful: dict | None = None

    _nested: ClassVar = {
        "model": (ModelInfo, "one"),
        "signature": (ModelSignature, "one"),
        "samples": (SamplesInfo, "one"),
        "formats": (FormatStatus, "dict"),
        "best": (Best, "one"),
        "serving": (ServingStatus, "one"),
    }

    # Order of keys in the file, as ARCHITECTURE.md shows it.
    _ORDER: ClassVar = ("schema_version", "navigator_version", "created", "updated", "state", "environment",
                        "model", "signature", "batch_dim", "shape_profiles", "samples", "stateful", "config",
                        "formats", "best", "serving")
    _OPTIONAL: ClassVar = ("serving", "stateful")   # left out of the file while None (older files stay as they were)

    def to_dict(self) -> dict:
        data = super().to_dict()
        return {k: data[k] for k in self._ORDER if not (k in self._OPTIONAL and data[k] is None)}


def migrate(data: dict, *, source: str = "status.yaml") -> dict:
    """Upgrade a loaded status mapping to SCHEMA_VERSION through MIGRATIONS."""
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:  # (True is an int)
        raise UserInputError(f"{source}: schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        from navigator._version import __version__

        raise UserInputError(
            f"{source}: schema_version {version} was written by a newer Navigator "
            f"(this is {__version__}, which reads up to {SCHEMA_VERSION})",
            hint="upgrade navigator",
        )
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise UserInputError(f"{source}: no migration from schema_version {version}")
        data = step(copy.deepcopy(data))  # the caller's mapping stays as it was
        if not isinstance(data, dict) or data.get("schema_version") != version + 1:
            raise RuntimeError(f"migration from schema_version {version} did not raise it by one")
        version += 1
    return data


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        """Short lists of scalars (shapes, ranges) in flow style: ``shape: [-1, 8]``."""

    def represent_list(dumper, data):
        flow = len(data) <= 16 and all(isinstance(x, (int, float, str, bool)) or x is None for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    Dumper.add_representer(list, represent_list)
    return Dumper


def dumps(status: Status) -> str:
    import yaml

    return yaml.dump(status.to_dict(), Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=120)


def save(status: Status, path: str | os.PathLike) -> None:
    """Write status.yaml atomically (temp file + rename)."""
    status.updated = now()
    if not status.created:
        status.created = status.updated
    write_text(path, dumps(status))


def loads(text: str, *, source: str = "status.yaml") -> Status:
    """A Status from status.yaml's text: parsed without aliases, migrated to the current version
    and checked against its JSON Schema (where jsonschema is installed), so a hand-edited file of
    the wrong types or shape is one "malformed status" line, never a crash further on."""
    from navigator.errors import DependencyMissing
    from navigator.workspace import schema, yamltext

    data = yamltext.parse(text, source)
    if not isinstance(data, dict):
        raise UserInputError(f"{source}: expected a mapping at the top level")
    data = migrate(data, source=source)
    try:
        schema.validate(data, source=source, types_only=True)
    except DependencyMissing:
        pass
    except UserInputError as e:
        raise UserInputError(f"{source}: malformed status ({e.one_line().removeprefix(source + ': ')})") from None
    try:
        status = Status.from_dict(data)
    except (TypeError, ValueError, AttributeError) as e:
        raise UserInputError(f"{source}: malformed status ({e})") from None
    bad = _unknown_statuses(status) + _inconsistent(status)
    if bad:
        raise UserInputError(f"{source}: malformed status ({bad[0]})")
    return status


DIM_MAX = 2**31 - 1   # a dim of a tensor Navigator verifies or a config.pbtxt holds


def _inconsistent(status: Status) -> list[str]:
    """What the schema cannot say: the best format is one of the formats, batch_dim is a dim of
    every input, dims fit the config fields they become."""
    bad = []
    if any(fs.convert.status == "ok" for fs in status.formats.values()) and not (
            status.signature.inputs and status.signature.outputs):
        bad.append("formats were converted but the signature has no inputs or no outputs")
    if status.best is not None and status.best.key not in status.formats:
        bad.append(f"best.key {status.best.key!r} is not one of the formats")
    ranks = [len(spec.shape) for spec in status.signature.inputs]
    if status.batch_dim is not None and any(status.batch_dim >= r for r in ranks):
        bad.append(f"batch_dim {status.batch_dim} is not a dim of every input (ranks {ranks})")
    dims = [d for spec in status.signature.inputs + status.signature.outputs for d in spec.shape]
    dims += [d for profile in status.shape_profiles for corners in profile.values() if isinstance(corners, dict)
             for shape in corners.values() if isinstance(shape, list) for d in shape]
    if any(not isinstance(d, int) or d > DIM_MAX or d < -1 for d in dims):
        bad.append(f"a dim of the signature or the shape profiles is not an integer in [-1, {DIM_MAX}]")
    return bad


def _unknown_statuses(status: Status) -> list[str]:
    """Run states and step statuses outside RUN_STATES / STEP_STATUSES (a hand-edited or
    corrupted file: the gate and resume must not guess what they mean)."""
    bad = [] if status.state in RUN_STATES else [f"state {status.state!r} is not one of {', '.join(RUN_STATES)}"]
    for key, fs in status.formats.items():
        steps = [("convert", fs.convert)] + [(f"{rk} {stage}", getattr(rs, stage)) for rk, rs in fs.runners.items()
                                             for stage in ("verify", "profile")]
        bad += [f"formats.{key} {what} status {step.status!r} is not one of {', '.join(STEP_STATUSES)}"
                for what, step in steps if step.status not in STEP_STATUSES]
    return bad


STATUS_MAX_BYTES = 16 << 20   # a status.yaml of hundreds of formats is well under 1 MiB


def load(path: str | os.PathLike) -> Status:
    from navigator.workspace.atomic import read_regular

    path = Path(path)
    try:
        text = read_regular(path, STATUS_MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path}: no status.yaml here; is this a Navigator workspace?") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserInputError(f"{path}: cannot read ({e})") from None
    return loads(text, source=str(path))
