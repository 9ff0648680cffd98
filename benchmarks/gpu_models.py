"""The models of benchmarks/gpu_check.py, as factories Navigator rebuilds in each worker
(``benchmarks/gpu_models.py:resnet50``): a live module would stay on the calling process's CPU.

Random weights, seeded: throughput does not depend on them and nothing can be downloaded on
the GPU machine. ``resnet50`` is torchvision's; ``bert_base`` is transformers' BERT-base
(12 layers, hidden 768) with a 2-label classification head, called with ``input_ids`` and
``attention_mask``. The ``*_small`` ones are the CPU dry run's stand-ins (torchvision does not
import beside the CPU torch build here): the same kinds of module, small enough for 2 cores.
"""

from __future__ import annotations


def resnet50():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).eval()


def _bert(**config):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(num_labels=2, **config)).eval()


def bert_base():
    return _bert()


def resnet_small():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from cnn import small_cnn

    return small_cnn()


def bert_small():
    return _bert(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
