"""Gate policies: the YAML (or mapping) a release must meet, parsed and checked into
a :class:`GatePolicy` with one clear error line for every mistake."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.validators.tolerances import MODES

DEFAULT_NOISE_MARGIN = 0.03
UNSTABLE_NOISE_MARGIN = 0.10
FINGERPRINT_KEYS = ("python", "platform", "cpu", "cpu_count", "gpu", "device")
# the runtimes whose version throughput depends on, as deps.versions() names them
FINGERPRINT_PACKAGES = ("onnxruntime", "torch", "openvino", "tensorflow", "tensorrt", "tensorrt-rtx-cu13",
                        "tensorrt-rtx-cu12", "tensorrt-rtx")
KINDS = ("workspace", "format", "tolerance", "throughput", "latency", "regression", "best")
POLICY_KEYS = ("require_formats", "outputs", "min_throughput", "max_p99_ms", "max_regression", "noise_margin",
               "best")
# best: how sure the workspace's best pick must be. separated: measured, stable and ahead of the
# runner-up by more than both figures' window spread; stable: measured and stable; warn (the
# default): an unsure pick is reported as a skipped check that names why, never failing the gate;
# any: not looked at.
BEST_RULES = ("separated", "stable", "warn", "any")
OUTPUT_KEYS = ("mode", "atol", "rtol", "threshold")


# --------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class OutputPolicy:
    """How one output must compare with the reference."""

    mode: str = "tolerance"
    atol: float | None = None           # None: the workspace's tolerance for the format's precision
    rtol: float | None = None
    threshold: float | None = None      # mismatch_fraction / cosine / quantized bound


@dataclass(frozen=True)
class Bound:
    """A throughput or latency bound, at the best batch size or at ``batch_size``."""

    value: float
    batch_size: int | None = None

    def where(self) -> str:
        return "at the best batch size" if self.batch_size is None else f"at batch {self.batch_size}"


@dataclass(frozen=True)
class GatePolicy:
    require_formats: tuple[str, ...] = ()
    outputs: dict[str, OutputPolicy] = field(default_factory=dict)
    min_throughput: dict[str, Bound] = field(default_factory=dict)
    max_p99_ms: dict[str, Bound] = field(default_factory=dict)
    max_regression: float | None = None
    noise_margin: float | None = None
    best: str = "warn"
    source: str = "policy"

    @property
    def formats(self) -> list[str]:
        """Every format the policy gates, in order of first mention."""
        out: list[str] = []
        for key in (*self.require_formats, *self.min_throughput, *self.max_p99_ms):
            if key not in out:
                out.append(key)
        return out

    def check_outputs(self, output_names: list[str]) -> None:
        """Refuse output names the model does not have."""
        for name in self.outputs:
            if name not in output_names:
                raise UserInputError(f"{self.source}: outputs.{name}: the model has no output {name!r}; its "
                                     f"outputs are {', '.join(repr(n) for n in output_names)}")

    def to_dict(self) -> dict:
        def bound(b: Bound):
            return b.value if b.batch_size is None else {"batch_size": b.batch_size, "value": b.value}

        return {"require_formats": list(self.require_formats),
                "outputs": {k: {f: getattr(v, f) for f in OUTPUT_KEYS if getattr(v, f) is not None}
                            for k, v in self.outputs.items()},
                "min_throughput": {k: bound(v) for k, v in self.min_throughput.items()},
                "max_p99_ms": {k: bound(v) for k, v in self.max_p99_ms.items()},
                "max_regression": self.max_regression, "noise_margin": self.noise_margin, "best": self.best}


def _number(where: str, value: Any, *, minimum: float | None = None, positive: bool = False,
            below: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserInputError(f"{where}: expected a number, got {type(value).__name__} ({value!r})")
    try:
        number = float(value)          # YAML 1.1 reads 1e-3 (no dot) as a string
    except ValueError:
        raise UserInputError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise UserInputError(f"{where}: expected a finite number, got {value!r}")
    if positive and number <= 0:
        raise UserInputError(f"{where}: must be > 0, got {value!r}")
    if minimum is not None and number < minimum:
        raise UserInputError(f"{where}: must be >= {minimum:g}, got {value!r}")
    if below is not None and number >= below:
        raise UserInputError(f"{where}: must be < {below:g}, got {value!r}")
    return number


def _format_key(where: str, value: Any) -> str:
    from navigator import formats

    if not isinstance(value, str):
        raise UserInputError(f"{where}: expected a format key such as onnx-optimized, got {value!r}")
    try:
        formats.parse_key(value)
    except UserInputError as e:
        raise UserInputError(f"{where}: unknown format {value!r} ({e.one_line()})") from None
    return value


def _mapping(where: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise UserInputError(f"{where}: expected a mapping, got {type(value).__name__} ({value!r})")
    return value


def _bounds(source: str, key: str, value: Any, *, positive: bool) -> dict[str, Bound]:
    out: dict[str, Bound] = {}
    for fmt, spec in _mapping(f"{source}: {key}", value).items():
        where = f"{source}: {key}.{fmt}"
        fmt = _format_key(where, fmt)
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - {"batch_size", "value"})
            if unknown:
                raise UserInputError(f"{where}: unknown key {unknown[0]!r}; valid: batch_size, value")
            if "value" not in spec:
                raise UserInputError(f"{where}: needs 'value' (and optionally 'batch_size')")
            batch = spec.get("batch_size")
            if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
                raise UserInputError(f"{where}.batch_size: expected an integer >= 1, got {batch!r}")
            out[fmt] = Bound(_number(f"{where}.value", spec["value"], positive=positive, minimum=0.0), batch)
        else:
            out[fmt] = Bound(_number(where, spec, positive=positive, minimum=0.0))
    return out


def _output_policy(source: str, name: str, spec: Any) -> OutputPolicy:
    where = f"{source}: outputs.{name}"
    if isinstance(spec, str):
        spec = {"mode": spec}
    spec = _mapping(where, spec)
    unknown = sorted(set(spec) - set(OUTPUT_KEYS))
    if unknown:
        raise UserInputError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(OUTPUT_KEYS)}")
    mode = spec.get("mode", "tolerance")
    if mode not in MODES:
        raise UserInputError(f"{where}.mode: {mode!r} is not one of {', '.join(MODES)}")
    atol = None if spec.get("atol") is None else _number(f"{where}.atol", spec["atol"], minimum=0.0)
    rtol = None if spec.get("rtol") is None else _number(f"{where}.rtol", spec["rtol"], minimum=0.0)
    threshold = spec.get("threshold")
    bounds = MODES[mode]
    if bounds is not None:
        if threshold is None:
            raise UserInputError(f"{where}: mode {mode} needs a threshold")
        threshold = _number(f"{where}.threshold", threshold)
        low, high = bounds
        if not low <= threshold <= high:
            raise UserInputError(f"{where}.threshold: must be in [{low:g}, {high:g}] for {mode}, got {threshold:g}")
    elif threshold is not None:
        takes = ", ".join(m for m, b in MODES.items() if b is not None)
        raise UserInputError(f"{where}.threshold: only {takes} take a threshold")
    return OutputPolicy(mode=mode, atol=atol, rtol=rtol, threshold=threshold)


def parse_policy(data: Any, *, source: str = "policy") -> GatePolicy:
    """Validate a policy mapping; every error is a UserInputError naming the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserInputError(f"{source}: expected a mapping of policy keys at the top level, "
                             f"got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in POLICY_KEYS)
    if unknown:
        raise UserInputError(f"{source}: unknown key {unknown[0]!r}; valid: {', '.join(POLICY_KEYS)}")
    required = data.get("require_formats") or []
    if isinstance(required, str):
        required = [required]
    if not isinstance(required, (list, tuple)):
        raise UserInputError(f"{source}: require_formats: expected a list of format keys, got "
                             f"{type(required).__name__}")
    required = tuple(dict.fromkeys(_format_key(f"{source}: require_formats[{i}]", k)
                                   for i, k in enumerate(required)))
    outputs = {str(name): _output_policy(source, str(name), spec)
               for name, spec in _mapping(f"{source}: outputs", data.get("outputs") or {}).items()}
    min_thr = _bounds(source, "min_throughput", data.get("min_throughput") or {}, positive=True)
    max_p99 = _bounds(source, "max_p99_ms", data.get("max_p99_ms") or {}, positive=True)
    max_reg = data.get("max_regression")
    if max_reg is not None:
        max_reg = _number(f"{source}: max_regression", max_reg, minimum=0.0, below=1.0)
    margin = data.get("noise_margin")
    if margin is not None:
        margin = _number(f"{source}: noise_margin", margin, minimum=0.0, below=1.0)
    best = data.get("best", "warn")
    if best not in BEST_RULES:
        raise UserInputError(f"{source}: best: expected one of {', '.join(BEST_RULES)}, got {best!r}")
    policy = GatePolicy(require_formats=required, outputs=outputs, min_throughput=min_thr, max_p99_ms=max_p99,
                        max_regression=max_reg, noise_margin=margin, best=best, source=source)
    if not policy.formats:
        raise UserInputError(f"{source}: names no format to gate; give require_formats (or min_throughput / "
                             "max_p99_ms)")
    return policy


def load_policy(policy: Any) -> GatePolicy:
    """A GatePolicy from a path to YAML, a mapping, or a GatePolicy."""
    if isinstance(policy, GatePolicy):
        return policy
    if isinstance(policy, dict):
        return parse_policy(policy, source="policy")
    if isinstance(policy, (str, os.PathLike)):
        from navigator.config import read_yaml

        p = Path(policy)
        source = f"--policy {p}"
        return parse_policy(read_yaml(p, source), source=source)
    raise UserInputError(f"policy: expected a path to a YAML file or a mapping, got {type(policy).__name__}")
