"""The source module run in the calling process: the reference outputs (with the index inputs'
ranges checked while it runs), the float64 variation, and which integer inputs index a table."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from navigator.errors import UserInputError
from navigator.sources.torch_support import TorchIO, batch_as_dict, output_names, to_numpy, to_tensors

log = logging.getLogger(__name__)

FLOAT64_MAX_BYTES = 1 << 30    # the float64 copy of larger modules costs more memory than the floor is worth


def call_module(module, io: TorchIO, tensors: tuple):
    if io.call == "kwargs":
        return module(**dict(zip(io.inputs, tensors)))
    if io.call == "dict":
        return module(dict(zip(io.inputs, tensors)))
    return module(*tensors)


def run_reference(module, io: TorchIO, batches: list[dict], value_ranges: dict | None = None
                  ) -> tuple[list[dict], list]:
    """Eager fp32 on the CPU without autocast: the reference outputs per batch, and the output
    leaves of the first batch's raw result (for names and the tree). ``value_ranges`` ({input:
    (low, high)}): check every embedding's indices against its table, so an index out of range
    is one error line naming the input, the range and the flag that fixes it."""
    import torch
    from torch.utils import _pytree as pytree

    results, first = [], None
    for i, batch in enumerate(batches):
        args = to_tensors(batch, io.inputs)
        watch = _index_mode(dict(zip(io.inputs, args)), check=value_ranges) if value_ranges is not None else None
        with torch.no_grad(), torch.autocast("cpu", enabled=False), watch or contextlib.nullcontext():
            out = call_module(module, io, args)
        if i == 0:
            first = out
            io.outputs, io.treespec, io.memory_tree = output_names(out)
        results.append(to_numpy(pytree.tree_leaves(out), io.outputs))
    return results, first


def run_float64(module, io: TorchIO, batches: list[dict], reference: list[dict]) -> list[dict | None] | None:
    """The source's own variation (the floor of the fp32 tolerances): the module and its float
    inputs in float64, outputs cast to the reference's dtypes; per batch, None where a batch fails.
    None when the module is too large to copy or does not run in float64 (an op without a double
    kernel): the tolerances then get no floor."""
    import copy

    import torch

    params = list(module.parameters()) + list(module.buffers())
    if not params or sum(p.numel() * p.element_size() for p in params) > FLOAT64_MAX_BYTES \
            or not all(p.dtype == torch.float32 for p in params if p.is_floating_point()):
        return None
    try:
        double = copy.deepcopy(module).double()
    except Exception:   # noqa: BLE001 - a module that does not copy: no floor
        return None
    out: list[dict | None] = []
    saved = (io.outputs, io.treespec, io.memory_tree)   # run_reference names the outputs anew: keep the fp32 run's
    try:
        return _float64_runs(double, io, batches, reference, out)
    finally:
        io.outputs, io.treespec, io.memory_tree = saved


def _float64_runs(double, io: TorchIO, batches: list[dict], reference: list[dict], out: list):

    import numpy as np

    for batch, ref in zip(batches, reference):
        wide = {k: v.astype(np.float64) if np.asarray(v).dtype == np.float32 else v for k, v in batch.items()}
        try:
            (result,), _ = run_reference(double, io, [wide])
        except Exception as e:   # noqa: BLE001
            logging.getLogger(__name__).info("no float64 run of the source (%s: %s): no fp32 floor",
                                             type(e).__name__, str(e)[:200])
            return None
        out.append({k: np.asarray(v).astype(ref[k].dtype) if k in ref else v for k, v in result.items()})
    return out


def user_batch_to_numpy(batch: Any, io: TorchIO, where: str) -> dict:
    from navigator.sources.samples import as_array

    return {name: as_array(value, f"{where}, input '{name}'") for name, value in batch_as_dict(batch, io).items()}


# Ops through which an input keeps its values on the way to an embedding table (the ONNX
# sources' Gather walk, navigator.sources.signature.index_bounds, does the same on the graph).
_PASSTHROUGH = {"view", "reshape", "to", "long", "int", "type", "unsqueeze", "squeeze", "expand", "expand_as",
                "permute", "transpose", "contiguous", "clone", "flatten", "narrow", "select", "repeat", "t",
                "cpu", "detach", "__getitem__"}


class _FloatIndex(Exception):
    """An input given as floats reached an embedding's indices: it must be an integer input."""

    def __init__(self, name: str, rows: int):
        super().__init__(name)
        self.name, self.rows = name, rows


def _index_mode(tensors: dict, *, check: dict | None = None):
    """A TorchFunctionMode that follows ``tensors`` (input name -> tensor) through value-preserving ops
    to the indices of ``F.embedding`` / ``torch.embedding`` / ``table[indices]``; records
    ``bounds[name] = rows`` of each table reached. ``check``: {name: (low, high)} the values were
    generated in; an index out of its table then raises UserInputError naming the input and the fix."""
    import torch
    from torch.overrides import TorchFunctionMode

    embedding = torch.nn.functional.embedding

    class IndexInputs(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.origin = {id(t): n for n, t in tensors.items()}
            self.keep = list(tensors.values())     # ids stay unique while the probe runs
            self.bounds: dict[str, int] = {}

        def _name(self, t):
            return self.origin.get(id(t)) if isinstance(t, torch.Tensor) else None

        def _reached(self, indices, table) -> None:
            name = self._name(indices)
            if name is None or not isinstance(table, torch.Tensor) or table.dim() < 1:
                return
            rows = int(table.shape[0])
            self.bounds[name] = min(rows, self.bounds.get(name, rows))
            if indices.is_floating_point():
                raise _FloatIndex(name, rows)
            if check is not None and indices.numel():
                low, high = int(indices.min()), int(indices.max())
                if low < 0 or high >= rows:
                    given = check.get(name)
                    used = f" (values generated in [{given[0]:g}, {given[1]:g}))" if given else ""
                    raise UserInputError(
                        f"input {name!r} indexes a table of {rows} rows, "
                        f"but the sample holds {high if high >= rows else low}"
                        f"{used}", hint=f"--value-ranges {name}:0,{rows} (or samples with valid indices)")

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is embedding and args:
                self._reached(args[0], args[1] if len(args) > 1 else kwargs.get("weight"))
            elif func is torch.embedding and len(args) > 1:
                self._reached(args[1], args[0])
            elif getattr(func, "__name__", "") == "__getitem__" and len(args) > 1 and self._name(args[1]):
                self._reached(args[1], args[0])   # table[indices]
            result = func(*args, **kwargs)
            source = self._name(args[0]) if args else None
            if source is not None and isinstance(result, torch.Tensor) \
                    and getattr(func, "__name__", "") in _PASSTHROUGH:
                self.origin[id(result)] = source
                self.keep.append(result)
            return result

    return IndexInputs()


def find_index_inputs(module, io: TorchIO, shapes: dict, dtypes: dict) -> tuple[dict[str, int], list[str]]:
    """(rows of the table each input indexes, inputs that must be integers though ``dtypes`` says float).

    Runs ``module`` once per input found (at most once per input) on zeros of ``shapes`` under a
    mode that follows every input to the embeddings it reaches: an input reaching one as floats
    becomes int64 and the probe runs again. A forward that fails for another reason ends the probe
    with what it found (the reference run reports that error)."""
    import numpy as np
    import torch

    dtypes = dict(dtypes)
    bounds: dict[str, int] = {}
    now_int: list[str] = []
    for _ in range(len(io.inputs) + 1):
        tensors = {n: torch.from_numpy(np.zeros(shapes[n], dtype=np.dtype(dtypes.get(n, "float32"))))
                   for n in io.inputs}
        mode = _index_mode(tensors)
        try:
            with torch.no_grad(), mode:
                call_module(module, io, tuple(tensors[n] for n in io.inputs))
        except _FloatIndex as e:
            dtypes[e.name] = "int64"
            now_int.append(e.name)
            bounds.update(mode.bounds)
            continue
        except Exception as e:   # noqa: BLE001 - best effort: the reference names the real error
            log.debug("index probe stopped: %s: %s", type(e).__name__, e)
        bounds.update(mode.bounds)
        break
    for name in bounds:   # an index input given as floats (cast to an integer inside) is an integer input too
        if name not in now_int and np.dtype(dtypes.get(name, "float32")).kind == "f":
            now_int.append(name)
    return bounds, now_int
