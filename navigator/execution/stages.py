"""The stages a worker runs for one task: the reference outputs, convert, verify and
profile. Each takes the workspace and a typed :class:`~navigator.execution.jobs.Task`
and returns its result record as a mapping; :mod:`navigator.execution.worker` wraps
each in start/end events and turns an exception into a ``failed`` (or, for a runner
that cannot run here, ``skipped``) result.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from navigator.execution.jobs import ConvertResult, RunnerTask, Task

log = logging.getLogger("navigator.worker")


def rename(tensors: dict, mapping: dict) -> dict:
    return {mapping.get(k, k): v for k, v in tensors.items()}


def stored_sample(ws, io_names: dict) -> dict:
    """The first stored input batch, its tensors named as the format names them: what a profile
    (and a race window) feeds."""
    from navigator.workspace import npz

    return rename(npz.load(ws.input_files()[0]), io_names)


def runner_options(task: Task, spec: RunnerTask, io_names: dict, live: Any) -> dict:
    options = dict(spec.options)
    options.setdefault("inputs", [io_names.get(n, n) for n in task.input_names])
    options.setdefault("outputs", [io_names.get(n, n) for n in task.output_names])
    if live is not None:
        options["live"] = live
    return options


def run_reference(ws, task: Task, live: Any = None) -> dict:
    """The reference outputs of every stored sample, from ``task.reference_runner``."""
    from navigator import runners
    from navigator.workspace import npz

    spec = task.reference_runner
    options = dict(spec.options)
    if live is not None:
        options["live"] = live
    runner = runners.create(spec.spec(), ws.abs(task.artifact), **options)
    inverse = {v: k for k, v in task.io_names.items()}
    count = 0
    dropped = []
    if task.verify is not None and task.verify.sequence:
        with runner:
            count = _sequence_reference(ws, task, lambda feeds: rename(runner.infer(rename(feeds, task.io_names)),
                                                                        inverse))
        log.info("reference: a sequence of %d steps with %s", count, spec.key)
        if task.variation_runner is not None:
            run_variation(ws, task, live)
        return {"count": count, "dropped": dropped}
    with runner:
        for path in ws.input_files():
            try:
                outputs = rename(runner.infer(rename(npz.load(path), task.io_names)), inverse)
            except Exception as e:   # a profile-corner sample the model does not accept is left out
                if path.stem not in task.optional:
                    raise
                reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
                log.warning("reference: sample %s left out: %s", path.stem, reason)
                path.unlink()
                dropped.append({"sample": path.stem, "reason": reason})
                continue
            npz.save(ws.reference_file(path.stem), outputs)
            count += 1
    if dropped:   # close the gaps: samples stay numbered 000, 001, ... in the order they were
        for i, path in enumerate(ws.input_files()):
            stem = f"{i:03d}"
            if path.stem != stem:
                path.rename(ws.sample_file("inputs", i))
                ws.reference_file(path.stem).rename(ws.reference_file(stem))
    log.info("reference: %d batches with %s", count, spec.key)
    if task.variation_runner is not None:
        run_variation(ws, task, live)
    return {"count": count, "dropped": dropped}


def _sequence_reference(ws, task: Task, infer) -> int:
    """A stateful model's reference: the stored steps replayed in order, the state carried; and the
    same replay with the state reset halfway (``samples/reset/``: the control of every format's
    state), from the reset step on."""
    import shutil

    from navigator.execution import sequences
    from navigator.workspace import npz

    seq = task.verify.sequence
    pairs = sequences.pairs_of(seq)
    steps = [(p.stem, npz.load(p)) for p in ws.input_files()]
    count = 0
    for stem, _, outputs in sequences.replay(infer, steps, pairs):
        npz.save(ws.reference_file(stem), outputs)
        count += 1
    shutil.rmtree(ws.reset_dir, ignore_errors=True)
    k = seq.get("reset_at")
    if k:
        for stem, _, outputs in sequences.replay(infer, steps, pairs, reset_at=k):
            if int(stem) >= k:
                npz.save(ws.reset_file(stem), outputs)
    return count


def run_variation(ws, task: Task, live: Any = None) -> None:
    """The source run the way its runners run it (``task.variation_runner``) on every stored sample,
    into ``samples/variation/``: against the reference, the source's own legitimate variation, under
    which no fp32 tolerance is set. Best effort: without it the tolerances have no floor."""
    import shutil

    from navigator import runners
    from navigator.workspace import npz

    from navigator.execution.profiling import batch_of

    spec = task.variation_runner
    shutil.rmtree(ws.variation_dir, ignore_errors=True)
    options = dict(spec.options) | ({"live": live} if live is not None else {})
    inverse = {v: k for k, v in task.io_names.items()}
    verify = task.verify   # the batch sizes formats are verified at: the variation is measured there too
    try:
        with runners.create(spec.spec(), ws.abs(task.artifact), **options) as runner:
            if verify is not None and verify.sequence:   # its own state carried over the sequence
                from navigator.execution import sequences

                steps = [(p.stem, npz.load(p)) for p in ws.input_files()]
                for stem, _, outputs in sequences.replay(
                        lambda feeds: rename(runner.infer(rename(feeds, task.io_names)), inverse), steps,
                        sequences.pairs_of(verify.sequence)):
                    npz.save(ws.variation_file(stem), outputs)
                return
            for path in ws.input_files():
                sample = npz.load(path)
                npz.save(ws.variation_file(path.stem), rename(runner.infer(rename(sample, task.io_names)), inverse))
                if verify is None or verify.batch_dim is None or path.stem in verify.corners:
                    continue
                full = next(iter(sample.values())).shape[verify.batch_dim]
                for size in verify.batch_sizes:
                    if size != full:
                        feeds = batch_of(sample, verify.batch_dim, size)
                        npz.save(ws.variation_file(f"{path.stem}-bs{size}"),
                                 rename(runner.infer(rename(feeds, task.io_names)), inverse))
    except Exception as e:   # noqa: BLE001 - a floor is a refinement; the reference stands without it
        log.warning("variation with %s: %s (the fp32 tolerances get no floor)", spec.key,
                    " ".join(f"{type(e).__name__}: {e}".split())[:300])
        shutil.rmtree(ws.variation_dir, ignore_errors=True)


def run_convert(ws, task: Task, live: Any = None) -> ConvertResult:
    from navigator.converters.base import ConvertOutcome, context_from_workspace
    from navigator.dotted import resolve

    conv = task.convert
    cls = resolve(conv.converter)
    ctx = context_from_workspace(ws.root, conv.source, conv.output, cls.params_from_dict(conv.params), conv.device,
                                 needs_live=cls.needs_live, live=live)
    ctx.output.parent.mkdir(parents=True, exist_ok=True)
    log.info("convert %s -> %s with %s (%s)", conv.source, conv.output, cls.name, conv.params)
    outcome = cls().convert(ctx) or ConvertOutcome()
    if not ctx.output.exists():
        raise RuntimeError(f"converter {cls.name} finished without writing {conv.output}")
    outcome.notes = list(outcome.notes) + check_artifact(task.key, ctx.output)
    for note in outcome.notes:
        log.warning("%s", note)
    share = check_precision(task.key, ctx.output)
    return ConvertResult(exporter=outcome.exporter, notes=list(outcome.notes), static_shapes=outcome.static_shapes,
                         io_names=dict(outcome.io_names or {}), precision_share=share)


MIN_PRECISION_SHARE = 0.5   # of the weight bytes, for an artifact to count as its key's precision


def check_precision(key: str, path) -> float | None:
    """The share of the artifact's weights in its key's precision (``Format.precision_share``); a
    reduced-precision artifact holding most of its weights in another fails its convert step: it is
    not that precision."""
    from navigator import formats
    from navigator.dotted import resolve

    k = formats.parse_key(key)
    measure = formats.get(k.format).precision_share
    if k.precision == "fp32" or measure is None:
        return None
    share = resolve(measure)(path, k.precision)
    log.info("%s: %s of the weight bytes are %s", key, "n/a" if share is None else f"{share:.1%}", k.precision)
    if share is not None and share < MIN_PRECISION_SHARE:
        raise InvalidArtifact(f"only {share:.1%} of its weight bytes are {k.precision}: this is not an {k.precision} "
                              f"model (the conversion kept the rest in another precision; see convert.log)")
    return share


class InvalidArtifact(RuntimeError):
    """The converter wrote an artifact its format's check rejects: convert fails, naming why."""


def check_artifact(key: str, path) -> list[str]:
    """Run the format record's artifact check (e.g. the ONNX graph check) on a converted artifact;
    returns its notes (repairs it made). An invalid artifact fails the convert step."""
    from navigator import formats
    from navigator.dotted import resolve

    record = formats.get(formats.parse_key(key).format)
    if not record.check:
        return []
    check = resolve(record.check)   # a record naming no such function is a bug, not an invalid artifact
    try:
        return list(check(path) or [])
    except Exception as e:   # the check's own message names the node and op where it can
        raise InvalidArtifact(f"the converted {record.name} artifact is invalid: {e}") from None


def batch_aligned(reference: dict, batch_dim: int, full: int) -> set[str]:
    """The outputs whose ``batch_dim`` holds the sample's rows: only they can be cut to another
    batch size and compared there (NonZero's indices, a pooled statistic or a per-class table are
    compared at the sample's own batch)."""
    return {name for name, arr in reference.items()
            if getattr(arr, "ndim", 0) > batch_dim and arr.shape[batch_dim] == full}


def run_verify(ws, task: Task, spec: RunnerTask, io_names: dict, live: Any = None, *,
               store: bool = True) -> tuple[dict, Any]:
    """Run every stored sample (at its own batch size and at ``verify.batch_sizes``), store the
    outputs (unless ``store`` is False: runtime options checked for the tuning) and compare them
    with the reference, each comparison with its negative controls
    (:mod:`navigator.validators.controls`). Default tolerances are resolved against each output's
    scale over every sample. Returns the verify record and the active runner."""
    from navigator import runners
    from navigator.execution.profiling import batch_of
    from navigator.validators import controls
    from navigator.validators.numeric import compare_outputs
    from navigator.workspace import npz

    verify = task.verify
    runner = runners.create(spec.spec(), ws.abs(task.artifact), **runner_options(task, spec, io_names, live))
    start = time.perf_counter()
    runner.activate()
    load_s = time.perf_counter() - start
    inverse = {v: k for k, v in io_names.items()}
    batch_dim = verify.batch_dim
    paths = ws.input_files()
    samples = {p.stem: npz.load(p) for p in paths}
    if verify.static and samples:   # an artifact exported with static shapes runs at the first sample's only
        first = {k: v.shape for k, v in next(iter(samples.values())).items()}
        samples = {k: v for k, v in samples.items() if {n: a.shape for n, a in v.items()} == first}
        paths = [p for p in paths if p.stem in samples]
    if verify.held_out:   # a format calibrated on some samples is verified on the others only
        samples = {k: v for k, v in samples.items() if k in verify.held_out}
        paths = [p for p in paths if p.stem in samples]
    references = {p.stem: npz.load(ws.reference_file(p.stem)) for p in paths}
    variations = {p.stem: npz.load(p) for p in sorted(ws.variation_dir.glob("*.npz"))
                  if p.stem.split("-bs")[0] in references}
    accs = _accumulators(verify, references, variations, rules=spec.rules)
    sizes_used: set[int] = set()

    def compare(outs, ref, feeds, other, where, names=None):
        cands = controls.candidates(ref, feeds, batch_dim=batch_dim, other=other)
        compare_outputs(outs, ref, accs, allow_nan=verify.allow_nan, error_stat=verify.error_stat, where=where,
                        candidates=cands, names=names)

    stems = list(samples)
    if verify.sequence:   # a stateful model: one sequence, each step fed the format's own state
        return _verify_sequence(ws, task, spec, runner, io_names, samples, references, accs, compare, load_s)
    for i, stem in enumerate(stems):
        sample, reference = samples[stem], references[stem]
        other = _other_sample(stems, i, samples, references)
        outputs = rename(runner.infer(rename(sample, io_names)), inverse)
        if store:
            npz.save(ws.output_file(task.key, spec.key, stem), outputs)
        if batch_dim is None:
            compare(outputs, reference, sample, other, f" (sample {stem})")
            continue
        full = next(iter(sample.values())).shape[batch_dim]
        sizes_used.add(full)
        compare(outputs, reference, sample, other, f" (sample {stem}, batch {full})")
        aligned = batch_aligned(reference, batch_dim, full)
        for size in verify.batch_sizes:
            if size == full or stem in verify.corners or not aligned:   # a corner is verified at its own shape
                continue
            feeds = batch_of(sample, batch_dim, size)
            outs = rename(runner.infer(rename(feeds, io_names)), inverse)
            if store:
                npz.save(ws.output_file(task.key, spec.key, stem, size), outs)
            other_cut = (batch_of(other[0], batch_dim, size), batch_of(other[1], batch_dim, size)) if other else None
            compare(outs, batch_of({k: reference[k] for k in aligned}, batch_dim, size), feeds, other_cut,
                    f" (sample {stem}, batch {size})", names=aligned)
            sizes_used.add(size)
    checks = {name: acc.result().to_dict() for name, acc in accs.items()}
    for name, c in checks.items():
        log.info("%s: %s", name, c)
    stored = sorted(ws.outputs_dir(task.key, spec.key).glob("*.npz")) if store else []
    result = verdict(checks) | {"batch_sizes": sorted(sizes_used), "outputs": checks, "load_s": round(load_s, 4),
                                **({"outputs_sha256": npz.files_sha256(stored)} if store else {})}
    try:
        result["settings"] = runner.settings() or None
    except Exception as e:   # noqa: BLE001 - the record of settings never fails a verdict
        log.warning("runner settings: %s", e)
    if verify.calibrated_on:
        result |= {"samples": sorted(samples), "calibrated_on": list(verify.calibrated_on)}
        if result["status"] == "ok" and not set(samples) - set(verify.calibrated_on):
            result |= {"status": "inconclusive",
                       "reason": f"verified only on the samples it was calibrated on ({', '.join(sorted(samples))}): "
                                 "that says nothing of other inputs; give two or more sample batches ("
                                 + ("more files in --samples DIR" if verify.samples_given else
                                    "--samples DIR, or --sample-count 2")
                                 + ") so one part calibrates and another verifies"}
    return result, runner


def _verify_sequence(ws, task: Task, spec: RunnerTask, runner, io_names: dict, samples: dict, references: dict,
                     accs: dict, compare, load_s: float) -> tuple[dict, Any]:
    """:func:`run_verify` of a stateful model: the stored steps replayed in order with the format's
    own state, every step's outputs (the state too) compared with the reference's; the control of
    the state: the reference replayed with its state reset halfway must fail the rule at some step,
    else the check never saw the state's effect (inconclusive)."""
    from navigator.execution import sequences
    from navigator.validators import controls
    from navigator.workspace import npz

    verify = task.verify
    inverse = {v: k for k, v in io_names.items()}
    stems = list(samples)
    steps = [(stem, samples[stem]) for stem in stems]
    infer = lambda feeds: rename(runner.infer(rename(feeds, io_names)), inverse)   # noqa: E731
    reset_seen = reset_rejected = 0
    for i, (stem, feeds, outputs) in enumerate(sequences.replay(infer, steps, sequences.pairs_of(verify.sequence))):
        npz.save(ws.output_file(task.key, spec.key, stem), outputs)
        compare(outputs, references[stem], feeds, _other_sample(stems, i, samples, references), f" (step {stem})")
        reset_file = ws.reset_file(stem)
        if reset_file.is_file():
            reset, ref = npz.load(reset_file), references[stem]
            reset_seen += 1
            if any(name in reset and not controls.accepted(acc.rule, reset[name], ref[name], batch_dim=None)
                   for name, acc in accs.items() if hasattr(acc, "rule")):
                reset_rejected += 1
    checks = {name: acc.result().to_dict() for name, acc in accs.items()}
    stored = sorted(ws.outputs_dir(task.key, spec.key).glob("*.npz"))
    result = verdict(checks) | {"batch_sizes": [], "outputs": checks, "load_s": round(load_s, 4),
                                "outputs_sha256": npz.files_sha256(stored), "samples": stems}
    k = verify.sequence.get("reset_at")
    if result["status"] == "ok" and not reset_seen:   # one step: no state carried, nothing to reset
        result |= {"status": "inconclusive",
                   "reason": "the state's effect is not verified: a sequence of one step carries no state from a "
                             "step before; give two steps or more"}
    elif result["status"] == "ok" and not reset_rejected:
        result |= {"status": "inconclusive",
                   "reason": f"the state's effect is not verified: the reference replayed with its state reset at "
                             f"step {k} passes the rule at every step after it (the state changes nothing this "
                             "check can see); give a longer sequence or samples on which the state matters"}
    try:
        result["settings"] = runner.settings() or None
    except Exception as e:   # noqa: BLE001
        log.warning("runner settings: %s", e)
    return result, runner


def _accumulators(verify, references: dict, variations: dict | None = None, rules: dict | None = None) -> dict:
    """One accumulator per output: its kind inferred from the reference (or declared), a lossy
    precision's default rule judged by that kind's task, its default atol scaled to the output over
    every sample (values in [0, 1] by their peaks) and never below the fp32 floor measured from
    ``variations`` (the source run as the runners run it); an output whose slices differ in
    magnitude by orders is checked per slice group (:class:`SlicedAccumulator`)."""
    import numpy as np

    from navigator.validators import kinds
    from navigator.validators.numeric import Accumulator, SlicedAccumulator
    from navigator.validators.tolerances import FLOOR_FACTOR, OutputRule

    accs = {}
    for name, rule_dict in (rules or verify.rules).items():
        rule = OutputRule(**rule_dict)
        arrays = [r[name] for r in references.values() if name in r]
        floats = any(np.asarray(a).dtype.kind in "fc" for a in arrays)
        if not floats:
            accs[name] = Accumulator(name, rule, batch_dim=verify.batch_dim, samples_given=verify.samples_given)
            continue
        declared = verify.kinds.get(name) or ("detections" if rule.mode == "detections" else None)
        kind = kinds.infer(name, arrays, verify.batch_dim, declared)
        rule = rule.for_kind(kind.kind)
        pairs = [pair for stem, var in (variations or {}).items() if name in var
                 for pair in [_variation_pair(var[name], references, stem, name, verify.batch_dim)] if pair]

        def make(arrays, select=None, pairs=pairs):
            unit = all(float(np.min(a)) >= 0 and float(np.max(a)) <= 1 for a in arrays if np.size(a))
            scale = kinds.scale_of(arrays, unit=unit)
            floor = None
            if pairs and rule.mode == "tolerance":
                floor = FLOOR_FACTOR * max((_finite_max(np.abs(v.astype(np.float64) - r.astype(np.float64)))
                                            for v, r in pairs), default=0.0)
            acc = Accumulator(name, rule.resolve(scale, floor), batch_dim=verify.batch_dim, scale=scale, kind=kind,
                              select=select, samples_given=verify.samples_given)
            if rule.mode in ("tolerance", "mismatch_fraction"):
                acc.check.atol_rule = rule.derivation(scale, floor, unit)
                acc.check.floor = floor
            acc.check.kind_reason = kind.reason
            return acc

        groups = kinds.slice_groups(arrays, verify.batch_dim, kind) if rule.mode in ("tolerance", "quantized") \
            else None
        if groups is None:
            accs[name] = make(arrays)
            continue
        axis, parts = groups
        accs[name] = SlicedAccumulator(name, [
            (kinds.describe(axis, idx),
             make([np.take(a, idx, axis=axis) for a in arrays], (axis, idx),
                  [(np.take(v, idx, axis=axis), np.take(r, idx, axis=axis)) for v, r in pairs]))
            for idx in parts], kind=kind)
    return accs


def _variation_pair(variation, references: dict, stem: str, name: str, batch_dim: int | None):
    """(the source's variation, the reference it varies from) for one stored variation file: ``000``
    at the sample's own batch, ``000-bs1`` at another batch size against the reference cut to it;
    None when they do not line up."""
    import numpy as np

    from navigator.execution.profiling import batch_of

    base, _, size = stem.partition("-bs")
    if base not in references or name not in references[base]:
        return None
    ref = np.asarray(references[base][name])
    if size:
        if batch_dim is None or ref.ndim <= batch_dim:
            return None
        ref = batch_of({name: ref}, batch_dim, int(size))[name]
    variation = np.asarray(variation)
    return (variation, ref) if variation.shape == ref.shape else None


def _finite_max(a) -> float:
    """The largest finite value of ``a`` (matching infinities give NaN differences), 0.0 if none."""
    import numpy as np

    finite = a[np.isfinite(a)]
    return float(finite.max()) if finite.size else 0.0


def _other_sample(stems: list[str], i: int, samples: dict, references: dict) -> tuple[dict, dict] | None:
    """(inputs, reference) of the next stored sample whose inputs have the same shapes, for the
    negative control "another sample's reference"."""
    import numpy as np

    shapes = {k: np.shape(v) for k, v in samples[stems[i]].items()}
    for j in list(range(i + 1, len(stems))) + list(range(0, i)):
        if {k: np.shape(v) for k, v in samples[stems[j]].items()} == shapes:
            return samples[stems[j]], references[stems[j]]
    return None


def verdict(checks: dict[str, dict]) -> dict:
    """The verify step's status from its outputs' checks: failed when one failed; inconclusive when
    one passed a check that could not fail (or every output is skipped); else ok."""
    failed = [f"{name}: {c['reason']}" for name, c in checks.items() if not c["passed"]]
    if failed:
        return {"status": "failed", "reason": "; ".join(failed)[:1000]}
    unsure = [f"{name}: inconclusive: {c['control']}" for name, c in checks.items()
              if c.get("conclusive") is False]
    if unsure:
        return {"status": "inconclusive", "reason": "; ".join(unsure)[:1000]}
    if checks and all(c["mode"] == "skip" for c in checks.values()):
        return {"status": "inconclusive", "reason": "every output is compared with mode skip: nothing was verified"}
    return {"status": "ok", "reason": None}


def run_profile(ws, task: Task, runner, io_names: dict) -> dict:
    from navigator.execution.profiling import ProfileSettings, sweep

    prof = task.profile
    settings = ProfileSettings(**prof.settings)
    if prof.screen:   # the run's only (format, runner): its screening is all there is to measure
        from navigator.execution.profiling import SCREEN_BUDGET_S, screen_settings

        settings = ProfileSettings(**(prof.settings | screen_settings(prof.loaded)
                                      | {"budget_s": min(settings.budget_s, SCREEN_BUDGET_S)}))
        if prof.loaded is not None:
            log.info("screening as on a loaded machine (fewer windows, largest batch first): other processes "
                     "kept %.1f cores busy", prof.loaded)
    sample = stored_sample(ws, io_names)
    if settings.batch_sizes == [0] and prof.batch_dim is not None:   # static shapes: the sample's batch
        own = next(iter(sample.values())).shape[prof.batch_dim]
        settings.batch_sizes, settings.max_batch_size = [own], max(own, settings.max_batch_size)
    infer, io = runner.profiling_infer()
    outcome = sweep(infer, sample, prof.batch_dim, settings)
    for r in outcome.results:
        r["io"] = io
        log.info("batch %d: %.1f/s, p50 %.3f ms, p99 %.3f ms", r["batch_size"], r["throughput"],
                 r["latency_ms"]["p50"], r["latency_ms"]["p99"])
    return {"stable": outcome.stable, "results": outcome.results, "reason": outcome.reason,
            "phase": "screening" if prof.screen else None}
