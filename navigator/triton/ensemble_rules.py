"""Triton's ensemble rules, checked offline on the configs before anything is written.

Written from Triton core's ``ensemble_utils.cc`` (``ValidateEnsembleConfig``,
``ValidateTensorMapping``, ``ValidateTensorConsistency``) and ``model_config_utils.cc``
(``ValidateEnsembleSchedulingConfig``): every input used, every output produced, each
output-map value written once, no unused tensor, no instance_group / optimization /
warm-up on the ensemble, its max_batch_size at most every step's, consistent data types
and shapes. Shapes are compared as Triton compares them: an ensemble's own inputs and
outputs by their ``reshape`` when they have one (else ``dims``), a step's tensors by their
``dims``; two shapes agree when equal with -1 as a wildcard, or equal once the batch
dimension is added to both (a batching and a non-batching step may share a tensor).
"""

from __future__ import annotations

from navigator.errors import UserInputError


def _full(dims, batching: bool) -> list[int]:
    return ([-1] if batching else []) + list(dims)


def _dims_match(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b))


def check(ensemble, steps: dict) -> list[str]:
    """Triton's ensemble rules (FACTS.md; core's ensemble_utils.cc and model_config_utils.cc)
    on an ensemble ``ModelConfig`` and its steps' configs ``{model name: ModelConfig}``.
    Returns the violations, each naming the rule; empty when the ensemble is valid."""
    from tritonclient.grpc import model_config_pb2 as mc

    out: list[str] = []
    if ensemble.platform != "ensemble":
        out.append(f"platform must be 'ensemble', not {ensemble.platform!r}")
    if ensemble.instance_group:
        out.append("an ensemble takes no instance_group (its steps have their own)")
    if ensemble.HasField("optimization"):
        out.append("an ensemble takes no optimization settings")
    if ensemble.model_warmup:
        out.append("an ensemble takes no model_warmup (warm its steps instead)")
    for other in ("dynamic_batching", "sequence_batching"):
        if ensemble.HasField(other):
            out.append(f"{other} and ensemble_scheduling exclude each other")
    schedule = ensemble.ensemble_scheduling.step
    if not schedule:
        return out + ["the ensemble has no steps"]
    batching = ensemble.max_batch_size > 0
    ens_in = {io.name: io for io in ensemble.input}
    ens_out = {io.name: io for io in ensemble.output}
    if not ens_out:
        out.append("the ensemble has no outputs")
    # tensor -> (data type, dims, full dims, where it was seen); the ensemble's own tensors by
    # their reshape when they have one, as Triton reads them
    seen: dict[str, tuple[int, list[int], list[int], str]] = {}
    for kind, group in (("input", ens_in), ("output", ens_out)):
        for n, io in group.items():
            dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
            seen[n] = (io.data_type, dims, _full(dims, batching), f"ensemble {kind}")
    for n in set(ens_in) & set(ens_out):
        out.append(f"tensor {n!r} is both an ensemble input and an ensemble output")

    def consistent(tensor: str, io, step_batching: bool, where: str) -> None:
        dt, dims = io.data_type, list(io.dims)          # a step's tensor: its dims, never its reshape
        full = _full(dims, step_batching)
        if tensor not in seen:
            seen[tensor] = (dt, dims, full, where)
            return
        dt0, dims0, full0, where0 = seen[tensor]
        if dt != dt0:
            out.append(f"ensemble tensor {tensor!r}: inconsistent data type, {mc.DataType.Name(dt0)} from {where0} "
                       f"but {mc.DataType.Name(dt)} from {where}")
        elif not (_dims_match(dims, dims0) or _dims_match(full, full0)):
            hint = (" (an ensemble tensor takes the step's dims, e.g. [1], not its reshape)"
                    if sorted((len(dims), len(dims0))) == [0, 1] or sorted((len(full), len(full0))) == [1, 2]
                    else "")
            out.append(f"ensemble tensor {tensor!r}: inconsistent shape, {full0} from {where0} but {full} from "
                       f"{where}{hint}")

    producers: dict[str, str] = {}
    consumers: dict[str, list[str]] = {}
    for i, step in enumerate(schedule):
        model = step.model_name
        cfg = steps.get(model)
        if not model:
            out.append(f"step {i} names no model")
            continue
        if cfg is None:
            out.append(f"step {i} runs model {model!r}, which is not part of this repository write")
            continue
        if not step.input_map:
            out.append(f"step {model!r} has no input_map")
        if not step.output_map:
            out.append(f"step {model!r} has no output_map")
        if cfg.max_batch_size != 0 and cfg.max_batch_size < ensemble.max_batch_size:
            out.append(f"max_batch_size {ensemble.max_batch_size} of the ensemble exceeds step {model!r}'s "
                       f"{cfg.max_batch_size} (the ensemble's must be <= every step's)")
        if ensemble.max_batch_size == 0 and cfg.max_batch_size > 0:
            pass  # a non-batching ensemble may hold batching steps (shapes are checked in full)
        step_batching = cfg.max_batch_size > 0
        inputs = {io.name: io for io in cfg.input}
        outputs = {io.name: io for io in cfg.output}
        for k, tensor in step.input_map.items():
            if k not in inputs:
                out.append(f"step {model!r}: input_map names {k!r}, which the model does not take "
                           f"(inputs: {', '.join(inputs)})")
                continue
            consumers.setdefault(tensor, []).append(model)
            consistent(tensor, inputs[k], step_batching, f"input {k!r} of {model!r}")
        for k, io in inputs.items():
            if k not in step.input_map and not io.optional:
                out.append(f"input {k!r} of step {model!r} is not mapped to any ensemble tensor (every input of "
                           "every step must be fed)")
        for k, tensor in step.output_map.items():
            if k not in outputs:
                out.append(f"step {model!r}: output_map names {k!r}, which the model does not produce "
                           f"(outputs: {', '.join(outputs)})")
                continue
            if tensor in producers or tensor in ens_in:
                first = producers.get(tensor, "the ensemble's inputs")
                out.append(f"ensemble tensor {tensor!r} appears in an output map more than once ({first} and "
                           f"{model!r}): each output-map value must be written once")
                continue
            producers[tensor] = model
            consistent(tensor, outputs[k], step_batching, f"output {k!r} of {model!r}")
    # data flow: a step runs once all its inputs are ready
    ready = set(ens_in)
    pending = [s for s in schedule if s.model_name in steps]
    progress = True
    while progress:
        progress = False
        for s in list(pending):
            if all(t in ready for t in s.input_map.values()):
                ready.update(s.output_map.values())
                pending.remove(s)
                progress = True
    for s in pending:
        waiting = sorted(t for t in s.input_map.values() if t not in ready)
        out.append(f"step {s.model_name!r} never runs: no step writes {', '.join(repr(t) for t in waiting)}")
    for n in ens_in:
        if n not in consumers:
            out.append(f"ensemble input {n!r} is not used by any step (every input must be used)")
    for n in ens_out:
        if n not in producers:
            out.append(f"ensemble output {n!r} is not produced by any step (every output must be produced)")
        elif n not in ready:
            out.append(f"ensemble output {n!r} is never written (its step never runs)")
    for tensor, model in producers.items():
        if tensor not in ens_out and tensor not in consumers:
            out.append(f"ensemble tensor {tensor!r} written by step {model!r} is never used (Triton refuses unused "
                       "tensors: return only what the model or postprocess takes)")
    return out


def raise_if_invalid(ensemble, steps: dict) -> None:
    violations = check(ensemble, steps)
    if violations:
        more = f" (+{len(violations) - 1} more: {'; '.join(violations[1:])})" if len(violations) > 1 else ""
        raise UserInputError(f"ensemble {ensemble.name!r} breaks Triton's ensemble rules: {violations[0]}{more}")
