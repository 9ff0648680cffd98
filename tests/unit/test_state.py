"""Stateful models: state pairs by name and by --state, the sequence replay, hidden state."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.errors import UserInputError
from navigator.execution import sequences
from navigator.sources.state import declared_pairs, find_pairs, hidden_state
from navigator.specs import parse_state
from navigator.types import ModelSignature, TensorSpec


def _sig(inputs, outputs) -> ModelSignature:
    return ModelSignature(inputs=[TensorSpec(n, d, s) for n, d, s in inputs],
                          outputs=[TensorSpec(n, d, s) for n, d, s in outputs])


@pytest.mark.parametrize("inputs, outputs, pairs", [
    # silero-vad: input, state, sr -> output, stateN
    ([("input", "float32", [-1, -1]), ("state", "float32", [2, -1, 128]), ("sr", "int64", [])],
     [("output", "float32", [-1, 1]), ("stateN", "float32", [2, -1, 128])], [("state", "stateN")]),
    # an exported LSTM step
    ([("x", "float32", [1, -1, 4]), ("h0", "float32", [1, -1, 8]), ("c0", "float32", [1, -1, 8])],
     [("y", "float32", [1, 1, -1, 8]), ("hn", "float32", [1, -1, 8]), ("cn", "float32", [1, -1, 8])],
     [("h0", "hn"), ("c0", "cn")]),
    ([("audio", "float32", [-1, 160]), ("cache_in", "float32", [-1, 64]), ("mem_in", "float32", [-1, 3])],
     [("cache_out", "float32", [-1, 64]), ("mem_out", "float32", [-1, 3]), ("logits", "float32", [-1, 2])],
     [("cache_in", "cache_out"), ("mem_in", "mem_out")]),
    ([("input_ids", "int64", [-1, -1]), ("past_key_values.0.key", "float32", [-1, 4, -1, 16])],
     [("logits", "float32", [-1, -1, 50]), ("present.0.key", "float32", [-1, 4, -1, 16])],
     [("past_key_values.0.key", "present.0.key")]),
    # an autoencoder: x -> x_out keeps dtype and shape, but nothing says state
    ([("x", "float32", [-1, 8])], [("x_out", "float32", [-1, 8])], []),
    # a state word, but what comes back is another dtype / shape
    ([("state", "float32", [2, 1, 128])], [("stateN", "float16", [2, 1, 128])], []),
    ([("state", "float32", [2, 1, 128])], [("stateN", "float32", [2, 1, 64])], []),
])
def test_state_pairs_found_by_name_and_type(inputs, outputs, pairs):
    assert [(p.input, p.output) for p in find_pairs(_sig(inputs, outputs))] == pairs


def test_declared_pairs_are_checked_against_the_signature():
    sig = _sig([("x", "float32", [-1, 4]), ("carry", "float32", [-1, 8])],
               [("y", "float32", [-1, 2]), ("carry2", "float32", [-1, 8])])
    assert [(p.input, p.output) for p in declared_pairs(sig, {"carry": "carry2"})] == [("carry", "carry2")]
    with pytest.raises(UserInputError, match="no input 'h'"):
        declared_pairs(sig, {"h": "carry2"})
    with pytest.raises(UserInputError, match="no output 'z'"):
        declared_pairs(sig, {"carry": "z"})
    with pytest.raises(UserInputError, match="keeps its dtype and shape"):
        declared_pairs(sig, {"x": "y"})
    two = _sig([("h0", "float32", [1, 8]), ("c0", "float32", [1, 8])], [("hn", "float32", [1, 8])])
    with pytest.raises(UserInputError, match="already the next value of another state"):
        declared_pairs(two, {"h0": "hn", "c0": "hn"})


def test_parse_state():
    assert parse_state("state=stateN, h0=hn") == {"state": "stateN", "h0": "hn"}
    for bad, needle in (("", "expected IN=OUT"), ("state", "is not IN=OUT"), ("a=b=c", "is not IN=OUT"),
                        ("a=b,a=c", "given twice")):
        with pytest.raises(UserInputError, match=needle):
            parse_state(bad)


def test_replay_carries_each_steps_state_and_resets_it():
    """y = x + s, s' = y: the state accumulates; reset_at starts again from the first step's state."""
    calls = []

    def infer(feeds):
        calls.append(float(feeds["s"][0]))
        y = feeds["x"] + feeds["s"]
        return {"y": y, "s_out": y}

    steps = [(f"{k:03d}", {"x": np.array([1.0]), "s": np.array([0.0])}) for k in range(4)]
    ys = [float(out["y"][0]) for _, _, out in sequences.replay(infer, steps, [("s", "s_out")])]
    assert ys == [1.0, 2.0, 3.0, 4.0] and calls == [0.0, 1.0, 2.0, 3.0]
    ys = [float(out["y"][0]) for _, _, out in sequences.replay(infer, steps, [("s", "s_out")], reset_at=2)]
    assert ys == [1.0, 2.0, 1.0, 2.0]
    assert sequences.pairs_of({"pairs": [{"input": "s", "output": "s_out"}]}) == [("s", "s_out")]


def test_hidden_state_is_a_second_call_that_differs():
    a = {"y": np.array([1.0, 2.0], np.float32), "k": np.array([3], np.int64)}
    assert hidden_state(a, {"y": a["y"] + 1e-9, "k": a["k"]}) is None   # float noise
    assert "moved by" in hidden_state(a, {"y": a["y"] + 0.5, "k": a["k"]})
    assert "changed between" in hidden_state(a, {"y": a["y"], "k": a["k"] + 1})
    assert "changed shape" in hidden_state(a, {"y": a["y"][:1], "k": a["k"]})
