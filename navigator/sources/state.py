"""Stateful models: a model whose outputs depend on what it was called with before.

Two kinds. **Explicit state**: the state goes in as an input and comes back as an output of the
same dtype and shape (a recurrent voice-activity model's ``state`` / ``stateN``, an LSTM's ``h0`` /
``hn`` and ``c0`` / ``cn``, a decoder's ``past_*`` / ``present_*``); :func:`find_pairs` finds such
pairs by name and type, ``--state IN=OUT`` declares or corrects them. Such a model is verified over
sequences, each format carrying its own state (navigator.execution.stages), and served with
Triton's sequence batcher and implicit state. **Hidden state**: the model keeps it inside (a
TorchScript module whose buffers change on every call); the same input gives another output on
its second call (:func:`hidden_state`), which a format-by-format comparison cannot judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (input pattern, output template): the input's name, matched whole (case-insensitive), and the
# output's name it pairs with; \1 is what the input pattern captured
_NAME_RULES = (
    (r"(.+?)_?in", r"\1_out"), (r"(.+?)_?in", r"\1out"), (r"(.+?)0", r"\1n"), (r"(.+?)_0", r"\1_n"),
    (r"(.+)", r"\1n"), (r"(.+)", r"\1_n"), (r"(.+)", r"\1_out"), (r"(.+)", r"\1_new"), (r"(.+)", r"\1_next"),
    (r"in_(.+)", r"out_\1"), (r"past_key_values(.*)", r"present\1"), (r"past(.*)", r"present\1"),
)


@dataclass(frozen=True)
class StatePair:
    input: str
    output: str

    def to_dict(self) -> dict:
        return {"input": self.input, "output": self.output}


def _same_type(a, b) -> bool:
    """Same dtype and rank, and every dim equal where both are fixed."""
    return a.dtype == b.dtype and a.rank == b.rank and all(x == y or x < 0 or y < 0 for x, y in zip(a.shape, b.shape))


# names that say "state": an autoencoder's x -> x_out has the same dtype and shape and is no state
_STATE_WORDS = ("state", "hidden", "cell", "mem", "past", "cache", "carry")
_STATE_NAMES = ("h", "c", "hx", "cx", "h0", "c0", "hn", "cn")


def _says_state(name: str) -> bool:
    low = name.lower()
    return low in _STATE_NAMES or any(w in low for w in _STATE_WORDS)


def find_pairs(signature) -> list[StatePair]:
    """Inputs that come back as outputs: the same dtype and shape, and names that say so (a state
    word in the input's name, and the output's name derived from it: state / stateN, h0 / hn,
    state_in / state_out, past_* / present_*)."""
    outputs = {o.name.lower(): o for o in signature.outputs}
    pairs, taken = [], set()
    for spec in signature.inputs:
        if not _says_state(spec.name):
            continue
        for pattern, template in _NAME_RULES:
            m = re.fullmatch(pattern, spec.name, flags=re.IGNORECASE)
            if not m:
                continue
            out = outputs.get(m.expand(template).lower())
            if out is not None and out.name not in taken and _same_type(spec, out):
                pairs.append(StatePair(spec.name, out.name))
                taken.add(out.name)
                break
    return pairs


def declared_pairs(signature, declared: dict[str, str]) -> list[StatePair]:
    """``--state IN=OUT`` checked against the signature (UserInputError naming what does not fit)."""
    from navigator.errors import UserInputError

    ins = {s.name: s for s in signature.inputs}
    outs = {s.name: s for s in signature.outputs}
    pairs = []
    for name, out in declared.items():
        if name not in ins:
            raise UserInputError(f"--state {name}={out}: the model has no input {name!r} "
                                 f"(inputs: {', '.join(ins)})")
        if out not in outs:
            raise UserInputError(f"--state {name}={out}: the model has no output {out!r} "
                                 f"(outputs: {', '.join(outs)})")
        if any(p.output == out for p in pairs):
            raise UserInputError(f"--state {name}={out}: output {out!r} is already the next value of another "
                                 "state; each state comes back as an output of its own")
        if not _same_type(ins[name], outs[out]):
            raise UserInputError(f"--state {name}={out}: {ins[name].dtype} {ins[name].shape} goes in, "
                                 f"{outs[out].dtype} {outs[out].shape} comes out: a state keeps its dtype and shape")
        pairs.append(StatePair(name, out))
    return pairs


def hidden_state(first: dict, second: dict) -> str | None:
    """Why two calls of a model on the same input show it keeps state, or None when they agree
    (exactly, or within float noise: 1e-6 of the output's magnitude)."""
    import numpy as np

    for name, a in first.items():
        b = second.get(name)
        a, b = np.asarray(a), np.asarray(b)
        if b is None or a.shape != b.shape:
            return f"output {name!r} changed shape between two calls on the same input"
        if a.dtype.kind in "fc":
            scale = float(np.max(np.abs(a))) if a.size else 0.0
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            if diff > 1e-6 * max(scale, 1e-12):
                return (f"output {name!r} moved by {diff:.3g} between two calls on the same input "
                        f"(its magnitude {scale:.3g}): the model keeps state between calls")
        elif not np.array_equal(a, b):
            return f"output {name!r} changed between two calls on the same input"
    return None
