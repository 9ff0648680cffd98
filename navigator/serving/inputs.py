"""Request data from the workspace's stored samples, for both tools.

The samples (``samples/inputs/*.npz``, our tensor names, batched along dim 0 when the
model batches) are cut into rows; each row becomes one entry of Perf Analyzer's
``--input-data`` JSON (``{"data": [{INPUT: {"content": [...], "shape": [...]}}]}``,
the shape without the batch dim) and one request of our load generator. Triton names
come from the config: its inputs are in the signature's order (the emitter writes
them so), matched by position and checked by dtype. Only rows whose shapes equal
the first row's are used, so one ``--shape NAME:dims`` per dynamic input holds for
every entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError

MAX_ROWS = 64          # entries in perf_input.json: enough variety, a small file


@dataclass
class RequestData:
    batching: bool                                       # the model batches (max_batch_size > 0)
    names: list[str]                                     # Triton input names, config order
    dtypes: dict[str, str]                               # Triton name -> numpy dtype
    dims: dict[str, list[int]]                           # Triton name -> config dims (-1 dynamic)
    rows: list[dict] = field(default_factory=list)       # Triton name -> ndarray (one row, no batch dim)
    outputs: list[str] = field(default_factory=list)
    sequence_length: int = 0                             # a stateful model's steps per sequence (0: stateless)

    def shape(self, name: str) -> list[int]:
        return list(self.rows[0][name].shape)

    def dynamic(self) -> list[str]:
        return [n for n in self.names if any(d < 0 for d in self.dims[n])]

    def batch(self, index: int, batch_size: int) -> dict:
        """Request ``index``: ``batch_size`` rows stacked (the whole tensor without batching)."""
        import numpy as np

        if not self.batching:
            return self.rows[index % len(self.rows)]
        picks = [self.rows[(index + k) % len(self.rows)] for k in range(batch_size)]
        return {n: np.stack([p[n] for p in picks]) for n in self.names}

    def perf_analyzer_json(self) -> dict:
        data = []
        for row in self.rows:
            entry = {}
            for n in self.names:
                arr = row[n]
                values = arr.reshape(-1).tolist()
                if arr.dtype == bool:
                    values = [bool(v) for v in values]
                entry[n] = {"content": values, "shape": list(arr.shape)}
            data.append(entry)
        # a sequence model's data is a list of streams, each its steps in order (one stream here)
        return {"data": [data] if self.sequence_length else data}

    def shape_flags(self) -> list[str]:
        """``--shape NAME:d1,d2`` for each input with a dynamic dim (batch dim excluded)."""
        return [f"{n}:{','.join(str(d) for d in self.shape(n))}" for n in self.dynamic()]


def from_workspace(ws, st, cfg) -> RequestData:
    """Rows of the stored samples under the Triton names of ``cfg`` (a ModelConfig)."""
    from navigator.triton import config as cfg_mod
    from navigator.workspace import npz

    batching = cfg.max_batch_size > 0
    names = [io.name for io in cfg.input]
    dtypes = {io.name: cfg_mod.numpy_dtype(_type_name(io.data_type)) for io in cfg.input}
    dims = {io.name: list(io.dims) for io in cfg.input}
    ours = st.signature.input_names
    sequence_length = 0
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.state:   # the server holds the state
        held = {p["input"] for p in (st.stateful or {}).get("pairs") or []}
        ours = [n for n in ours if n not in held]
        sequence_length = int((st.stateful or {}).get("steps") or 0)
    if len(ours) != len(names):
        raise UserInputError(f"{cfg.name}: {len(names)} inputs in config.pbtxt, {len(ours)} in the workspace signature")
    files = sorted(Path(ws.inputs_dir).glob("*.npz"))
    if not files:
        raise UserInputError(f"{ws.inputs_dir}: no stored samples to build requests from")
    rows: list[dict] = []
    for path in files:
        sample = npz.load(path)
        missing = [n for n in ours if n not in sample]
        if missing:
            raise UserInputError(f"{path}: no tensor {missing[0]!r}")
        rows.extend(_rows({t: sample[o] for o, t in zip(ours, names)}, dtypes, batching, dims))
        if len(rows) >= MAX_ROWS and not sequence_length:   # a sequence keeps all its steps, in order
            break
    first = {t: a.shape for t, a in rows[0].items()}
    rows = [r for r in rows if {t: a.shape for t, a in r.items()} == first][:MAX_ROWS]
    return RequestData(batching=batching, names=names, dtypes=dtypes, dims=dims, rows=rows,
                       outputs=[io.name for io in cfg.output], sequence_length=sequence_length)


def _rows(batch: dict, dtypes: dict, batching: bool, dims: dict | None = None) -> list[dict]:
    """One batch as request rows: each row of it when the model batches, else the batch itself;
    in the config's dtypes (strings refused); a rank-0 tensor as its config dims ([1])."""
    import numpy as np

    arrays = {}
    for name, value in batch.items():
        arr = np.asarray(value)
        if arr.dtype.kind in "OUS":
            raise UserInputError(f"input {name!r} holds strings; serving profiles take numeric inputs only")
        if arr.ndim == 0 and not batching and dims:
            arr = arr.reshape([1] * len(dims[name]))
        arrays[name] = arr.astype(dtypes[name], copy=False)
    if not batching:
        return [{n: np.require(a, requirements="C") for n, a in arrays.items()}]
    count = min(a.shape[0] for a in arrays.values())
    return [{n: np.require(a[i], requirements="C") for n, a in arrays.items()} for i in range(count)]


def from_examples(examples: list[dict], cfg) -> RequestData:
    """Rows of raw example batches (an ensemble's inputs, matched by name) under the
    inputs of ``cfg`` (the ensemble's ModelConfig)."""
    from navigator.triton import config as cfg_mod

    batching = cfg.max_batch_size > 0
    names = [io.name for io in cfg.input]
    dtypes = {io.name: cfg_mod.numpy_dtype(_type_name(io.data_type)) for io in cfg.input}
    dims = {io.name: list(io.dims) for io in cfg.input}
    rows: list[dict] = []
    for k, batch in enumerate(examples):
        missing = [n for n in names if n not in batch]
        if missing:
            raise UserInputError(f"example batch {k + 1} has no tensor {missing[0]!r} (the ensemble {cfg.name} takes "
                                 f"{', '.join(names)})")
        rows.extend(_rows({n: batch[n] for n in names}, dtypes, batching))
    if not rows:
        raise UserInputError(f"no example to build requests for {cfg.name} from")
    first = {n: a.shape for n, a in rows[0].items()}
    rows = [r for r in rows if {n: a.shape for n, a in r.items()} == first][:MAX_ROWS]
    return RequestData(batching=batching, names=names, dtypes=dtypes, dims=dims, rows=rows,
                       outputs=[io.name for io in cfg.output])


def _type_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2 as mc

    return mc.DataType.Name(value)
