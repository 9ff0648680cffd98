"""Ensembles: Python-backend pre/post-processing steps around the served model.

The contract of the user's files (numpy in, numpy out, batch first when the
model batches):

``preprocess.py``
    ``def preprocess(**inputs) -> dict`` gets the ensemble's raw inputs as
    keyword arguments and returns ``{name: array}``: the model's inputs by the
    workspace's names, and anything else postprocess needs (a letterbox's
    scale and padding). Its named parameters are the ensemble's inputs
    (``**kwargs`` takes every tensor of the examples). A model input it does
    not return is fed from the raw input of the same name. The examples are
    the workspace's stored samples (``samples/inputs/*.npz``) unless the file
    defines ``example_inputs()`` returning one batch ``{name: array}`` or a
    list of them (raw inputs that differ from the model's, e.g. uint8 images
    of several sizes).
``postprocess.py``
    ``def postprocess(**outputs) -> dict`` gets the model's outputs by the
    workspace's names and any of preprocess's outputs it names (named
    parameters pick; ``**kwargs`` takes every model output and the preprocess
    outputs the model does not take) and returns ``{ensemble output: array}``.
    It is probed on the stored reference outputs (``samples/reference/*.npz``),
    with preprocess's outputs from its examples, row by row, cycled to each
    reference batch.

Both functions run at emit time on every example (up to 8) to learn the names,
dtypes and dims of every tensor: a dim is fixed where every example agrees and
the model does not say otherwise, -1 where they differ (with a single example
every dim the model leaves open stays -1, said in a note). A per-row scalar of a
batching step (the function takes or returns ``[batch]``) is ``dims: [1]`` with
``reshape { shape: [] }`` on the step, and ``dims: [1]`` on the ensemble (Triton
compares an ensemble's tensors with its steps' dims, not their reshape). The
ensemble is then checked against Triton's rules
(:mod:`navigator.triton.ensemble_rules`) before anything is written; a
violation is a UserInputError naming the rule.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from navigator.errors import UserInputError
from navigator.triton.config import ModelPlan, Step, TensorPlan
from navigator.triton.ensemble_rules import check, raise_if_invalid

__all__ = ["PRE", "POST", "plan", "check", "raise_if_invalid", "derive_dims", "load_function"]

PRE, POST = "preprocess", "postprocess"
MAX_EXAMPLES = 8        # example batches a step is probed on


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


def parameters(fn: Callable, available: list[str], flag: str, what: str,
               everything: list[str] | None = None) -> list[str]:
    """The tensors ``fn`` takes: its named parameters, or with ``**kwargs`` all of
    ``everything`` (default ``available``)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return list(available if everything is None else everything)
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
        raise UserInputError(f"{flag}: calling it on an example failed ({type(e).__name__}: {e})") from None
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



# --------------------------------------------------------------------------- examples and dims
def example_batches(value: Any, flag: str) -> list[dict]:
    """``example_inputs()``'s result: one batch ``{name: array}`` or a list of them."""
    import numpy as np

    batches = [value] if isinstance(value, dict) else list(value) if isinstance(value, (list, tuple)) else None
    if not batches or not all(isinstance(b, dict) and b for b in batches):
        raise UserInputError(f"{flag}: example_inputs() must return a non-empty dict {{name: array}} or a list of "
                             "them (one per example batch)")
    out = [{str(k): np.asarray(v) for k, v in b.items()} for b in batches]
    if any(set(b) != set(out[0]) for b in out):
        raise UserInputError(f"{flag}: example_inputs() batches name different tensors ({', '.join(out[0])} in the "
                             "first); every batch needs the same names")
    return out[:MAX_EXAMPLES]


def _check_batch_first(tensors: dict, batch: int, flag: str, what: str) -> None:
    for name, arr in tensors.items():
        if arr.ndim == 0 or arr.shape[0] != batch:
            raise UserInputError(f"{flag}: {what} {name!r} has shape {tuple(arr.shape)}, not batch-first (batch "
                                 f"{batch}); with batching every tensor keeps the batch as its first dim "
                                 "(or serve without batching: --max-batch-size 0)")


def _gather(results: list[dict], flag: str, what: str) -> dict[str, list]:
    """``{name: [array per example]}``; every example must give the same names, dtypes and ranks."""
    first = results[0]
    for n, r in enumerate(results[1:], 2):
        if set(r) != set(first):
            raise UserInputError(f"{flag}: example {n} gave {what}s {', '.join(r)}, example 1 gave "
                                 f"{', '.join(first)}; the names must not depend on the input")
        for name, arr in r.items():
            if arr.dtype != first[name].dtype or arr.ndim != first[name].ndim:
                raise UserInputError(f"{flag}: {what} {name!r} is {arr.dtype} of rank {arr.ndim} for example {n} "
                                     f"but {first[name].dtype} of rank {first[name].ndim} for example 1")
    return {name: [r[name] for r in results] for name in first}


def derive_dims(arrays: list, batching: bool, like: list[int] | None = None) -> tuple[list[int], list[int] | None]:
    """(config dims, reshape) of a tensor seen in ``arrays`` (one per example, batch first when
    ``batching``): a dim is fixed where every example agrees (given two examples or more), -1
    where they differ; ``like`` (the dims of the model tensor it must match) fixes the dims the
    model fixes, to the size seen (a mismatch then surfaces as an ensemble rule). A per-row
    scalar of a batching model is dims [1] with an empty reshape."""
    shapes = [tuple(a.shape[1:] if batching else a.shape) for a in arrays]
    if not shapes[0]:
        if not batching:
            raise UserInputError("a scalar (rank-0) tensor cannot be served by Triton without batching")
        return [1], []
    several = len(shapes) > 1
    dims = [s if several and all(sh[i] == s for sh in shapes) else -1 for i, s in enumerate(shapes[0])]
    if like is not None and len(like) == len(dims):   # a size the model does not take wins: it is refused
        dims = [next((sh[i] for sh in shapes if sh[i] != d), d) if d > 0 else dims[i] for i, d in enumerate(like)]
    return dims, None


def _open_dims(dims: list[int], like: list[int] | None) -> bool:
    """Whether a -1 of ``dims`` comes from having one example only (not from the model)."""
    return any(d < 0 and (like is None or len(like) != len(dims) or like[i] < 0) for i, d in enumerate(dims))


# --------------------------------------------------------------------------- planning
def plan(core: ModelPlan, *, name: str, preprocess: str | None, postprocess: str | None, samples: list[dict],
         references: list[dict], instance_count: int, notes: list[str] | None = None) -> list[ModelPlan]:
    """The pre/post step plans and the ensemble plan around ``core`` (whose tensors carry
    our names in ``source``). Runs the user's functions on the examples (``samples``: the
    stored input batches; ``references``: the stored reference outputs, in the same order)."""
    import numpy as np

    notes = notes if notes is not None else []
    batching = core.max_batch_size > 0
    by_source_in = {t.source: t for t in core.inputs}
    by_source_out = {t.source: t for t in core.outputs}
    steps: list[Step] = []
    plans: list[ModelPlan] = []
    ens_inputs: list[TensorPlan] = []
    ens_outputs: list[TensorPlan] = []
    model_in_map: dict[str, str] = {}
    model_out_map: dict[str, str] = {}
    pre_tensors: dict[str, TensorPlan] = {}       # preprocess outputs by name
    pre_values: dict[str, list] = {}              # preprocess outputs per example

    def step_plan(role: str, inputs: list[TensorPlan], outputs: list[TensorPlan], file_name: str) -> ModelPlan:
        p = ModelPlan(name=f"{name}_{role}", role=role, backend="python", default_model_filename="model.py",
                      python=True, max_batch_size=core.max_batch_size, inputs=inputs, outputs=outputs,
                      instance_kind="KIND_CPU", instance_count=instance_count)
        p.notes.append(f"{role} step from {Path(file_name).name}")
        return p

    def single_example(flag: str, what: str, tensors: list[tuple[str, list[int], list[int] | None]]) -> None:
        open_ = [n for n, dims, like in tensors if _open_dims(dims, like)]
        if open_:
            notes.append(f"{name}: {flag} was probed on one example only, so the dims of {', '.join(open_)} stay "
                         f"variable (-1); {what} to fix the dims that never vary")

    # ---- preprocess (or the model's own inputs)
    if preprocess:
        flag = f"--{PRE}"
        fn, module = load_function(preprocess, PRE)
        examples = [{k: np.asarray(v) for k, v in s.items()} for s in samples][:MAX_EXAMPLES]
        if callable(getattr(module, "example_inputs", None)):
            try:
                value = module.example_inputs()
            except Exception as e:
                raise UserInputError(f"{flag}: example_inputs() raised {type(e).__name__}: {e}") from None
            examples = example_batches(value, flag)
        if not examples:
            raise UserInputError(f"{flag}: no example to probe it with (no stored sample, no example_inputs())")
        taken = parameters(fn, list(examples[0]), flag, "example inputs")
        results = []
        for ex in examples:
            feeds = {n: ex[n] for n in taken}
            result = probe(fn, feeds, flag)
            if batching:
                batch = int(feeds[taken[0]].shape[0]) if feeds[taken[0]].ndim else -1
                _check_batch_first(feeds, batch, flag, "input")
                _check_batch_first(result, batch, flag, "output")
            results.append(result)
        pre_values = _gather(results, flag, "output")
        passthrough = [t.source for t in core.inputs if t.source not in pre_values and t.source in examples[0]]
        raw = list(dict.fromkeys(taken + passthrough))
        seen = []
        pre_inputs = []
        for n in raw:
            like = by_source_in[n].dims if n in by_source_in else None
            dims, reshape = derive_dims([ex[n] for ex in examples], batching, like)
            seen.append((n, dims, like))
            dtype = str(examples[0][n].dtype)
            ens_inputs.append(TensorPlan(name=n, source=n, feed=n, dtype=dtype, dims=dims))
            if n in taken:
                pre_inputs.append(TensorPlan(name=n, source=n, feed=n, dtype=dtype, dims=dims, reshape=reshape))
        pre_outputs = []
        for out_name, arrays in pre_values.items():
            like = by_source_in[out_name].dims if out_name in by_source_in else None
            dims, reshape = derive_dims(arrays, batching, like)
            seen.append((out_name, dims, like))
            t = TensorPlan(name=out_name, source=out_name, feed=out_name, dtype=str(arrays[0].dtype), dims=dims,
                           reshape=reshape)
            pre_outputs.append(t)
            pre_tensors[out_name] = t
        if len(examples) < 2:
            single_example(flag, "define example_inputs() returning several batches (a list)", seen)
        pre = step_plan(PRE, pre_inputs, pre_outputs, preprocess)
        plans.append(pre)
        steps.append(Step(pre.name, {t.name: t.name for t in pre_inputs},
                          {t.name: f"preprocessed_{t.name}" for t in pre_outputs}))
        for t in core.inputs:
            if t.source in pre_values:
                model_in_map[t.name] = f"preprocessed_{t.source}"
            elif t.source in examples[0]:
                model_in_map[t.name] = t.source
    else:
        for t in core.inputs:      # an ensemble's tensors take the step's dims, never a reshape
            ens_inputs.append(TensorPlan(name=t.source, source=t.source, feed=t.source, dtype=t.dtype,
                                         dims=list(t.dims)))
            model_in_map[t.name] = t.source

    # ---- postprocess (or the model's own outputs)
    if postprocess:
        flag = f"--{POST}"
        fn, _ = load_function(postprocess, POST)
        model_outs = [t.source for t in core.outputs]
        pre_outs = [n for n in pre_tensors if n not in by_source_out]
        extra = [n for n in pre_outs if n not in by_source_in]      # what **kwargs takes from preprocess
        what = "model outputs" + (" or preprocess outputs" if pre_outs else "")
        taken = parameters(fn, model_outs + pre_outs, flag, what, everything=model_outs + extra)
        clash = [n for n in taken if n in by_source_out and n in pre_tensors]
        if clash:
            raise UserInputError(f"{flag}: {clash[0]!r} is both a model output and a preprocess output; rename the "
                                 "preprocess output")
        refs = [r for r in references][:MAX_EXAMPLES]
        if not refs:
            raise UserInputError(f"{flag}: the workspace has no reference outputs (samples/reference/*.npz) to probe "
                                 "it with")
        missing = [n for n in taken if n in by_source_out and n not in refs[0]]
        if missing:
            raise UserInputError(f"{flag}: the stored reference outputs lack {missing[0]!r}")
        pools = {n: _rows(pre_values[n], batching) for n in taken if n in pre_tensors}
        results = []
        for ref in refs:
            feeds = {n: np.asarray(ref[n]) for n in taken if n in by_source_out}
            batch = int(next(iter(feeds.values())).shape[0]) if batching and feeds else None
            for n, pool in pools.items():
                feeds[n] = pool if not batching else np.take(pool, np.arange(batch or len(pool)) % len(pool), axis=0)
            result = probe(fn, {n: feeds[n] for n in taken}, flag)
            if not result:
                raise UserInputError(f"{flag}: it returned an empty dict; an ensemble needs at least one output")
            if batching and batch is not None:
                _check_batch_first(result, batch, flag, "output")
            results.append(result)
        post_values = _gather(results, flag, "output")
        post_inputs = []
        for n in taken:
            src = by_source_out[n] if n in by_source_out else pre_tensors[n]
            post_inputs.append(TensorPlan(name=n, source=n, feed=n, dtype=src.dtype, dims=list(src.dims),
                                          reshape=src.reshape))
        post_outputs, seen = [], []
        for out_name, arrays in post_values.items():
            dims, reshape = derive_dims(arrays, batching)
            seen.append((out_name, dims, None))
            post_outputs.append(TensorPlan(name=out_name, source=out_name, feed=out_name, dtype=str(arrays[0].dtype),
                                           dims=dims, reshape=reshape))
        if len(refs) < 2:
            single_example(flag, "store more than one sample batch (navigator convert --sample-count)", seen)
        post = step_plan(POST, post_inputs, post_outputs, postprocess)
        plans.append(post)
        for n in taken:
            if n in by_source_out:
                model_out_map[by_source_out[n].name] = f"model_{n}"
        steps.append(Step(post.name, {n: (f"model_{n}" if n in by_source_out else f"preprocessed_{n}")
                                      for n in taken},
                          {t.name: t.name for t in post_outputs}))
        ens_outputs = [TensorPlan(name=t.name, source=t.name, feed=t.name, dtype=t.dtype, dims=list(t.dims))
                       for t in post_outputs]
    else:
        for t in core.outputs:
            model_out_map[t.name] = t.source
            ens_outputs.append(TensorPlan(name=t.source, source=t.source, feed=t.source, dtype=t.dtype,
                                          dims=list(t.dims)))

    steps.insert(1 if preprocess else 0, Step(core.name, model_in_map, model_out_map))
    ensemble = ModelPlan(name=name, role="ensemble", platform="ensemble", max_batch_size=core.max_batch_size,
                         inputs=ens_inputs, outputs=ens_outputs, steps=steps)
    return plans + [ensemble]


def _rows(arrays: list, batching: bool):
    """Preprocess outputs of every example as one pool of rows (batching), or the first
    example's value; rows of different shapes cannot stack, so then the first example's."""
    import numpy as np

    if not batching:
        return arrays[0]
    try:
        return np.concatenate(arrays, axis=0)
    except ValueError:
        return arrays[0]
