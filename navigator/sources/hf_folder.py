"""A Hugging Face model folder as files: what ``save_pretrained`` leaves behind, read
without importing transformers (the source, the resume digest and the Triton tokenizer
step all need it, and the last must stay light).

A folder is recognised by its ``config.json`` holding a ``model_type`` or ``architectures``
key; its weights are ``model.safetensors`` (or a sharded ``model.safetensors.index.json``),
else ``pytorch_model.bin`` (or its index), which is loaded with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from navigator.errors import UserInputError

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS = "special_tokens_map.json"
PREPROCESSOR = "preprocessor_config.json"
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")
# weights of other frameworks: named in the error when they are all the folder has
OTHER_WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index")


JSON_MAX_BYTES = 256 << 20   # a tokenizer.json of a large vocabulary is tens of MB


def _read_json(path: Path):
    """A JSON file's content: a regular file under the cap, nesting Python's parser can take."""
    from navigator.workspace.atomic import read_regular

    text = read_regular(path, JSON_MAX_BYTES).decode("utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def json_object(path: Path) -> dict:
    """A JSON file holding an object (one UserInputError line otherwise)."""
    try:
        data = _read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserInputError(f"{path}: not a readable JSON file ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def is_hf_folder(path: Path) -> bool:
    """A folder with a transformers ``config.json`` (one naming a model type or architectures)."""
    config = path / CONFIG
    if not config.is_file():
        return False
    try:
        data = _read_json(config)
    except (OSError, UnicodeDecodeError, ValueError, UserInputError):
        return False
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


@dataclass
class HFFolder:
    """The files of one model folder and the JSON settings Navigator reads from them."""

    path: Path
    config: dict
    weights: list[str]                 # the weight files, relative to path (shards included)
    safetensors: bool                  # False: a pickled pytorch_model.bin (loaded weights_only)
    tokenizer_config: dict = field(default_factory=dict)
    preprocessor: dict = field(default_factory=dict)

    @property
    def tokenizer(self) -> str | None:
        """``tokenizer.json`` (the fast tokenizer the Triton step runs), when the folder has one."""
        return TOKENIZER if (self.path / TOKENIZER).is_file() else None

    def files(self) -> list[str]:
        """What the model is made of: the config, the weights, the tokenizer and processor files."""
        names = [CONFIG, *self.weights]
        for extra in (TOKENIZER, TOKENIZER_CONFIG, SPECIAL_TOKENS, PREPROCESSOR, "generation_config.json"):
            if (self.path / extra).is_file():
                names.append(extra)
        names += sorted(p.name for p in self.path.glob("*.py"))   # remote code, when there is some
        return names

    def sha256(self) -> str:
        """One digest over :meth:`files` (names, sizes, contents): what resuming compares. Other
        files of the folder (checkpoints of a training run, logs) do not count."""
        from navigator.sources.base import sha256_file

        h = hashlib.sha256(b"navigator-hf-folder-v1\n")
        for name in self.files():
            p = self.path / name
            h.update(f"{name}\0{p.stat().st_size}\0{sha256_file(p)}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()


def _shards(path: Path, index_name: str) -> list[str]:
    index = json_object(path / index_name)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserInputError(f"{path / index_name}: no weight_map")
    shards = sorted(set(map(str, weight_map.values())))
    missing = [s for s in shards if not (path / s).is_file()]
    if missing:
        raise UserInputError(f"{path / index_name}: shard {missing[0]} is missing from the folder")
    return [index_name, *shards]


def read_folder(path: str | Path, *, need_weights: bool = True) -> HFFolder:
    """The folder's config, weights and settings; one error line for a folder that cannot be a
    model (no config.json, no PyTorch weights)."""
    path = Path(path)
    if not (path / CONFIG).is_file():
        raise UserInputError(f"{path}: no config.json; a Hugging Face model folder is what save_pretrained writes")
    config = json_object(path / CONFIG)
    weights: list[str] = []
    safetensors = True
    if (path / SAFETENSORS[0]).is_file():
        weights = [SAFETENSORS[0]]
    elif (path / SAFETENSORS[1]).is_file():
        weights = _shards(path, SAFETENSORS[1])
    elif (path / PICKLED[0]).is_file():
        weights, safetensors = [PICKLED[0]], False
    elif (path / PICKLED[1]).is_file():
        weights, safetensors = _shards(path, PICKLED[1]), False
    elif need_weights:
        other = [n for n in OTHER_WEIGHTS if (path / n).is_file()]
        what = f" (it has {other[0]}, weights of another framework)" if other else ""
        raise UserInputError(f"{path}: no PyTorch weights (model.safetensors or pytorch_model.bin){what}",
                             hint="save the model with save_pretrained from transformers' PyTorch classes")
    tok_config = json_object(path / TOKENIZER_CONFIG) if (path / TOKENIZER_CONFIG).is_file() else {}
    preprocessor = json_object(path / PREPROCESSOR) if (path / PREPROCESSOR).is_file() else {}
    return HFFolder(path=path, config=config, weights=weights, safetensors=safetensors,
                    tokenizer_config=tok_config, preprocessor=preprocessor)
