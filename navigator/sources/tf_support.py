"""TensorFlow helpers: SavedModel signatures, and exporting a Keras model or a
``tf.Module`` to a SavedModel. TensorFlow is imported inside functions only:
``import navigator`` never pulls it in."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec

DEFAULT_SIGNATURE = "serving_default"
NAME_MAP_FILE = "name_map.json"     # beside the SavedModel in formats/savedmodel/
SIGNATURE_FILE = "signature.json"   # beside it too: the signature the workspace uses


def is_saved_model_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file())


def is_tf_object(obj: Any) -> bool:
    """A Keras model or a tf.Module, told by the classes' modules: tensorflow is not imported."""
    if isinstance(obj, type):
        return False
    for cls in type(obj).__mro__:
        module = getattr(cls, "__module__", "") or ""
        if module.split(".")[0] in ("keras", "tensorflow", "tf_keras"):
            return True
    return False


def _tf():
    from navigator import deps

    if not deps.has("tensorflow"):
        raise UserInputError("a TensorFlow model needs tensorflow", hint="pip install 'navigator[tensorflow]'")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # no oneDNN/CPU-feature banners on the console
    import tensorflow as tf

    return tf


def load_signature_function(path: Path, signature_name: str | None):
    """(the loaded object, the concrete function of the signature)."""
    tf = _tf()
    name = signature_name or DEFAULT_SIGNATURE
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:
        raise UserInputError(f"{path}: cannot load the SavedModel ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]})") from None
    names = sorted(loaded.signatures.keys())
    if name not in loaded.signatures:
        raise UserInputError(f"{path}: no signature {name!r}; the SavedModel has "
                             f"{', '.join(repr(n) for n in names) or 'no signatures'}",
                             hint="give --signature NAME" if names else "export it with a serving signature")
    return loaded, loaded.signatures[name]


def _spec(name: str, spec) -> TensorSpec:
    dtype = spec.dtype.as_numpy_dtype
    import numpy as np

    shape = spec.shape
    if shape.rank is None:
        raise UserInputError(f"signature tensor {name!r} has an unknown rank; export it with a fixed rank")
    return TensorSpec(name=name, dtype=str(np.dtype(dtype)), shape=[-1 if d is None else int(d)
                                                                   for d in shape.as_list()])


def function_signature(fn) -> ModelSignature:
    """Names, numpy dtypes and dims (-1 = dynamic) of a signature function."""
    args, kwargs = fn.structured_input_signature
    if args:
        raise UserInputError("the SavedModel signature takes positional inputs; serving signatures name them")
    inputs = [_spec(n, s) for n, s in sorted(kwargs.items())]   # a SavedModel stores them as a map
    outputs_struct = fn.structured_outputs
    if not isinstance(outputs_struct, dict):
        raise UserInputError("the SavedModel signature does not return a mapping of named outputs")
    outputs = [_spec(n, t) for n, t in sorted(outputs_struct.items())]
    return ModelSignature(inputs=inputs, outputs=outputs)


def saved_model_signature(path: Path, signature_name: str | None) -> ModelSignature:
    _, fn = load_signature_function(path, signature_name)
    return function_signature(fn)


def export_object(obj: Any, out_dir: Path, first_sample: Any = None) -> dict:
    """Export a Keras model (``model.export``) or a tf.Module (``tf.saved_model.save``)
    to ``out_dir``; returns {"exporter": ..., "name_map": {signature output: model output}}."""
    tf = _tf()
    out_dir = Path(out_dir)
    if _is_keras(obj):
        try:
            obj.export(str(out_dir), format="tf_saved_model", verbose=False)
        except TypeError:
            obj.export(str(out_dir))
        except Exception as e:
            raise UserInputError(f"the Keras model could not be exported to a SavedModel ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:200]})", hint="build the model (call it once) first") \
                from None
        import keras

        name_map = {}
        names = _keras_output_names(obj)
        sig = saved_model_signature(out_dir, None)
        if len(names) == len(sig.outputs):
            name_map = {o.name: n for o, n in zip(sig.outputs, names) if o.name != n}
        try:
            order = [t.name for t in obj.inputs]
        except Exception:
            order = []
        return {"exporter": f"keras {keras.__version__} model.export", "name_map": name_map, "input_order": order}
    if isinstance(obj, tf.Module):
        fn = getattr(obj, "__call__", None)  # noqa: B004 - an instance attribute counts too
        signatures = None
        concrete = None
        specs = []
        if fn is not None and hasattr(fn, "get_concrete_function"):
            try:
                concrete = fn.get_concrete_function()   # input_signature given in tf.function
            except (TypeError, ValueError):
                if first_sample is None:
                    raise UserInputError("a tf.Module whose __call__ has no input_signature needs samples") from None
                specs = _specs_from_sample(tf, first_sample, fn)
                concrete = fn.get_concrete_function(*specs)
        elif fn is not None and first_sample is not None:
            specs = _specs_from_sample(tf, first_sample, fn)
            concrete = tf.function(fn).get_concrete_function(*specs)
        if concrete is not None:
            signatures = {DEFAULT_SIGNATURE: concrete}
            if not specs:
                specs = [sp for sp in concrete.structured_input_signature[0] if isinstance(sp, tf.TensorSpec)]
        try:
            tf.saved_model.save(obj, str(out_dir), signatures=signatures)
        except Exception as e:
            raise UserInputError(f"the tf.Module could not be saved ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:200]})") from None
        return {"exporter": f"tensorflow {tf.__version__} tf.saved_model.save", "name_map": {},
                "input_order": [sp.name for sp in specs]}
    raise UserInputError(f"cannot export an object of type {type(obj).__name__}: give a Keras model or a tf.Module")


def _keras_output_names(model: Any) -> list[str]:
    """The model's own output names (functional models have output_names; a
    Sequential's come from the layers that made its outputs)."""
    names = list(getattr(model, "output_names", None) or [])
    if names:
        return names
    try:
        return [t._keras_history[0].name for t in model.outputs]
    except Exception:   # a subclassed model has no symbolic outputs
        return []


def write_signature_name(folder: Path, signature_name: str | None) -> None:
    """Which signature of the SavedModel the workspace uses, for runners (``signature.json``)."""
    (folder / SIGNATURE_FILE).write_text(json.dumps({"signature": signature_name or DEFAULT_SIGNATURE}) + "\n")


def read_signature_name(saved_model: Path) -> str:
    try:
        return json.loads((Path(saved_model).parent / SIGNATURE_FILE).read_text())["signature"]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_SIGNATURE


def _is_keras(obj: Any) -> bool:
    return any((getattr(c, "__module__", "") or "").startswith("keras") for c in type(obj).__mro__)


def _specs_from_sample(tf, sample: Any, fn: Any = None) -> list:
    """TensorSpecs from the first sample, dim 0 dynamic; named after the dict's keys,
    else the function's parameters, else input_<i>."""
    import inspect

    import numpy as np

    values = list(sample.values()) if isinstance(sample, dict) else (
        list(sample) if isinstance(sample, (list, tuple)) else [sample])
    names = [str(k) for k in sample] if isinstance(sample, dict) else []
    if not names and fn is not None:
        try:
            target = getattr(fn, "python_function", fn)
            params = [p for p in inspect.signature(target).parameters if p != "self"]
            names = params if len(params) == len(values) else []
        except (TypeError, ValueError):
            names = []
    names = names or [f"input_{i}" for i in range(len(values))]
    specs = []
    for name, v in zip(names, values):
        a = np.asarray(v)
        specs.append(tf.TensorSpec([None] + list(a.shape[1:]) if a.ndim else [], tf.as_dtype(a.dtype), name=name))
    return specs


def reorder_inputs(sig: ModelSignature, order: list[str]) -> ModelSignature:
    """The inputs in the model's own order (positional samples follow it) when ``order``
    names exactly the signature's inputs; a SavedModel alone stores them unordered."""
    if order and sorted(order) == sorted(sig.input_names):
        by_name = {t.name: t for t in sig.inputs}
        sig.inputs = [by_name[n] for n in order]
    return sig


def write_name_map(folder: Path, name_map: dict) -> None:
    if name_map:
        (folder / NAME_MAP_FILE).write_text(json.dumps(name_map, indent=1) + "\n")


def copy_tree(src: Path, dest: Path) -> None:
    """Copy a SavedModel directory to ``dest`` atomically (a temp name, then rename)."""
    import shutil

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
