"""A transformer encoder block over token ids, for
`navigator convert examples/transformer_block.py:transformer_block --shapes ids:4x32 --dtypes ids:int64
--value-ranges ids:0,1000`.

Dict output (logits and pooled features): Navigator names the outputs
`logits` and `pooled` and hands results back as a dict through the API.
"""

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, heads: int = 4, classes: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> dict:
        x = self.embed(ids)
        attended, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm1(x + attended)
        x = self.norm2(x + self.mlp(x))
        pooled = x.mean(dim=1)
        return {"logits": self.head(pooled), "pooled": pooled}


def transformer_block() -> nn.Module:
    torch.manual_seed(0)
    return TransformerBlock().eval()
