"""The options of ``navigator triton`` as one frozen dataclass.

``None`` means "derive it from the workspace" (max batch size, preferred batch
sizes, the version number). User spellings (CLI strings, API keywords, YAML
values) go through :func:`from_mapping`, the one adapter, so
``navigator triton``, ``navigator convert --triton-repo`` and
``result.to_triton(**options)`` accept the same keys and values.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any

from navigator.errors import UserInputError

KINDS = ("auto", "cpu", "gpu")
ORT_TRT_PRECISIONS = ("fp16", "fp32")
TIMEOUT_ACTIONS = ("reject", "delay")


@dataclass(frozen=True)
class RateLimitResource:
    """One ``rate_limiter.resources`` entry of the instance group: ``name:count[:global]``."""

    name: str
    count: int
    is_global: bool = False


@dataclass(frozen=True)
class QueuePolicy:
    """``dynamic_batching.default_queue_policy``."""

    timeout_us: int | None = None
    max_queue_size: int | None = None
    action: str = "reject"              # reject | delay: what happens to a request past the timeout
    allow_timeout_override: bool = False


@dataclass(frozen=True)
class TritonOptions:
    repo: str | None = None                     # default: <workspace>/triton
    formats: tuple[str, ...] = ("best",)        # ("best",) | ("all",) | format keys
    model_name: str | None = None               # default: the workspace's model name
    model_version: int | None = None            # default: the next free number
    max_batch_size: int | None = None           # default: the shape profile's largest batch; 0 = no batching
    instances: int = 1
    kind: str = "auto"                          # cpu | gpu | auto
    dynamic_batching: bool = True
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None   # default: profiled sizes near the peak
    warmup: bool = True
    python_backend: bool = False                # serve every format through a generated model.py
    labels: str | None = None                   # FILE, or OUTPUT=FILE
    response_cache: bool = False
    rate_limit_resources: tuple[RateLimitResource, ...] = ()
    rate_limit_priority: int | None = None
    queue_policy: QueuePolicy | None = None
    priority_levels: int | None = None
    default_priority_level: int | None = None   # default: the lowest priority (= priority_levels)
    cuda_graphs: bool = False
    ort_trt_precision: str | None = None        # fp16 | fp32: ONNX Runtime's TensorRT accelerator
    preprocess: str | None = None               # FILE.py defining preprocess(**inputs) -> dict
    postprocess: str | None = None              # FILE.py defining postprocess(**outputs) -> dict
    execution_env: str | None = None            # env.tar.gz: EXECUTION_ENV_PATH of Python-backend models
    aoti_native: bool = False                   # serve aoti with the PyTorch backend (platform torch_aoti)
    tokenizer: bool | None = None               # a tokenizer step in front (None: where the workspace has one)
    # a stateful model's sequence batcher (navigator.triton.config.SequencePlan)
    sequence_strategy: str = "oldest"           # oldest | direct
    max_candidate_sequences: int = 4            # oldest: sequences batched together
    sequence_idle_us: int = 5_000_000           # a sequence idle this long is released
    force: bool = False                         # overwrite an existing version / an incompatible config
    deploy: str | None = None                   # the deploy kit's folder (default <workspace>/deploy); "none": off


_FIELDS = {f.name: f for f in dataclasses.fields(TritonOptions)}
_ALIASES = {"triton_repo": "repo", "rate_limit_resource": "rate_limit_resources"}
_INT_FIELDS = {"model_version": 1, "max_batch_size": 0, "instances": 1, "max_queue_delay_us": 0,
               "rate_limit_priority": 0, "priority_levels": 1, "default_priority_level": 1,
               "max_candidate_sequences": 1, "sequence_idle_us": 1}
SEQUENCE_STRATEGIES = ("oldest", "direct")
_BOOL_FIELDS = ("dynamic_batching", "warmup", "python_backend", "response_cache", "cuda_graphs", "aoti_native",
                "force", "tokenizer")
_PATH_FIELDS = ("repo", "labels", "preprocess", "postprocess", "execution_env", "deploy")


# the largest value each integer field may take: config.pbtxt's field types (int32 for batch sizes,
# counts and priorities; int64 for versions and delays); anything larger is refused, not wrapped
_INT_MAX = {"model_version": 2**63 - 1, "max_queue_delay_us": 2**63 - 1, "queue_policy timeout_us": 2**63 - 1,
            "sequence_idle_us": 2**63 - 1}
INT32_MAX = 2**31 - 1


def _int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{_flag(key)}: expected an integer, got {value!r}")
    if value < minimum:
        raise UserInputError(f"{_flag(key)}: must be >= {minimum}, got {value}")
    if value > _INT_MAX.get(key, INT32_MAX):
        raise UserInputError(f"{_flag(key)}: must be <= {_INT_MAX.get(key, INT32_MAX)} (the config field's type), "
                             f"got {value}")
    return value


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _formats(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value if str(v).strip()]
    else:
        raise UserInputError(f"--formats: expected best, all or format keys, got {type(value).__name__}")
    if not items:
        raise UserInputError("--formats: empty; give best, all or format keys (onnx,onnx-optimized)")
    if ("best" in items or "all" in items) and len(items) > 1:
        raise UserInputError("--formats: best and all stand alone; give one of them or a list of format keys")
    if len(set(items)) != len(items):
        raise UserInputError(f"--formats: a key is given twice ({', '.join(items)})")
    return tuple(items)


def _resources(value: Any) -> tuple[RateLimitResource, ...]:
    """``R:N`` / ``R:N:global``, comma-separated or a list; or mappings ``{name, count, global}``."""
    if isinstance(value, RateLimitResource):
        return (value,)
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        if isinstance(item, RateLimitResource):
            out.append(item)
            continue
        if isinstance(item, dict):
            name, count, is_global = item.get("name"), item.get("count"), bool(item.get("global", False))
        else:
            parts = str(item).strip().split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "global"):
                raise UserInputError(f"--rate-limit-resource {item!r}: expected NAME:COUNT or NAME:COUNT:global")
            name, count, is_global = parts[0], parts[1], len(parts) == 3
        if not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
            raise UserInputError(f"--rate-limit-resource {item!r}: the resource name must be letters, digits, "
                                 "'_', '.' or '-'")
        out.append(RateLimitResource(str(name), _int("rate_limit_resource", count, 1), is_global))
    names = [r.name for r in out]
    if len(set(names)) != len(names):
        raise UserInputError(f"--rate-limit-resource: resource named twice ({', '.join(names)})")
    return tuple(out)


def _queue_policy(value: Any) -> QueuePolicy:
    """``timeout_us=N,max_queue_size=M,action=reject|delay,allow_override=true`` or a mapping."""
    if isinstance(value, QueuePolicy):
        return value
    if isinstance(value, str):
        pairs = {}
        for part in value.split(","):
            if not part.strip():
                continue
            k, sep, v = part.partition("=")
            if not sep:
                raise UserInputError(f"--queue-policy {value!r}: expected KEY=VALUE pairs (timeout_us=5000,"
                                     "max_queue_size=64,action=reject)")
            pairs[k.strip()] = v.strip()
        value = pairs
    if not isinstance(value, dict):
        raise UserInputError("--queue-policy: expected 'timeout_us=N,max_queue_size=M,action=reject' or a mapping")
    known = {"timeout_us", "max_queue_size", "action", "allow_override"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise UserInputError(f"--queue-policy: unknown key {unknown[0]!r}; valid: {', '.join(sorted(known))}")
    action = str(value.get("action", "reject")).lower()
    if action not in TIMEOUT_ACTIONS:
        raise UserInputError(f"--queue-policy: action must be reject or delay, got {action!r}")
    allow = value.get("allow_override", False)
    if isinstance(allow, str):
        if allow.lower() not in ("true", "false", "1", "0"):
            raise UserInputError(f"--queue-policy: allow_override must be true or false, got {allow!r}")
        allow = allow.lower() in ("true", "1")
    policy = QueuePolicy(
        timeout_us=_int("queue_policy timeout_us", value["timeout_us"], 1) if "timeout_us" in value else None,
        max_queue_size=(_int("queue_policy max_queue_size", value["max_queue_size"], 1)
                        if "max_queue_size" in value else None),
        action=action, allow_timeout_override=bool(allow))
    if policy.timeout_us is None and policy.max_queue_size is None:
        raise UserInputError("--queue-policy: give timeout_us and/or max_queue_size")
    if action == "delay" and policy.timeout_us is None:
        raise UserInputError("--queue-policy: action=delay needs timeout_us")
    return policy


def from_mapping(values: dict, *, base: TritonOptions | None = None, source: str = "triton options") -> TritonOptions:
    """Options from user spellings (snake_case keys: the CLI's options)."""
    base = base or TritonOptions()
    changes: dict[str, Any] = {}
    for key, value in values.items():
        key = _ALIASES.get(key, key)
        if value is None:
            continue
        if key not in _FIELDS:
            valid = ", ".join(sorted(_FIELDS))
            raise UserInputError(f"{source}: unknown option {key!r}; valid: {valid}")
        if key == "formats":
            changes[key] = _formats(value)
        elif key in _INT_FIELDS:
            changes[key] = _int(key, value, _INT_FIELDS[key])
        elif key in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise UserInputError(f"{_flag(key)}: expected true or false, got {value!r}")
            changes[key] = value
        elif key in _PATH_FIELDS:
            if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
                raise UserInputError(f"{_flag(key)}: expected a path, got {value!r}")
            changes[key] = os.fspath(value)
        elif key == "model_name":
            if not isinstance(value, str) or not value.strip():
                raise UserInputError(f"--model-name: expected a name, got {value!r}")
            if len(value.strip().encode("utf-8", "surrogateescape")) > 200:
                raise UserInputError(f"--model-name: {len(value.strip())} characters; a model name is a folder "
                                     "name of the repository: 200 bytes at most")
            changes[key] = value.strip()
        elif key == "kind":
            if value not in KINDS:
                raise UserInputError(f"--kind: {value!r} is not one of {', '.join(KINDS)}")
            changes[key] = value
        elif key == "sequence_strategy":
            if value not in SEQUENCE_STRATEGIES:
                raise UserInputError(f"--sequence-strategy: {value!r} is not one of {', '.join(SEQUENCE_STRATEGIES)}")
            changes[key] = value
        elif key == "ort_trt_precision":
            if str(value).lower() not in ORT_TRT_PRECISIONS:
                raise UserInputError(f"--ort-trt-precision: {value!r} is not one of {', '.join(ORT_TRT_PRECISIONS)}")
            changes[key] = str(value).lower()
        elif key == "preferred_batch_sizes":
            items = value.split(",") if isinstance(value, str) else value
            if isinstance(items, int):
                items = [items]
            sizes = tuple(sorted({_int(key, v.strip() if isinstance(v, str) else v, 1) for v in items}))
            if not sizes:
                raise UserInputError("--preferred-batch-sizes: empty list")
            changes[key] = sizes
        elif key == "rate_limit_resources":
            merged = {r.name: r for r in base.rate_limit_resources}
            merged.update({r.name: r for r in _resources(value)})
            changes[key] = tuple(merged.values())
        elif key == "queue_policy":
            changes[key] = _queue_policy(value)
    result = dataclasses.replace(base, **changes)
    check(result)
    return result


def check(opts: TritonOptions) -> None:
    """Combinations that are wrong whatever the workspace holds."""
    if opts.priority_levels is None and opts.default_priority_level is not None:
        raise UserInputError("--default-priority-level needs --priority-levels")
    if opts.priority_levels is not None and opts.default_priority_level is not None \
            and opts.default_priority_level > opts.priority_levels:
        raise UserInputError(f"--default-priority-level {opts.default_priority_level} is outside "
                             f"[1, {opts.priority_levels}] (--priority-levels)")
    needs_batcher = [flag for flag, on in (("--max-queue-delay-us", opts.max_queue_delay_us is not None),
                                           ("--preferred-batch-sizes", opts.preferred_batch_sizes is not None),
                                           ("--priority-levels", opts.priority_levels is not None),
                                           ("--queue-policy", opts.queue_policy is not None)) if on]
    if not opts.dynamic_batching and needs_batcher:
        raise UserInputError(f"{needs_batcher[0]} configures the dynamic batcher, which --no-dynamic-batching "
                             "turns off")
    if opts.max_batch_size == 0 and (opts.preferred_batch_sizes or opts.max_queue_delay_us is not None):
        raise UserInputError("--max-batch-size 0 turns batching off; --preferred-batch-sizes and "
                             "--max-queue-delay-us need batching")
    if opts.cuda_graphs and opts.kind == "cpu":
        raise UserInputError("--cuda-graphs needs a GPU instance (--kind gpu), not --kind cpu")
    if opts.ort_trt_precision and opts.kind == "cpu":
        raise UserInputError("--ort-trt-precision sets ONNX Runtime's TensorRT accelerator, which runs on GPU "
                             "instances only (--kind gpu), not --kind cpu")
    if opts.rate_limit_priority is not None and not opts.rate_limit_resources:
        raise UserInputError("--rate-limit-priority needs at least one --rate-limit-resource")
    if opts.execution_env is not None:
        name = os.path.basename(opts.execution_env)
        if not name.endswith((".tar.gz", ".tgz")):
            raise UserInputError(f"--execution-env {opts.execution_env}: expected a conda-pack archive "
                                 "(*.tar.gz)")
