"""Serving profiles of an ensemble (``navigator profile WS --triton`` when the repository
holds one): measured end to end as clients call it, one step's configuration searched.

- :func:`find`: the ensemble ``<model>`` of the user's repository (``--apply REPO`` or
  ``WS/triton``) with its steps' configs and their roles (``<model>_preprocess``,
  ``<model>_<format key>``, ``<model>_postprocess``; any other step is ``step``).
- :func:`copy_into`: the ensemble and its steps, as the repository has them, into the
  scratch repository (``WS/serving/repo``): the user's repository is never served.
- :func:`examples`: the raw inputs requests are built from: the preprocess step's
  ``example_inputs()`` (its ``step.py``, the file ``navigator triton --preprocess`` copied
  there) when it defines one, else the workspace's stored samples.
- :func:`probe`: one measurement at the highest concurrency with Triton's statistics
  read before and after, giving each step's busy share; the busiest step is the one to
  search (``--step auto``).
- :func:`ensemble_variant` / :func:`check_apply` / :func:`apply`: the ensemble's
  ``max_batch_size`` kept at most every step's (Triton's rule) when the searched step's
  changes, and ``--apply`` checked in full before any measurement.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError

ROLES = ("preprocess", "model", "postprocess")
STEP_CHOICES = ("auto",) + ROLES


@dataclass
class EnsembleTarget:
    name: str                                        # the ensemble clients call
    repo: Path                                       # the repository it was read from
    config: object                                   # its ModelConfig
    steps: dict[str, object] = field(default_factory=dict)   # step model -> ModelConfig, schedule order
    roles: dict[str, str] = field(default_factory=dict)      # step model -> preprocess | model | postprocess | step
    key: str | None = None                           # the workspace format its model step serves

    def step_for(self, role_or_name: str) -> str:
        if role_or_name in self.steps:
            return role_or_name
        found = [n for n, r in self.roles.items() if r == role_or_name]
        if not found:
            raise UserInputError(f"--step {role_or_name}: ensemble {self.name} has no such step (steps: "
                                 f"{', '.join(f'{n} ({r})' for n, r in self.roles.items())})")
        return found[0]


def _load(path: Path):
    from navigator.triton import config as cfg_mod

    return cfg_mod.read(path)


def find(repo: Path, name: str, formats: dict) -> EnsembleTarget | None:
    """The ensemble ``name`` of ``repo``, or None when ``repo/name`` is no ensemble."""
    path = repo / name / "config.pbtxt"
    if not path.is_file():
        return None
    cfg = _load(path)
    if cfg.platform != "ensemble":
        return None
    target = EnsembleTarget(name=name, repo=repo, config=cfg)
    keys = {f"{name}_{k.replace('-', '_')}": k for k in formats}
    for step in cfg.ensemble_scheduling.step:
        step_path = repo / step.model_name / "config.pbtxt"
        if not step_path.is_file():
            raise UserInputError(f"{repo}: ensemble {name} runs {step.model_name}, which has no config.pbtxt there",
                                 hint=f"write the ensemble again: navigator triton WS --repo {repo} --preprocess … "
                                      "--postprocess …")
        target.steps[step.model_name] = _load(step_path)
        role = next((r for r in ("preprocess", "postprocess") if step.model_name == f"{name}_{r}"), None)
        if role is None:
            role = "model" if step.model_name in keys else "step"
        target.roles[step.model_name] = role
    models = [n for n, r in target.roles.items() if r == "model"]
    target.key = keys[models[0]] if len(models) == 1 else None
    if target.key is None:
        raise UserInputError(f"{repo}: ensemble {name} has no step serving one of this workspace's formats "
                             f"(expected a step named {name}_<format key>; it has {', '.join(target.steps)})")
    return target


def copy_into(scratch: Path, target: EnsembleTarget) -> None:
    """The ensemble's folders, as ``target.repo`` has them, into ``scratch`` (no bytecode)."""
    for name in [*target.steps, target.name]:
        dest = scratch / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(target.repo / name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _step_file(model_dir: Path) -> Path | None:
    """The newest version's ``step.py`` of a generated pre/post step."""
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for v in reversed(versions):
        if (v / "step.py").is_file():
            return v / "step.py"
    return None


def examples(scratch: Path, target: EnsembleTarget, ws) -> list[dict]:
    """Raw input batches for requests: the preprocess step's ``example_inputs()``, else the
    stored samples (by name)."""
    from navigator.triton import ensemble as ens_mod
    from navigator.workspace import npz

    pre = next((n for n, r in target.roles.items() if r == "preprocess"), None)
    path = _step_file(scratch / pre) if pre else None
    if path is not None:
        _, module = ens_mod.load_function(path, ens_mod.PRE)
        if callable(getattr(module, "example_inputs", None)):
            try:
                value = module.example_inputs()
            except Exception as e:
                raise UserInputError(f"{path}: example_inputs() raised {type(e).__name__}: {e}") from None
            return ens_mod.example_batches(value, f"{target.name}'s preprocess ({path.name})")
    return [npz.load(p) for p in ws.input_files()]


# --------------------------------------------------------------------------- the profile run
def prepare(r, target: EnsembleTarget, check_backend) -> None:
    """The profile run ``r`` (a ServingRun) on ``target``: its folders copied into the scratch
    repository, every step's backend checked (``check_backend(what, cfg)``), the step to
    search fixed when options say which, requests built from the examples."""
    from navigator.serving import inputs, variants

    opts = r.opts
    if opts.format and opts.format != target.key:
        raise UserInputError(f"--format {opts.format}: the ensemble {target.name} in {target.repo} runs {target.key}",
                             hint=f"profile it as it is (no --format), or write the ensemble around {opts.format}: "
                                  f"navigator triton WS --formats {opts.format} --preprocess … --postprocess …")
    if opts.python_backend:
        raise UserInputError(f"--python-backend: the ensemble {target.name} is served as {target.repo} configures "
                             "its steps; write it with navigator triton WS --python-backend … instead")
    r.scratch.mkdir(parents=True, exist_ok=True)
    copy_into(r.scratch, target)
    r.target, r.key, r.model = target, target.key, target.name
    r.ens_base = variants.load_config(r.scratch / target.name / "config.pbtxt")
    r.served = variants.load_config(r.scratch / target.step_for("model") / "config.pbtxt")
    for step in target.steps:
        check_backend(r, f"step {step} of ensemble {target.name}",
                      variants.load_config(r.scratch / step / "config.pbtxt"))
    if opts.step != "auto":
        use_step(r, target.step_for(opts.step), f"--step {opts.step}")
    elif opts.max_batch_sizes or opts.queue_delays_us:
        use_step(r, target.step_for("model"), "--max-batch-sizes/--queue-delays-us search the model step")
    r.data = inputs.from_examples(examples(r.scratch, target, r.ws), r.ens_base)
    (r.out / "perf_input.json").write_text(json.dumps(r.data.perf_analyzer_json()), encoding="utf-8")


def use_step(r, step: str, why: str, records=None) -> None:
    """Search ``step`` of the ensemble from now on (``r.base``, ``r.preferred``, ``r.ensemble``)."""
    from navigator.serving import variants
    from navigator.workspace.status import ServingEnsemble, ServingStep

    r.step = step
    r.base = variants.load_config(r.scratch / step / "config.pbtxt")
    r.preferred = variants.preferred_sizes(r.base)
    if records is None:
        records = [ServingStep(name=n, role=r.target.roles[n], instances=sum(g.count for g in c.instance_group) or 1,
                               max_batch_size=c.max_batch_size) for n, c in r.target.steps.items()]
    r.ensemble = ServingEnsemble(name=r.target.name, searched=step, role=r.target.roles[step], reason=why,
                                 steps=records)


def pick_step(r, reporter, load) -> None:
    """``--step auto``: the ensemble as the repository configures it (``load(name)``), measured
    once at the highest load (concurrency, or request rate); the busiest step is searched."""
    from navigator.serving import loadgen
    from navigator.serving.measure import DEFAULT_WINDOW_MS, LAST

    load(r.model)
    top = max(r.levels)
    level = {"rate": float(top)} if r.load.mode == "request_rate" else \
        {"intervals_us": r.load.intervals_us} if r.load.mode == "request_intervals" else {"concurrency": int(top)}
    step, why, records = probe(
        r.target, r.server.http_url,
        lambda: loadgen.measure(r.server.grpc_url, r.model, r.data,
                                window_ms=r.opts.measurement_ms or DEFAULT_WINDOW_MS, max_windows=LAST,
                                deadline=r.deadline, **level))
    reporter.info(f"probe of {r.model}: " + ", ".join(f"{s.name} busy {100 * (s.utilization or 0):.0f}%"
                                                    for s in records) + f"; searching {step}")
    use_step(r, step, why, records)


# --------------------------------------------------------------------------- statistics
def stats(http_url: str, names: list[str]) -> dict[str, dict]:
    """Triton's ``/v2/models/<name>/stats`` of each model (the latest version's record)."""
    out = {}
    for name in names:
        with urllib.request.urlopen(f"http://{http_url}/v2/models/{name}/stats", timeout=10) as resp:
            records = json.loads(resp.read().decode()).get("model_stats") or []
        out[name] = max(records, key=lambda r: int(r.get("version") or 0)) if records else {}
    return out


def _busy(record: dict) -> tuple[int, int, int]:
    """(compute ns, executions, requests) over the executions of one model's statistics: the
    batch statistics count each execution once (the inference statistics charge a batch's
    compute to every request in it)."""
    ns = execs = reqs = 0
    for b in record.get("batch_stats") or []:
        count = int((b.get("compute_infer") or {}).get("count") or 0)
        ns += sum(int((b.get(k) or {}).get("ns") or 0) for k in ("compute_input", "compute_infer", "compute_output"))
        execs += count
        reqs += count * int(b.get("batch_size") or 0)
    return ns, execs, reqs


def _queue(record: dict) -> tuple[int, int]:
    """(queue ns, successful requests) of one model's statistics."""
    inf = record.get("inference_stats") or {}
    return int((inf.get("queue") or {}).get("ns") or 0), int((inf.get("success") or {}).get("count") or 0)


def batch_counts(record: dict) -> dict[int, int]:
    """{batch size: executions} of one model's statistics record."""
    return {int(b["batch_size"]): int((b.get("compute_infer") or {}).get("count") or 0)
            for b in record.get("batch_stats") or []}


def probe(target: EnsembleTarget, http_url: str, measure) -> tuple[str, str, list]:
    """Measure once (``measure()`` returns a Measurement) with the steps' statistics read
    before and after; returns (the busiest step, why, a ServingStep record per step)."""
    from navigator.workspace.status import ServingStep

    names = list(target.steps)
    before = stats(http_url, names)
    t0 = time.monotonic()
    m = measure()
    wall_ns = (time.monotonic() - t0) * 1e9
    after = stats(http_url, names)
    records = []
    for name in names:
        a, b = after.get(name, {}), before.get(name, {})
        compute, execs, reqs = (x - y for x, y in zip(_busy(a), _busy(b)))
        queue, done = (x - y for x, y in zip(_queue(a), _queue(b)))
        cfg = target.steps[name]
        instances = sum(g.count for g in cfg.instance_group) or 1
        records.append(ServingStep(
            name=name, role=target.roles[name], instances=instances, max_batch_size=cfg.max_batch_size,
            utilization=round(compute / (wall_ns * instances), 4) if wall_ns > 0 else None,
            queue_ms=round(queue / done / 1e6, 4) if done else None,
            compute_ms=round(compute / execs / 1e6, 4) if execs else None,
            batch_size=round(reqs / execs, 3) if execs else None))
    busiest = max(records, key=lambda s: (s.utilization or 0.0, s.role == "model"))
    others = ", ".join(f"{s.name} {100 * (s.utilization or 0):.0f}%" for s in records if s is not busiest)
    why = (f"the busiest step in a probe at concurrency {m.concurrency} ({m.throughput:.1f} infer/s): "
           f"{busiest.name} busy {100 * (busiest.utilization or 0):.0f}% of its {busiest.instances} instance(s)' "
           f"time" + (f"; {others}" if others else ""))
    return busiest.name, why, records


# --------------------------------------------------------------------------- variants and --apply
def ensemble_variant(base, steps: dict, step: str, step_max_batch_size: int):
    """A copy of the ensemble config ``base`` for ``step``'s new max_batch_size, ``steps``
    being every step's config before the change. Triton needs the ensemble's at most every
    batching step's: an ensemble that was at that bound follows it (down, and back up to
    what the steps allow), one set lower on purpose stays lower unless the new bound is lower."""
    from tritonclient.grpc import model_config_pb2 as mc

    cfg = mc.ModelConfig()
    cfg.CopyFrom(base)
    if cfg.max_batch_size == 0:
        return cfg
    before = [c.max_batch_size for c in steps.values() if c.max_batch_size > 0]
    after = [step_max_batch_size if n == step else c.max_batch_size for n, c in steps.items()]
    after = [m for m in after if m > 0]
    if not after:
        return cfg
    bound = min(after)
    cfg.max_batch_size = bound if before and cfg.max_batch_size >= min(before) else min(cfg.max_batch_size, bound)
    return cfg


def check_apply(repo: Path, target: EnsembleTarget) -> None:
    """Everything ``--apply`` needs, before any measurement: the ensemble and every step in
    ``repo``, valid together under Triton's rules, their config files writable."""
    import os

    from navigator.triton import ensemble_rules

    ensemble_rules.raise_if_invalid(target.config, target.steps)
    for name in [target.name, *target.steps]:
        folder = repo / name
        if not os.access(folder, os.W_OK):
            raise UserInputError(f"--apply {repo}: {folder} is not writable")


def apply(repo: Path, target_name: str, step: str, cand, *, preferred: list[int]) -> tuple[Path, str | None]:
    """``--apply`` for an ensemble: the chosen settings into the searched step's config.pbtxt
    of ``repo`` and the ensemble's max_batch_size kept consistent (:func:`ensemble_variant`;
    written in the order that keeps the ensemble valid at every moment), both checked under
    Triton's rules with the repository's other steps first and written atomically; a failure
    restores the ensemble.
    Returns the step's config path and a note when the ensemble's max_batch_size changed."""
    import os

    from navigator.serving import variants
    from navigator.triton import ensemble_rules

    repo = Path(repo).expanduser().resolve()
    ens_path = repo / target_name / "config.pbtxt"
    if not ens_path.is_file():
        raise UserInputError(f"--apply {repo}: no {target_name}/config.pbtxt there")
    ens = _load(ens_path)
    if ens.platform != "ensemble":
        raise UserInputError(f"--apply {repo}: {target_name} is no longer an ensemble")
    steps = {s.model_name: _load(repo / s.model_name / "config.pbtxt") for s in ens.ensemble_scheduling.step
             if (repo / s.model_name / "config.pbtxt").is_file()}
    if step not in steps:
        raise UserInputError(f"--apply {repo}: ensemble {target_name} no longer runs {step}")
    new_step = variants.variant(steps[step], cand, preferred=preferred)
    new_ens = ensemble_variant(ens, steps, step, new_step.max_batch_size)
    ensemble_rules.raise_if_invalid(new_ens, {**steps, step: new_step})
    old_ens_text = ens_path.read_text(encoding="utf-8")
    changed = new_ens.max_batch_size != ens.max_batch_size
    lowered = new_ens.max_batch_size < ens.max_batch_size
    path = repo / step / "config.pbtxt"
    # the ensemble is valid at every moment: lowered before the step, raised after it
    try:
        for what in (("ensemble", "step") if lowered else ("step", "ensemble")):
            if what == "step":
                variants.write(path, new_step)
            elif changed:
                variants.write(ens_path, new_ens)
    except BaseException:
        if changed:
            from navigator.workspace.atomic import write_text

            write_text(ens_path, old_ens_text)
        raise
    os.utime(path.parent, None)   # a polling Triton sees the model folder change
    note = (f"ensemble {target_name}: max_batch_size {ens.max_batch_size} -> {new_ens.max_batch_size} (at most every "
            f"step's: Triton's rule; clients may send batches up to {new_ens.max_batch_size})" if changed else None)
    return path, note
