"""Ensembles: Python-backend pre/post-processing steps around the served model.

The contract of the user's files (numpy in, numpy out, batch first when the
model batches):

``preprocess.py``
    ``def preprocess(**inputs) -> dict`` gets the ensemble's raw inputs as
    keyword arguments and returns ``{model input name: array}``. Its named
    parameters are the ensemble's inputs (``**kwargs`` takes every tensor of
    the example batch). A model input it does not return is fed from the raw
    input of the same name. The example batch is the workspace's stored
    sample (``samples/inputs/000.npz``) unless the file defines
    ``example_inputs() -> dict`` (raw inputs that differ from the model's,
    e.g. uint8 images).
``postprocess.py``
    ``def postprocess(**outputs) -> dict`` gets the model's outputs (by the
    workspace's names; named parameters pick some, ``**kwargs`` takes all) and
    returns ``{ensemble output name: array}``. It is probed on the stored
    reference outputs (``samples/reference/000.npz``).

Both functions run at emit time on those examples to learn the names, dtypes
and ranks of every tensor; the ensemble is then checked against Triton's
rules (FACTS.md: every input used, every output produced, each output-map
value once, no instance_group/optimization/warm-up on the ensemble, its
max_batch_size at most every step's, consistent dtypes and shapes) before
anything is written. A violation is a UserInputError naming the rule.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from navigator.errors import UserInputError
from navigator.triton.config import ModelPlan, Step, TensorPlan

PRE, POST = "preprocess", "postprocess"


# --------------------------------------------------------------------------- user functions
def load_function(path: str | Path, name: str) -> tuple[Callable, Any]:
    """(the function ``name`` of the file, the imported module)."""
    path = Path(path)
    flag = f"--{name}"
    if not path.is_file():
        raise UserInputError(f"{flag} {path}: no such file")
    if path.suffix != ".py":
        raise UserInputError(f"{flag} {path}: expected a Python file (.py) defining {name}(**tensors) -> dict")
    from navigator.userfile import import_file

    module = import_file(path, what=flag, prefix=f"navigator_triton_{name}", keep=False)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserInputError(f"{flag} {path} defines no function {name}(**tensors) -> dict")
    return fn, module


def parameters(fn: Callable, available: list[str], flag: str, what: str) -> list[str]:
    """The tensors ``fn`` takes: its named parameters, or all of ``available`` with ``**kwargs``."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return list(available)
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        raise UserInputError(f"{flag}: tensors are passed by name; take them as keyword parameters, not *args")
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UserInputError(f"{flag}: parameter {unknown[0]!r} is not one of the {what} "
                             f"({', '.join(available)})")
    if not names:
        raise UserInputError(f"{flag}: the function takes no tensors; name the {what} it needs as parameters")
    return names


def probe(fn: Callable, feeds: dict, flag: str) -> dict:
    """Run the user's function once; its result as ``{name: ndarray}``."""
    import numpy as np

    try:
        result = fn(**feeds)
    except Exception as e:
        raise UserInputError(f"{flag}: calling it on the stored example failed ({type(e).__name__}: {e})") from None
    if not isinstance(result, dict):
        raise UserInputError(f"{flag}: it returned {type(result).__name__}; return a dict {{name: array}}")
    out = {}
    for name, value in result.items():
        if not isinstance(name, str) or not name:
            raise UserInputError(f"{flag}: returned key {name!r} is not a tensor name")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise UserInputError(f"{flag}: returned {name!r} is not a numeric array (dtype object)")
        out[name] = arr
    return out


def _check_batch_first(tensors: dict, batch: int, flag: str, what: str) -> None:
    for name, arr in tensors.items():
        if arr.ndim == 0 or arr.shape[0] != batch:
            raise UserInputError(f"{flag}: {what} {name!r} has shape {tuple(arr.shape)}, not batch-first (batch "
                                 f"{batch}); with batching every tensor keeps the batch as its first dim "
                                 "(or serve without batching: --max-batch-size 0)")


def _dims(arr, batching: bool, like: list[int] | None = None) -> list[int]:
    """Config dims of a probed tensor: -1 where the size may vary, the probed size where the
    tensor it must match (``like``) is static, so a mismatch surfaces as a rule violation."""
    shape = list(arr.shape[1:] if batching else arr.shape)
    if not shape:
        return [1]
    if like is not None and len(like) == len(shape):
        return [s if d > 0 else -1 for s, d in zip(shape, like)]
    return [-1] * len(shape)


# --------------------------------------------------------------------------- planning
def plan(core: ModelPlan, *, name: str, preprocess: str | None, postprocess: str | None, sample: dict,
         reference: dict, instance_count: int) -> list[ModelPlan]:
    """The pre/post step plans and the ensemble plan around ``core`` (whose tensors carry
    our names in ``source``). Runs the user's functions on the examples."""
    batching = core.max_batch_size > 0
    by_source_in = {t.source: t for t in core.inputs}
    by_source_out = {t.source: t for t in core.outputs}
    steps: list[Step] = []
    plans: list[ModelPlan] = []
    ens_inputs: list[TensorPlan] = []
    ens_outputs: list[TensorPlan] = []
    model_in_map: dict[str, str] = {}
    model_out_map: dict[str, str] = {}

    def step_plan(role: str, inputs: list[TensorPlan], outputs: list[TensorPlan], file_name: str) -> ModelPlan:
        p = ModelPlan(name=f"{name}_{role}", role=role, backend="python", default_model_filename="model.py",
                      python=True, max_batch_size=core.max_batch_size, inputs=inputs, outputs=outputs,
                      instance_kind="KIND_CPU", instance_count=instance_count)
        p.notes.append(f"{role} step from {Path(file_name).name}")
        return p

    # ---- preprocess (or the model's own inputs)
    if preprocess:
        flag = f"--{PRE}"
        fn, module = load_function(preprocess, PRE)
        example = sample
        if callable(getattr(module, "example_inputs", None)):
            try:
                example = module.example_inputs()
            except Exception as e:
                raise UserInputError(f"{flag}: example_inputs() raised {type(e).__name__}: {e}") from None
            if not isinstance(example, dict) or not example:
                raise UserInputError(f"{flag}: example_inputs() must return a non-empty dict {{name: array}}")
        import numpy as np

        example = {str(k): np.asarray(v) for k, v in example.items()}
        taken = parameters(fn, list(example), flag, "example inputs")
        result = probe(fn, {n: example[n] for n in taken}, flag)
        if batching:
            batch = int(example[taken[0]].shape[0]) if example[taken[0]].ndim else -1
            _check_batch_first({n: example[n] for n in taken}, batch, flag, "input")
            _check_batch_first(result, batch, flag, "output")
        passthrough = [t.source for t in core.inputs if t.source not in result and t.source in example]
        raw = list(dict.fromkeys(taken + passthrough))
        for n in raw:
            like = by_source_in[n].dims if n in by_source_in else None
            ens_inputs.append(TensorPlan(name=n, source=n, feed=n, dtype=str(example[n].dtype),
                                         dims=_dims(example[n], batching, like)))
        pre_inputs = [TensorPlan(name=t.name, source=t.source, feed=t.feed, dtype=t.dtype, dims=list(t.dims))
                      for t in ens_inputs if t.name in taken]
        pre_outputs = []
        for out_name, arr in result.items():
            target = by_source_in.get(out_name)
            pre_outputs.append(TensorPlan(name=out_name, source=out_name, feed=out_name, dtype=str(arr.dtype),
                                          dims=_dims(arr, batching, target.dims if target else None)))
        pre = step_plan(PRE, pre_inputs, pre_outputs, preprocess)
        plans.append(pre)
        steps.append(Step(pre.name, {t.name: t.name for t in pre_inputs},
                          {t.name: f"preprocessed_{t.name}" for t in pre_outputs}))
        for t in core.inputs:
            if t.source in result:
                model_in_map[t.name] = f"preprocessed_{t.source}"
            elif t.source in example:
                model_in_map[t.name] = t.source
    else:
        for t in core.inputs:
            ens_inputs.append(TensorPlan(name=t.source, source=t.source, feed=t.source, dtype=t.dtype,
                                         dims=list(t.dims), reshape=t.reshape))
            model_in_map[t.name] = t.source

    # ---- postprocess (or the model's own outputs)
    if postprocess:
        flag = f"--{POST}"
        fn, _ = load_function(postprocess, POST)
        taken = parameters(fn, [t.source for t in core.outputs], flag, "model outputs")
        missing = [n for n in taken if n not in reference]
        if missing:
            raise UserInputError(f"{flag}: the stored reference outputs lack {missing[0]!r}")
        result = probe(fn, {n: reference[n] for n in taken}, flag)
        if not result:
            raise UserInputError(f"{flag}: it returned an empty dict; an ensemble needs at least one output")
        if batching:
            ref_batch = int(reference[taken[0]].shape[0])
            _check_batch_first(result, ref_batch, flag, "output")
        post_inputs = [TensorPlan(name=n, source=n, feed=n, dtype=by_source_out[n].dtype,
                                  dims=list(by_source_out[n].dims), reshape=by_source_out[n].reshape) for n in taken]
        post_outputs = []
        for out_name, arr in result.items():
            post_outputs.append(TensorPlan(name=out_name, source=out_name, feed=out_name, dtype=str(arr.dtype),
                                           dims=_dims(arr, batching)))
        post = step_plan(POST, post_inputs, post_outputs, postprocess)
        plans.append(post)
        for n in taken:
            model_out_map[by_source_out[n].name] = f"model_{n}"
        steps.append(Step(post.name, {n: f"model_{n}" for n in taken}, {t.name: t.name for t in post_outputs}))
        ens_outputs = [TensorPlan(name=t.name, source=t.name, feed=t.name, dtype=t.dtype, dims=list(t.dims))
                       for t in post_outputs]
    else:
        for t in core.outputs:
            model_out_map[t.name] = t.source
            ens_outputs.append(TensorPlan(name=t.source, source=t.source, feed=t.source, dtype=t.dtype,
                                          dims=list(t.dims), reshape=t.reshape))

    steps.insert(1 if preprocess else 0, Step(core.name, model_in_map, model_out_map))
    ensemble = ModelPlan(name=name, role="ensemble", platform="ensemble", max_batch_size=core.max_batch_size,
                         inputs=ens_inputs, outputs=ens_outputs, steps=steps)
    return plans + [ensemble]


# --------------------------------------------------------------------------- Triton's rules
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
    # tensor -> (data type, full dims, where it was seen)
    seen: dict[str, tuple[int, list[int], str]] = {
        n: (io.data_type, _full(io.dims, batching), f"ensemble {kind}")
        for kind, group in (("input", ens_in), ("output", ens_out)) for n, io in group.items()}
    for n in set(ens_in) & set(ens_out):
        out.append(f"tensor {n!r} is both an ensemble input and an ensemble output")

    def consistent(tensor: str, io, step_batching: bool, where: str) -> None:
        dt, full = io.data_type, _full(io.dims, step_batching)
        if tensor not in seen:
            seen[tensor] = (dt, full, where)
            return
        dt0, full0, where0 = seen[tensor]
        if dt != dt0:
            out.append(f"ensemble tensor {tensor!r}: inconsistent data type, {mc.DataType.Name(dt0)} from {where0} "
                       f"but {mc.DataType.Name(dt)} from {where}")
        elif not (_dims_match(full, full0) or _dims_match(list(io.dims), full0[1:] if batching else full0)):
            out.append(f"ensemble tensor {tensor!r}: inconsistent shape, {full0} from {where0} but {full} from "
                       f"{where}")

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
                       "tensors: return only what the next step takes)")
    return out


def raise_if_invalid(ensemble, steps: dict) -> None:
    violations = check(ensemble, steps)
    if violations:
        more = f" (+{len(violations) - 1} more: {'; '.join(violations[1:])})" if len(violations) > 1 else ""
        raise UserInputError(f"ensemble {ensemble.name!r} breaks Triton's ensemble rules: {violations[0]}{more}")
