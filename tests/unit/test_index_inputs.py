"""Index inputs of PyTorch sources (navigator/sources/torch_support.py): the embedding tables an input
reaches, through value-preserving ops, give the generated integers their bounds; an index out of its
table is one error line naming the input, the range used and the flag that fixes it."""

from __future__ import annotations

import numpy as np
import pytest

from navigator.errors import UserInputError

torch = pytest.importorskip("torch")

from navigator.sources import torch_reference as tr, torch_support as ts  # noqa: E402


class BertShaped(torch.nn.Module):
    """input_ids -> word embeddings (1000 rows), token_type_ids -> .view -> type embeddings (2 rows),
    positions through a functional embedding of 64 rows, a mask used as floats, and a table indexed
    by ``table[ids]`` (50 rows)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.words = torch.nn.Embedding(1000, 8)
        self.types = torch.nn.Embedding(2, 8)
        self.positions = torch.nn.Parameter(torch.randn(64, 8))
        self.table = torch.nn.Parameter(torch.randn(50, 8))

    def forward(self, input_ids, token_type_ids, position_ids, attention_mask, bucket):
        h = self.words(input_ids) + self.types(token_type_ids.view(token_type_ids.shape))
        h = h + torch.nn.functional.embedding(position_ids.long(), self.positions) + self.table[bucket]
        return (h * attention_mask.unsqueeze(-1)).sum(1)


IO = ts.TorchIO(call="positional", inputs=["input_ids", "token_type_ids", "position_ids", "attention_mask",
                                           "bucket"])
SHAPES = {n: (2, 5) for n in IO.inputs}


def test_the_tables_an_input_reaches_and_the_inputs_that_must_be_integers():
    dtypes = {n: "float32" for n in IO.inputs}          # nothing told: every input generated as floats
    bounds, now_int = tr.find_index_inputs(BertShaped(), IO, SHAPES, dtypes)
    assert bounds == {"input_ids": 1000, "token_type_ids": 2, "position_ids": 64, "bucket": 50}
    assert sorted(now_int) == ["bucket", "input_ids", "position_ids", "token_type_ids"]
    assert "attention_mask" not in bounds               # used as a float: no table


def test_integer_inputs_are_probed_as_they_are():
    dtypes = {"input_ids": "int64", "token_type_ids": "int32", "position_ids": "int64", "bucket": "int64",
              "attention_mask": "float32"}
    bounds, now_int = tr.find_index_inputs(BertShaped(), IO, SHAPES, dtypes)
    assert bounds["token_type_ids"] == 2 and now_int == []


def test_an_index_out_of_its_table_names_the_input_and_the_fix():
    batch = {n: np.zeros((2, 5), np.int64) for n in IO.inputs}
    batch["attention_mask"] = np.ones((2, 5), np.float32)
    batch["token_type_ids"][0, 3] = 7                   # [0, 16) was the old default range: 7 >= 2 rows
    with pytest.raises(UserInputError) as info:
        tr.run_reference(BertShaped(), IO, [batch], {"token_type_ids": (0, 16)})
    line = info.value.one_line()
    assert "input 'token_type_ids' indexes a table of 2 rows, but the sample holds 7" in line
    assert "values generated in [0, 16)" in line and "--value-ranges token_type_ids:0,2" in line
    batch["token_type_ids"][0, 3] = 1
    (out,), _ = tr.run_reference(BertShaped(), IO, [batch], {})
    assert out["output"].shape == (2, 8)
