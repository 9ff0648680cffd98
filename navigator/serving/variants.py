"""config.pbtxt variants of one model (instance count, max batch size, dynamic
batching, and where searched its preferred batch sizes and the response cache): the
space searched, each variant, and ``--apply``: the chosen settings written into a
user's repository.

A variant starts from the emitted config (a ``ModelConfig`` message, never text
surgery): ``instance_group[*].count``, ``max_batch_size`` and the
``dynamic_batching`` block are replaced; preferred batch sizes are the emitted ones
(taken by the emitter from the in-process profile in status.yaml) that fit the new
max batch size; warm-up entries larger than it are dropped. Every variant is checked
with :func:`navigator.triton.config.problems` before it is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from navigator.errors import UserInputError
from navigator.triton import backends
from navigator.serving.search import Candidate, Space


def space(base, role: str, opts, *, key: str) -> Space:
    """The configurations to search for the model of config ``base`` (``role``: ``model``, or
    an ensemble's Python step, searched by its instance count only) under the profile's
    options: instance counts (default 1 … min(4, cores)), max batch sizes (default powers of
    2 up to the emitted one) and queue delays (default 0)."""
    cores = os.cpu_count() or 1
    instances = tuple(sorted(set(opts.instance_counts))) if opts.instance_counts else \
        tuple(range(1, min(4, cores) + 1))
    if role != "model":      # a Python step: its instance count (model.py runs one request at a time)
        if opts.max_batch_sizes or opts.queue_delays_us or opts.preferred_batch_sizes or opts.response_cache:
            raise UserInputError(f"--max-batch-sizes/--queue-delays-us/--preferred-batch-sizes/--response-cache: "
                                 f"the searched step {base.name} ({role}) is searched by its instance count only")
        delay = base.dynamic_batching.max_queue_delay_microseconds if base.HasField("dynamic_batching") else None
        return Space(instances, (base.max_batch_size,), (delay,))
    caches = _caches(base, opts)
    if base.max_batch_size == 0:
        if opts.max_batch_sizes and any(opts.max_batch_sizes):
            raise UserInputError(f"--max-batch-sizes: {base.name} does not batch (max_batch_size 0)")
        if opts.preferred_batch_sizes:
            raise UserInputError(f"--preferred-batch-sizes: {base.name} does not batch (max_batch_size 0)")
        return Space(instances, (0,), (None,), caches=caches)
    if opts.max_batch_sizes:
        sizes = tuple(sorted(set(opts.max_batch_sizes)))
        if 0 in sizes:
            raise UserInputError("--max-batch-sizes: 0 turns batching off; give sizes >= 1")
        if backends.fixed_batch(base.backend, base.platform) and max(sizes) > base.max_batch_size:
            raise UserInputError(f"--max-batch-sizes {max(sizes)}: the engine of {key} was built for batches "
                                 f"up to {base.max_batch_size}")
    else:
        sizes, b = [], 1
        while b < base.max_batch_size:
            sizes.append(b)
            b *= 2
        sizes.append(base.max_batch_size)
        sizes = tuple(sizes)
    if base.HasField("sequence_batching"):   # it excludes the dynamic batcher (FACTS.md), as Model Analyzer does
        if opts.queue_delays_us or opts.preferred_batch_sizes:
            raise UserInputError(f"--queue-delays-us/--preferred-batch-sizes: {base.name} is stateful, scheduled "
                                 "by the sequence batcher")
        return Space(instances, sizes, (None,), caches=caches)
    delays = opts.queue_delays_us if opts.queue_delays_us else (0,)
    delays = tuple(sorted(set(delays), key=lambda d: (d is not None, d or 0)))   # none first, then ascending
    preferred: tuple = (None,)
    if opts.preferred_batch_sizes:
        if delays == (None,):
            raise UserInputError("--preferred-batch-sizes: the dynamic batcher uses them; --queue-delays-us none "
                                 "turns it off")
        too_big = [b for sizes_ in opts.preferred_batch_sizes if sizes_ for b in sizes_ if b > max(sizes)]
        if too_big:
            raise UserInputError(f"--preferred-batch-sizes: {too_big[0]} is larger than every max batch size "
                                 f"searched ({', '.join(map(str, sizes))})")
        preferred = tuple(dict.fromkeys(opts.preferred_batch_sizes))
    return Space(instances, sizes, delays, preferred, caches)


def _caches(base, opts) -> tuple:
    """--response-cache: off/on as a search axis; a stateful model's answer depends on its state,
    not only its inputs, so a cached one would be wrong."""
    if not opts.response_cache:
        return (None,)
    if base.HasField("sequence_batching"):
        raise UserInputError(f"--response-cache: {base.name} is stateful; its answers depend on its state, so "
                             "a cached answer would be wrong")
    if base.model_transaction_policy.decoupled:
        raise UserInputError(f"--response-cache: {base.name} is decoupled; Triton caches no decoupled responses")
    return tuple(dict.fromkeys(opts.response_cache))


def load_config(path: Path):
    from navigator.triton import config as cfg_mod

    return cfg_mod.read(path)


def preferred_sizes(base) -> list[int]:
    return list(base.dynamic_batching.preferred_batch_size) if base.HasField("dynamic_batching") else []


def variant(base, cand: Candidate, *, preferred: list[int] | None = None):
    """A copy of ``base`` with the candidate's settings."""
    from tritonclient.grpc import model_config_pb2 as mc

    from navigator.triton import config as cfg_mod

    cfg = mc.ModelConfig()
    cfg.CopyFrom(base)
    if not cfg.instance_group:
        cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_AUTO)
    for g in cfg.instance_group:
        g.count = cand.instances
    if base.max_batch_size == 0 and cand.max_batch_size:
        raise UserInputError(f"{base.name} does not batch (max_batch_size 0); a max batch size of "
                             f"{cand.max_batch_size} cannot be searched")
    cfg.max_batch_size = cand.max_batch_size
    preferred = preferred_sizes(base) if preferred is None else preferred
    if cand.preferred is not None:
        preferred = list(cand.preferred)
    if cand.cache is not None:
        cfg.response_cache.enable = bool(cand.cache)
    if cand.delay_us is None or cand.max_batch_size == 0 or cfg.HasField("sequence_batching"):
        cfg.ClearField("dynamic_batching")
    else:
        if not cfg.HasField("dynamic_batching"):
            cfg.dynamic_batching.SetInParent()
        db = cfg.dynamic_batching
        db.max_queue_delay_microseconds = int(cand.delay_us)
        del db.preferred_batch_size[:]
        db.preferred_batch_size.extend(sorted({p for p in preferred if 1 <= p <= cand.max_batch_size}))
    keep = [w for w in cfg.model_warmup if not cfg.max_batch_size or w.batch_size <= cfg.max_batch_size]
    if len(keep) != len(cfg.model_warmup):
        kept = [mc.ModelWarmup() for _ in keep]
        for dst, src in zip(kept, keep):
            dst.CopyFrom(src)
        del cfg.model_warmup[:]
        cfg.model_warmup.extend(kept)
    problems = cfg_mod.problems(cfg)
    if problems:
        raise UserInputError(f"configuration {cand.name}: Triton would refuse it ({problems[0]})")
    return cfg


def write(path: Path, cfg) -> str:
    """Write ``cfg`` atomically (parsed back first); returns the text."""
    from navigator.triton import config as cfg_mod
    from navigator.workspace.atomic import write_text

    text = cfg_mod.to_text(cfg)
    write_text(path, text)
    return text


def check_apply(path: Path, space, measured=None) -> None:
    """Before any measurement: whatever the search chooses can be written into ``path``
    (an ensemble's target goes through :mod:`navigator.serving.ensemble` instead), and ``path`` is
    the model ``measured`` (the config the search varies): the same tensors, the same scheduler and
    state (a stateful config whose state block was lost would be written as if it were measured)."""
    import os

    from navigator.triton import config as cfg_mod

    base = load_config(path)
    if base.platform == "ensemble":
        raise UserInputError(f"--apply: {path} is an ensemble; its step models carry the instance groups")
    if measured is not None:
        diffs = [d for d in cfg_mod.io_differences(measured, base) if not d.startswith("max_batch_size")]
        states = [(s.input_name, s.output_name) for s in measured.sequence_batching.state]
        if states != [(s.input_name, s.output_name) for s in base.sequence_batching.state]:
            diffs.append(f"sequence_batching state {states or 'none'} -> "
                         f"{[(s.input_name, s.output_name) for s in base.sequence_batching.state] or 'none'}")
        problems = cfg_mod.problems(base)
        if diffs or problems:
            raise UserInputError(f"--apply: {path} is not the model that is measured ({(diffs + problems)[0]})",
                                 hint="write it again: navigator triton WS --repo REPO")
    sizes = [b for b in space.max_batch_sizes if b] if space is not None else []
    if base.max_batch_size == 0 and sizes:
        raise UserInputError(f"--apply: {path} does not batch (max_batch_size 0), but the search varies the max "
                             f"batch size ({', '.join(map(str, sizes))})")
    if base.max_batch_size and sizes and max(sizes) > base.max_batch_size and \
            backends.fixed_batch(base.backend, base.platform):
        raise UserInputError(f"--apply: the engine in {path.parent} was built for batches up to "
                             f"{base.max_batch_size}; the search goes up to {max(sizes)}")
    if not os.access(path.parent, os.W_OK):
        raise UserInputError(f"--apply: {path.parent} is not writable")


def apply(repo: Path, model: str, cand: Candidate, *, preferred: list[int]) -> Path:
    """``--apply``: the chosen instance count, max batch size and dynamic batching into
    ``repo/model/config.pbtxt``, everything else in it kept; written atomically (temp
    file + rename), parsed back as ModelConfig first."""
    repo = Path(repo).expanduser().resolve()
    path = repo / model / "config.pbtxt"
    if not path.is_file():
        raise UserInputError(f"--apply {repo}: no {model}/config.pbtxt there; write the repository first with "
                             f"`navigator triton WS --repo {repo}`")
    base = load_config(path)
    if base.platform == "ensemble":
        raise UserInputError(f"--apply: {path} is an ensemble; its step models carry the instance groups")
    if base.max_batch_size == 0 and cand.max_batch_size:
        raise UserInputError(f"--apply: {path} does not batch (max_batch_size 0) but the chosen configuration "
                             f"uses max batch size {cand.max_batch_size}")
    if base.max_batch_size and cand.max_batch_size > base.max_batch_size and backends.fixed_batch(base.backend,
                                                                                                   base.platform):
        raise UserInputError(f"--apply: the engine in {path.parent} was built for batches up to "
                             f"{base.max_batch_size}; the chosen {cand.max_batch_size} would not load")
    cfg = variant(base, cand, preferred=preferred)
    write(path, cfg)
    os.utime(path.parent, None)   # a polling Triton sees the model folder change
    return path
