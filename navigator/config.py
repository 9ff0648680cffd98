"""The effective options of a run, as one frozen dataclass.

``None`` means "the default", resolved once in :meth:`NavigatorConfig.resolved`.
User spellings (``--shapes ids:8x16`` strings, YAML mappings, API keywords)
go through :func:`from_mapping`, the one adapter, so the CLI, ``--config-path``
and ``navigator.convert(**options)`` accept the same keys and values.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from navigator import specs
from navigator.errors import UserInputError
from navigator.workspace.layout import DEFAULT_WORKDIR

# defaults that more than one module states (help texts, the profiler's own settings, the Triton emitter)
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_PROFILE_BUDGET_S = 20.0
DEFAULT_TIMEOUT_S = 600.0

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")


@dataclass(frozen=True)
class NavigatorConfig:
    workdir: str | None = None
    model_name: str | None = None
    model_format: str | None = None
    signature_name: str | None = None              # SavedModel signature (default serving_default)
    task: str | None = None                         # Hugging Face task (default: from config.architectures)
    trust_remote_code: bool = False                 # run a Hugging Face folder's own model code
    targets: tuple[str, ...] | None = None
    target_precisions: tuple[str, ...] | None = None
    device: str | None = None
    # shape profiles: each a {name: {"min": [...], "opt": [...], "max": [...]}}
    shape_profiles: tuple[dict, ...] | None = None
    shapes: tuple[dict, ...] | None = None          # sample shapes for generated samples, one per profile
    value_ranges: dict | None = None
    dtypes: dict | None = None
    samples: str | None = None
    sample_count: int | None = None
    batch_dim: int | None = None
    no_batching: bool = False
    max_batch_size: int | None = None
    atol: dict | None = None
    rtol: dict | None = None
    compare: dict | None = None
    output_kinds: dict | None = None                # output name -> kind (navigator.validators.kinds), declared
    state: dict | None = None                       # state input -> the output it comes back as (stateful models)
    error_stat: str | None = None
    allow_nan: bool = False
    # Per stage and format, in seconds. Enforced in full for workers (the process group is killed).
    # Jobs of a live source (an nn.Module / Keras object passed to the API) and converters defined in
    # the user's __main__ run in the calling process: there the stage is stopped by an exception raised
    # in its thread at the next Python bytecode; code blocked inside native code (a C++ export, a
    # kernel) cannot be stopped, so its thread is abandoned after a grace period, the stage is marked
    # failed, and the thread keeps its CPU and memory until the process exits (pipeline._run_in_thread).
    timeout: float | None = None
    # Memory limit of each worker process (with its subprocesses), GiB of resident anonymous + shared
    # memory; above it the worker is killed and its stage fails (navigator.execution.isolation). Default: 75% of
    # the machine's (or the container's cgroup) memory. 0: no limit. Not applied to jobs run in the
    # calling process (live sources).
    worker_memory_gb: float | None = None
    profile_budget_s: float | None = None
    no_profile: bool = False
    # Formats converted and verified at once (worker processes); None/0: the machine's cores, bounded
    # by its memory (navigator.pipeline.schedule). Profiling always runs alone.
    jobs: int | None = None
    no_race: bool = False                           # profile each format to full depth in its own worker
    # Fresh interpreters as workers instead of forks of a server that imported the frameworks once
    # (navigator.execution.forkserver).
    no_warm_workers: bool = False
    allow_failures: bool = False
    force: bool = False
    verify_batch_sizes: tuple[int, ...] | None = None
    converter_params: dict | None = None            # {converter name: {param: value}}
    runners: tuple[str, ...] | None = None          # runner names to use (default: every one that fits)
    profile_batch_sizes: tuple[int, ...] | None = None   # measure exactly these instead of doubling
    reference: str | None = None                     # format key whose outputs are the reference
    seed: int | None = None
    triton_repo: str | None = None                  # write a Triton repository there at the end (navigator.triton)
    # TensorRT / TensorRT-RTX engine builds (onnx -> tensorrt(_rtx), Torch-TensorRT)
    trt_plugins: tuple[str, ...] | None = None      # plugin libraries (.so), stored as absolute paths
    trt_workspace_mb: int | None = None             # builder workspace limit, MiB (default 8192)
    trt_opt_level: int | None = None                # builder optimisation level 0-5 (default: TensorRT's, 3)
    trt_version_compatible: bool = False            # TensorRT engines that load on later TensorRT 10.x/11.x

    # Defaults, resolved once.
    DEFAULTS = {
        "workdir": DEFAULT_WORKDIR,
        "target_precisions": ("fp32",),
        "device": "auto",
        "max_batch_size": DEFAULT_MAX_BATCH_SIZE,
        "error_stat": "elemwise",
        "timeout": DEFAULT_TIMEOUT_S,
        "profile_budget_s": DEFAULT_PROFILE_BUDGET_S,
        "seed": 0,
    }

    def resolved(self) -> "NavigatorConfig":
        """Every None that has a default replaced by it (``device: auto`` stays
        ``auto`` until the pipeline decides)."""
        changes = {k: v for k, v in self.DEFAULTS.items() if getattr(self, k) is None}
        if self.worker_memory_gb is None:
            from navigator.machine import default_memory_limit_gb

            changes["worker_memory_gb"] = default_memory_limit_gb() or 0.0
        return dataclasses.replace(self, **changes)

    def with_options(self, **options: Any) -> "NavigatorConfig":
        """A copy with ``options`` (user spellings) applied on top."""
        return from_mapping(options, base=self, source="options")

    def to_dict(self) -> dict:
        """For status.yaml's ``config``: every option, JSON/YAML-safe."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "NavigatorConfig":
        """The config :meth:`to_dict` wrote (a worker gets the run's effective options this way):
        lists back to tuples where the field is a tuple; unknown keys are an error."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if isinstance(value, list) and "tuple" in str(f.type):
                value = tuple(tuple(v) if isinstance(v, list) and f.name in _NESTED_TUPLES else v for v in value)
            values[f.name] = value
        unknown = set(data) - set(values)
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        return cls(**values)


_NESTED_TUPLES = ()     # tuple fields whose items are tuples too (none: shapes are dicts of lists)
_FIELDS = {f.name: f for f in dataclasses.fields(NavigatorConfig)}
# option -> (largest value, why)
LIMITS = {"max_batch_size": (2**31 - 1, "Triton's max_batch_size is a 32-bit integer"),
          "sample_count": (10_000, "samples are stored and run on every format: give a folder of a few batches"),
          "batch_dim": (63, "no tensor has that many dims")}
# spellings accepted besides the field names
_ALIASES = {"target_formats": "targets", "config_path": None, "verbose": None, "quiet": None}
# Keys of the shape family: each a string, a mapping, or a list of those (one per profile)
_SHAPE_KEYS = ("shapes", "min_shapes", "opt_shapes", "max_shapes")


def _as_tuple_of_str(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise UserInputError(f"{key}: expected a comma-separated string or a list, got {type(value).__name__}")
    if not items:
        raise UserInputError(f"{key}: empty list")
    return tuple(items)


def _shape_dict(key: str, value: Any) -> dict[str, tuple[int, ...]]:
    if isinstance(value, str):
        return specs.parse_shapes(value, option=f"--{key.replace('_', '-')}")
    if isinstance(value, dict):
        out = {}
        for name, dims in value.items():
            if isinstance(dims, str):
                out.update(specs.parse_shapes(f"{specs.format_name(str(name))}:{dims}", option=key))
                continue
            if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                               and d >= 1 for d in dims):
                raise UserInputError(f"{key}: shape of '{name}' must be a list of positive integers, got {dims!r}")
            out[str(name)] = tuple(dims)
        return out
    raise UserInputError(f"{key}: expected 'name:1x3x224x224' or a mapping, got {type(value).__name__}")


def _shape_list(key: str, value: Any) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and not (value and isinstance(value[0], int)):
        return [_shape_dict(key, v) for v in value]
    return [_shape_dict(key, value)]


def _profiles(values: dict) -> tuple[tuple[dict, ...] | None, tuple[dict, ...] | None]:
    """(shape_profiles, shapes) from the four shape keys."""
    shapes = _shape_list("shapes", values.get("shapes"))
    mins = _shape_list("min_shapes", values.get("min_shapes"))
    opts = _shape_list("opt_shapes", values.get("opt_shapes"))
    maxs = _shape_list("max_shapes", values.get("max_shapes"))
    if not (mins or opts or maxs):
        return None, (tuple(shapes) if shapes else None)
    n = max(len(mins), len(opts), len(maxs))
    for name, given in (("--min-shapes", mins), ("--opt-shapes", opts), ("--max-shapes", maxs)):
        if len(given) not in (0, n):
            raise UserInputError(f"{name} given {len(given)} times but other profile options {n} times; "
                                 "give each once per profile")
    profiles = []
    for i in range(n):
        lo = mins[i] if mins else None
        hi = maxs[i] if maxs else None
        mid = opts[i] if opts else None
        if mid is None:  # opt defaults to the sample shapes, else max
            mid = shapes[i] if i < len(shapes) else (hi or lo)
        lo = lo if lo is not None else mid
        hi = hi if hi is not None else mid
        merged = specs.merge_profile(lo, mid, hi)
        profiles.append({k: {s: list(v) for s, v in d.items()} for k, d in merged.items()})
    if not shapes:
        shapes = [{k: tuple(v["opt"]) for k, v in p.items()} for p in profiles]
    return tuple(profiles), tuple(shapes)


def _tolerance_text(key: str, name: str, value: Any) -> str:
    """One tolerance of a mapping as spec text; YAML 1.1 reads ``1e-3`` (no dot) as a string."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    raise UserInputError(f"{key}: tolerance of {name or 'the default'!r} must be a number, got {value!r}")


def _check_type(key: str, value: Any, kind: type | tuple) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise UserInputError(f"{key}: expected a number, got a boolean")
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise UserInputError(f"{key}: expected {names}, got {type(value).__name__} ({value!r})")
    return value


def from_mapping(values: dict, *, base: NavigatorConfig | None = None, source: str = "config") -> NavigatorConfig:
    """Build a config from user spellings; keys are the CLI options in snake_case, each read by
    its entry of :data:`_READERS`."""
    base = base or NavigatorConfig()
    values = {k: v for k, v in values.items() if v is not None}
    changes: dict[str, Any] = {}
    for key in list(values):
        if key in _ALIASES:
            target = _ALIASES[key]
            value = values.pop(key)
            if target:
                values[target] = value
    unknown = [k for k in values if k not in _FIELDS and k not in _SHAPE_KEYS]
    if unknown:
        valid = ", ".join(sorted(set(_FIELDS) | set(_SHAPE_KEYS)))
        raise UserInputError(f"{source}: unknown option(s) {', '.join(sorted(unknown))}; valid: {valid}")
    if any(k in values for k in _SHAPE_KEYS):
        changes["shape_profiles"], changes["shapes"] = _profiles(values)
        for k in _SHAPE_KEYS:
            values.pop(k, None)
    for key, value in values.items():
        changes[key] = _READERS[key](key, value, base)
    result = dataclasses.replace(base, **changes)
    if result.no_batching and result.batch_dim is not None:
        raise UserInputError("--batch-dim and --no-batching exclude each other")
    return result


# --------------------------------------------------------------------------- one reader per option
# Each takes (key, value as the user spelled it, the base config) and returns the field's value.
def _one_of(choices: tuple[str, ...]) -> Callable[[str, Any, NavigatorConfig], Any]:
    def read(key: str, value: Any, base: NavigatorConfig) -> str:
        if value not in choices:
            raise UserInputError(f"{key}: {value!r} is not one of {', '.join(choices)}")
        return value
    return read


def _precisions(key: str, value: Any, base: NavigatorConfig) -> tuple[str, ...]:
    items = _as_tuple_of_str(key, value)
    bad = [p for p in items if p not in PRECISIONS]
    if bad:
        raise UserInputError(f"target_precisions: unknown precision {bad[0]!r}; valid: {', '.join(PRECISIONS)}")
    return items


def _value_ranges(key: str, value: Any, base: NavigatorConfig) -> dict[str, tuple[float, float]]:
    if isinstance(value, str):
        return specs.parse_value_ranges(value)
    if not isinstance(value, dict):
        raise UserInputError("value_ranges: expected 'name:lo,hi' or a mapping")
    parsed = {}
    for name, rng in value.items():
        if (not isinstance(rng, (list, tuple)) or len(rng) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rng)
                or not rng[0] < rng[1]):
            raise UserInputError(f"value_ranges: '{name}' needs [low, high] with low < high, got {rng!r}")
        parsed[str(name)] = (float(rng[0]), float(rng[1]))
    return parsed


def _named(parse: Callable[[str], dict], what: str, check: Callable[[Any], bool] = lambda v: True
           ) -> Callable[[str, Any, NavigatorConfig], dict]:
    """A 'name:value,...' option: spec text, or a mapping written back as spec text."""
    def read(key: str, value: Any, base: NavigatorConfig) -> dict:
        if isinstance(value, str):
            return parse(value)
        if isinstance(value, dict) and all(check(v) for v in value.values()):
            return parse(",".join(f"{specs.format_name(str(k))}:{v}" for k, v in value.items()))
        raise UserInputError(f"{key}: expected {what}")
    return read


def _tolerance(key: str, value: Any, base: NavigatorConfig) -> dict[str, float]:
    if isinstance(value, bool):
        raise UserInputError(f"{key}: expected a number or 'name:value', got a boolean")
    if isinstance(value, (int, float)):
        text = repr(float(value))
    elif isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        text = ",".join(f"{specs.format_name(str(k))}:{_tolerance_text(key, k, v)}" if k
                        else _tolerance_text(key, k, v) for k, v in value.items())
    else:
        raise UserInputError(f"{key}: expected a number, 'name:value' or a mapping")
    return {**(getattr(base, key) or {}), **specs.parse_tolerance(text, option=f"--{key}")}


def _state(key: str, value: Any, base: NavigatorConfig) -> dict[str, str]:
    if isinstance(value, str):
        return specs.parse_state(value)
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) and k and v
                                       for k, v in value.items()):
        return dict(value)
    raise UserInputError("state: expected 'IN=OUT,...' or a mapping of state inputs to outputs")


def _compare(key: str, value: Any, base: NavigatorConfig) -> dict:
    if isinstance(value, str):
        parsed = specs.parse_compare(value)
    elif isinstance(value, dict):
        parts = []
        for name, mode in value.items():
            if isinstance(mode, (list, tuple)):  # [mode] or [mode, value]
                mode = mode[0] if len(mode) < 2 or mode[1] is None else f"{mode[0]}={mode[1]}"
            parts.append(f"{'*' if name == '*' else specs.format_name(str(name))}:{mode}")
        parsed = specs.parse_compare(",".join(parts))
    else:
        raise UserInputError("compare: expected 'name:mode[=value]' or a mapping")
    return {**(base.compare or {}), **parsed}


def _batch_sizes(key: str, value: Any, base: NavigatorConfig) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (str, list, tuple)):
        raise UserInputError(f"{key}: expected '1,8' or a list of integers, got {type(value).__name__}")
    return specs.parse_batch_sizes(value if isinstance(value, str) else ",".join(map(str, value)),
                                   option="--" + key.replace("_", "-"))


def _converter_params(key: str, value: Any, base: NavigatorConfig) -> dict[str, dict]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
        raise UserInputError("converter_params: expected {converter name: {parameter: value}}")
    merged = {k: dict(v) for k, v in (base.converter_params or {}).items()}
    for name, params in value.items():
        merged.setdefault(name, {}).update(params)
    return merged


def _plugin_files(key: str, value: Any, base: NavigatorConfig) -> tuple[str, ...]:
    paths = []
    for item in _as_tuple_of_str(key, value):
        path = Path(item).expanduser()
        if not path.is_file():
            raise UserInputError(f"--trt-plugins: {item}: no such file")
        paths.append(str(path.resolve()))
    return tuple(paths)


def _integer(low: int | None, why: str = "") -> Callable[[str, Any, NavigatorConfig], int]:
    """An integer >= ``low`` (None: any), at most :data:`LIMITS` [key] where it has one."""
    def read(key: str, value: Any, base: NavigatorConfig) -> int:
        _check_type(key, value, int)
        if low is not None and value < low:
            raise UserInputError(f"{key}: must be >= {low}{why}, got {value}")
        if key in LIMITS and value > LIMITS[key][0]:
            raise UserInputError(f"{key}: {value} is more than {LIMITS[key][0]} ({LIMITS[key][1]})")
        return value
    return read


def _opt_level(key: str, value: Any, base: NavigatorConfig) -> int:
    _check_type(key, value, int)
    if not 0 <= value <= 5:
        raise UserInputError(f"trt_opt_level: must be 0..5 (TensorRT's builder optimisation level), got {value}")
    return value


def _seconds(key: str, value: Any, base: NavigatorConfig) -> float:
    _check_type(key, value, (int, float))
    if not math.isfinite(value) or value <= 0:
        raise UserInputError(f"{key}: must be a finite number > 0 of seconds, got {value}")
    return float(value)


def _memory_gb(key: str, value: Any, base: NavigatorConfig) -> float:
    _check_type(key, value, (int, float))
    if not math.isfinite(value) or value < 0:
        raise UserInputError(f"worker_memory_gb: must be a finite number >= 0 of GiB (0: no limit), got {value}")
    return float(value)


def _reference(key: str, value: Any, base: NavigatorConfig) -> str:
    from navigator.formats import parse_key

    try:
        parse_key(_check_type(key, value, str))
    except UserInputError as e:
        raise UserInputError(f"reference: {e.one_line()}") from None
    return value


_READERS: dict[str, Callable[[str, Any, NavigatorConfig], Any]] = {
    "shape_profiles": lambda key, value, base: tuple(value),
    "targets": lambda key, value, base: _as_tuple_of_str(key, value),
    "runners": lambda key, value, base: _as_tuple_of_str(key, value),
    "target_precisions": _precisions,
    "device": _one_of(DEVICES),
    "error_stat": _one_of(ERROR_STATS),
    "value_ranges": _value_ranges,
    "dtypes": _named(specs.parse_dtypes, "'name:dtype' or a mapping"),
    "output_kinds": _named(specs.parse_output_kinds, "'name:kind' or a mapping of names to kinds",
                           lambda v: isinstance(v, str)),
    "atol": _tolerance, "rtol": _tolerance,
    "state": _state,
    "compare": _compare,
    "verify_batch_sizes": _batch_sizes, "profile_batch_sizes": _batch_sizes,
    "converter_params": _converter_params,
    "trt_plugins": _plugin_files,
    "trt_workspace_mb": _integer(1, " MiB"),
    "trt_opt_level": _opt_level,
    "jobs": _integer(0, " (0: one per free core, bounded by memory)"),
    "sample_count": _integer(1), "max_batch_size": _integer(1), "batch_dim": _integer(0), "seed": _integer(None),
    "timeout": _seconds, "profile_budget_s": _seconds,
    "worker_memory_gb": _memory_gb,
    **dict.fromkeys(("no_batching", "no_profile", "allow_failures", "force", "allow_nan", "trt_version_compatible",
                     "trust_remote_code", "no_race", "no_warm_workers"),
                    lambda key, value, base: bool(_check_type(key, value, bool))),
    **dict.fromkeys(("workdir", "samples", "triton_repo"),
                    lambda key, value, base: os.fspath(_check_type(key, value, (str, os.PathLike)))),
    "reference": _reference,
    **dict.fromkeys(("model_name", "model_format", "signature_name", "task"),
                    lambda key, value, base: _check_type(key, value, str)),
}


YAML_MAX_BYTES = 1 << 20     # option and policy files are small; a larger one is refused, not parsed


def read_yaml(path: str | os.PathLike, source: str, *, aliases: bool = False):
    """A YAML file's content, every way of failing to read it one line naming ``source``. Aliases
    (unless ``aliases``), files over 1 MiB, anything but a regular file (a FIFO or a device would
    block or never end) and nesting deeper than Python's recursion limit are refused."""
    from navigator.workspace import yamltext

    from navigator.workspace.atomic import read_regular

    p = Path(path)
    try:
        text = read_regular(p, YAML_MAX_BYTES, source).decode("utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise UserInputError(f"{source}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserInputError(f"{source}: cannot read ({e})") from None
    return yamltext.parse(text, source, aliases=aliases)


def load_yaml(path: str | os.PathLike) -> dict:
    """Read a ``--config-path`` YAML file into a mapping (keys checked later)."""
    p = Path(path)
    data = read_yaml(p, f"--config-path {p}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserInputError(f"--config-path {p}: expected a mapping of options at the top level")
    return {str(k).replace("-", "_"): v for k, v in data.items()}
